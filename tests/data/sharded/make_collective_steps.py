"""Record the sharded-training collective steps of tests/test_collective_steps.py (issue 44, items 2 and 3).

Each step runs its ranks with mp.spawn on gloo (CPU) and records them by msprobe 26.2 or by ``precheck.record``:

    .venv/bin/python tests/data/recipes/msprobe_venv.py -- tests/data/sharded/make_collective_steps.py [STEP ...]
    (PYTHONPATH=. for the steps precheck records; the msprobe venv has torch 2.13 and mindstudio-probe 26.2)

- megatron_subgroups_{tensor,statistics}: 4 ranks as Megatron-style tensor parallelism runs them (MindSpeed on
  Ascend): plain tensors, a column-parallel then row-parallel matmul whose partial sums are all_reduce'd in the
  tensor-parallel group ({0,1}, {2,3}), a broadcast and an all_gather in it, and the gradients all_reduce'd (AVG
  by hand: SUM then divide) in the data-parallel group ({0,2}, {1,3}); recorded by msprobe, and
  (megatron_subgroups_precheck_statistics) by precheck.record.
- partial_ranks_tensor: 4 ranks, msprobe's ``"rank": [0, 1]`` (only ranks 0 and 1 dump, a common way to keep
  dumps small): an all_reduce and an all_gather over the world of 4.
- async_msprobe_tensor: 2 ranks, all_reduce and broadcast with ``async_op=True`` whose program waits through the
  Work's future and a barrier, not ``Work.wait()``: msprobe records such a call's output when it returns, before the
  collective completes (its wait() hook never runs). Recorded until rank 0's all_reduce output is unfinished, so
  the committed dump holds such a record.
- async_precheck_tensor: the same step waited by ``Work.wait()``, recorded by precheck.record.
- fsdp2_bf16_tensor: 2 ranks of FSDP2 (``fully_shard`` with a bf16 MixedPrecisionPolicy) on a 2-layer MLP,
  recorded by precheck.record: torch 2.13's FSDP2 gathers parameters with ``dist.all_gather_single`` and
  reduce-scatters gradients with ``dist.reduce_scatter_single``, which msprobe's wrap list does not hold; and
  fsdp2_bf16_statistics, the same step in the statistics task.
- fsdp1_fp32_tensor: 2 ranks of FSDP1 (FullyShardedDataParallel) on the same MLP, recorded by precheck.record:
  its gradients are reduce-scattered by ``dist.reduce_scatter_single`` too.

stack.json and construct.json are left out (run_ut reads neither).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = Path(__file__).resolve().parent
ASYNC_SIZE = 4000


class _Msprobe:
    """msprobe's PrecisionDebugger around the block, configured as a user configures it (``apis``: its "list",
    the names of the calls it dumps, by substring; none: all)."""

    def __init__(self, out: str, task: str, ranks: list[int], rank: int, apis: list[str] | None = None) -> None:
        from msprobe.pytorch import PrecisionDebugger

        cfg = {"task": task, "dump_path": out, "rank": ranks, "step": [0], "level": "L1",
               task: {"scope": [], "list": apis or [], "data_mode": ["all"]}}  # fmt: skip
        path = f"{out}.rank{rank}.json"
        Path(path).write_text(json.dumps(cfg))
        self.debugger = PrecisionDebugger(config_path=path)

    def __enter__(self) -> None:
        self.debugger.start()

    def __exit__(self, *exc: object) -> None:
        self.debugger.stop()
        self.debugger.step()


def _recorder(who: str, out: str, task: str, rank: int, ranks: list[int] | None = None):
    if who == "msprobe":
        return _Msprobe(out, task, ranks or [], rank)
    import precheck

    return precheck.record(out, task=task)


def _init(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)


def megatron(rank: int, out: str, task: str, who: str = "msprobe") -> None:
    _init(rank, 4, 29641)
    tp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    tp, dp = tp_groups[rank // 2], dp_groups[rank % 2]
    torch.manual_seed(0)
    w1, w2 = torch.randn(6, 8), torch.randn(8, 6)  # the full weights, the same on every rank
    col = w1[:, (rank % 2) * 4 : (rank % 2) * 4 + 4].clone().requires_grad_()  # column shard
    row = w2[(rank % 2) * 4 : (rank % 2) * 4 + 4].clone().requires_grad_()  # row shard
    torch.manual_seed(10 + rank // 2)  # a data-parallel replica's batch: the same in its tensor-parallel group
    x = torch.randn(3, 6)
    with _recorder(who, out, task, rank):
        scale = torch.tensor([1.0 + rank])
        dist.broadcast(scale, src=2 * (rank // 2), group=tp)  # the group's first rank's, a global rank number
        hidden = torch.relu(torch.matmul(x, col))
        partial = torch.matmul(hidden, row)
        dist.all_reduce(partial, group=tp)  # the row-parallel matmul's partial sums
        loss = (partial * scale).pow(2).mean()
        loss.backward()
        pieces = [torch.empty(4) for _ in range(2)]
        dist.all_gather(pieces, col.grad.sum(0), group=tp)
        for grad in (col.grad, row.grad):
            dist.all_reduce(grad, group=dp)
            grad.div_(2)
        biggest = loss.detach().reshape(1).clone()
        dist.all_reduce(biggest, op=dist.ReduceOp.MAX, group=dp)
    dist.destroy_process_group()


def partial_ranks(rank: int, out: str, task: str) -> None:
    _init(rank, 4, 29642)
    torch.manual_seed(rank)
    with _recorder("msprobe", out, task, rank, [0, 1]):
        total = torch.randn(5) * (rank + 1)
        dist.all_reduce(total)
        gathered = [torch.empty(3) for _ in range(4)]
        dist.all_gather(gathered, torch.arange(3.0) + 10 * rank)
        total.mul(2).sum()
    dist.destroy_process_group()


def async_step(rank: int, out: str, who: str, size: int = ASYNC_SIZE, port: int = 29643) -> None:
    """An all_reduce and a broadcast started with async_op=True (``size`` elements: large enough that gloo is
    still at work when the call returns)."""
    _init(rank, 2, port)
    grads = torch.linspace(-1, 1, size) * (rank + 1)
    weights = torch.full((size // 4,), float(rank) + 0.5)
    with _recorder(who, out, "tensor", rank):
        work = dist.all_reduce(grads, async_op=True)
        other = dist.broadcast(weights, src=1, async_op=True)
        if who == "msprobe":  # waited through the future and a barrier: msprobe's wait() hook never runs
            work.get_future().wait()
            other.get_future().wait()
            dist.barrier()
        else:
            work.wait()
            other.wait()
        grads.mul_(0.5)  # the program's next use of the result, in place (recorded: Tensor.mul_)
    dist.destroy_process_group()


def fsdp2(rank: int, out: str, task: str) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    _init(rank, 2, 29644)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    for layer in (model[0], model[2]):
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1 + rank)
    x = torch.randn(4, 8)
    with _recorder("precheck", out, task, rank):
        loss = model(x).float().pow(2).mean()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()


def fsdp1(rank: int, out: str, task: str) -> None:
    """FSDP1 (FullyShardedDataParallel) on CPU: its gradients reduce-scattered by dist.reduce_scatter_single."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    _init(rank, 2, 29645)
    torch.manual_seed(0)
    model = FullyShardedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)),
        device_id=torch.device("cpu"),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1 + rank)
    x = torch.randn(4, 8)
    with _recorder("precheck", out, task, rank):
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()


