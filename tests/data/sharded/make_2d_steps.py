"""Record FSDP2 over tensor and sequence parallelism on a 2 x 2 mesh, as torchtitan runs it (issue 51 item 9).

Run it in the venv that has msprobe (mindstudio-probe 26.2, torch 2.13 CPU), from the repository root:

    .venv/bin/python tests/data/recipes/msprobe_venv.py -- tests/data/sharded/make_2d_steps.py [STEP ...]
    (PYTHONPATH=. for the step precheck records)

4 gloo ranks on a mesh ("dp", "tp") of 2 x 2 train llama_model.py's decoder (one layer, one sequence per rank)
one step: its ``tp`` dimension split by a TP + SP plan (the embedding row-parallel by vocabulary, its output
sharded by sequence; the norms SequenceParallel; q/k/v, gate and up ColwiseParallel; o and down RowwiseParallel
back to sequence shards; the head ColwiseParallel, its logits replicated), then ``fully_shard`` on the ``dp``
dimension (each layer and the root), clip_grad_norm_ and SGD. A weight that tensor parallelism shards on dim 0
(q, k, v, gate, up, head) is sharded on dim 0 again by FSDP2: DTensor lays it out ``(_StridedShard(0,
split_factor=2), Shard(0))``, which msprobe 26.2 writes without its first placement (precheck.dump.sharding
rebuilds it). The data-parallel ranks (0 and 2, 1 and 3 share a ``tp`` group) see their own sequences.

- fsdp2_tp_sp_statistics_msprobe: the step recorded by msprobe (statistics task, level L1, from the first forward
  to the optimizer's step);
- fsdp2_tp_sp_norms_tensor_msprobe: the same in the tensor task, only the clipping's norms recorded (msprobe's
  ``list``: ``_foreach_norm`` takes every gradient, seven of them laid out by a _StridedShard), so that its whole
  calls are graded (a statistics dump has no shards to put together) and the fixture stays small;
- fsdp2_tp_sp_tensor_msprobe, fsdp2_tp_sp_statistics_precheck (precheck.record): the whole step in the tensor
  task, and the statistics step recorded by precheck: run and counted by hand, not committed (1 MB and 540 KB).

Each run also trains the step bare (no recorder): every rank's loss, and the sum of its parameters after the
step, must be bit-identical bare and recorded (the recipe stops otherwise). stack.json and construct.json are
left out (run_ut reads neither).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import llama_model  # noqa: E402
from make_collective_steps import _Msprobe, _recorder, keep_dump  # noqa: E402  (msprobe's debugger, precheck.record)

# step -> (recorder, task, msprobe's list: the APIs recorded, all when empty)
STEPS = {
    "fsdp2_tp_sp_statistics_msprobe": ("msprobe", "statistics", []),
    "fsdp2_tp_sp_norms_tensor_msprobe": ("msprobe", "tensor", ["norm", "reciprocal"]),
    "fsdp2_tp_sp_tensor_msprobe": ("msprobe", "tensor", []),
    "fsdp2_tp_sp_statistics_precheck": ("precheck", "statistics", []),
}
MESH, TP = (2, 2), 2


def parallelized(rank: int) -> torch.nn.Module:
    """llama_model's decoder (one layer) under the TP + SP plan on ``tp``, then fully_shard on ``dp``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", MESH, mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = llama_model.Llama(layers=1)
    colwise_sp = ColwiseParallel(input_layouts=Shard(1))  # its input all-gathered from sequence shards
    parallelize_module(model, mesh["tp"], {
        "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })  # fmt: skip
    for layer in model.layers:
        layer.attn.heads = llama_model.HEADS // TP
        parallelize_module(layer, mesh["tp"], {
            "attn_norm": SequenceParallel(),
            "attn": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                       desired_input_layouts=(Replicate(), None, None)),
            "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.o": RowwiseParallel(output_layouts=Shard(1)),
            "mlp_norm": SequenceParallel(),
            "gate": colwise_sp, "up": colwise_sp,
            "down": RowwiseParallel(output_layouts=Shard(1)),
        })  # fmt: skip
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model


def rank_main(rank: int, out: str, recorder: str | None, task: str, apis: list[str]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29650 + (recorder is not None) * 2 + (task == "tensor")))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=4)
    model = parallelized(rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ids, labels = llama_model.batch(rank // TP, size=1)  # a dp rank's own sequence, the same across its tp group
    if recorder is None:
        loss = _step(model, optimizer, ids, labels)
    else:
        made = _Msprobe(f"{out}/dump", task, [], rank, apis) if apis else _recorder(recorder, f"{out}/dump", task, rank)
        with made:
            loss = _step(model, optimizer, ids, labels)
    total = sum(p.detach().full_tensor().double().sum().item() for p in model.parameters())
    Path(out, f"loss{rank}.txt").write_text(f"{loss.hex()} {total.hex()}\n")
    dist.barrier()
    dist.destroy_process_group()


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, ids: torch.Tensor, labels: torch.Tensor) -> float:
    loss = model(ids, labels)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def _trained(recorder: str | None, task: str, apis: list[str]) -> tuple[str, list[str]]:
    out = tempfile.mkdtemp()
    mp.spawn(rank_main, args=(out, recorder, task, apis), nprocs=4)
    return out, [Path(out, f"loss{r}.txt").read_text() for r in range(4)]


def record(name: str) -> None:
    recorder, task, apis = STEPS[name]
    _, bare = _trained(None, task, [])
    out, recorded = _trained(recorder, task, apis)
    if bare != recorded:
        sys.exit(f"{name}: losses or parameters recorded {recorded} differ from bare {bare}")
    print(name, "losses and parameters bit-identical bare and recorded:", " ".join(x.split()[0] for x in bare))
    keep_dump(out, HERE / name)


if __name__ == "__main__":
    for step in sys.argv[1:] or list(STEPS)[:2]:  # the committed fixtures by default
        record(step)