STEPS = {
    "megatron_subgroups_tensor": (megatron, 4, ("tensor",)),
    "megatron_subgroups_statistics": (megatron, 4, ("statistics",)),
    "megatron_subgroups_precheck_statistics": (megatron, 4, ("statistics", "precheck")),
    "partial_ranks_tensor": (partial_ranks, 4, ("tensor",)),
    "async_msprobe_tensor": (async_step, 2, ("msprobe",)),
    "async_precheck_tensor": (async_step, 2, ("precheck", 2000)),
    "fsdp2_bf16_tensor": (fsdp2, 2, ("tensor",)),
    "fsdp2_bf16_statistics": (fsdp2, 2, ("statistics",)),
    "fsdp1_fp32_tensor": (fsdp1, 2, ("tensor",)),
}


def _unfinished(step: Path) -> bool:
    """Whether rank 0's recorded all_reduce output is not yet the sum of both ranks' inputs."""
    data = step / "rank0" / "dump_tensor_data"
    done = torch.load(data / "Distributed.all_reduce.0.forward.output.0.pt")
    return not torch.equal(done, torch.linspace(-1, 1, ASYNC_SIZE) * 3)


def keep_dump(out: str, target: Path) -> None:
    """The recorded step folder ``out/dump`` kept as ``target``, without stack.json and construct.json (no input of
    run_ut): the recipes' one way to replace a fixture."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(f"{out}/dump", target, ignore=shutil.ignore_patterns("stack.json", "construct.json"))
    print("wrote", target)


def record(name: str) -> None:
    func, world, args = STEPS[name]
    for attempt in range(20):
        out = tempfile.mkdtemp()
        mp.spawn(func, args=(f"{out}/dump", *args), nprocs=world)
        if name != "async_msprobe_tensor" or _unfinished(Path(out) / "dump" / "step0"):
            break
        print("attempt", attempt, "recorded a finished all_reduce: again")
    keep_dump(out, HERE / name)


if __name__ == "__main__":
    for step in sys.argv[1:] or STEPS:
        record(step)
