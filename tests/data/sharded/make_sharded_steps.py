"""Record the corpus of sharded training steps (issue 44) with msprobe 26.2, each rank its own PrecisionDebugger.

Run it in the venv that has msprobe (mindstudio-probe 26.2, torch 2.13 CPU), from the repository root, with the
CPU kernels pinned to AVX2 as tests/conftest.py pins them:

    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \\
        .venv/bin/python tests/data/recipes/msprobe_venv.py -- tests/data/sharded/make_sharded_steps.py [STEP ...]

Each STEP (default: all of STEPS) is llama_model.py's decoder trained one step on gloo, its ranks spawned by
torch.multiprocessing, recorded at level L1 from the first forward to the optimizer step, and written to
tests/data/sharded/STEP_msprobe/ (step0/rank<R>/dump.json and, in the tensor task, dump_tensor_data/; without
stack.json and construct.json, which run_ut and compare do not read) with the msprobe_config.json it used:

- fsdp2_bf16_{tensor,statistics}: FSDP2 (``fully_shard`` on each layer and the root) with a
  ``MixedPrecisionPolicy`` of bf16 parameters and fp32 gradient reduction, clip_grad_norm_ and SGD, 2 ranks;
- fsdp2_fp32_{tensor,statistics}: its fp32 twin (no policy), the same seeds and data;
- fsdp2_badmatmul_statistics: the bf16 step with a bad sharded matmul: F.linear rounds its output to a 4-bit
  significand (patched before msprobe's PrecisionDebugger is created, so msprobe records it as Functional.linear);
- fsdp2_badreduce_statistics: the bf16 step whose gradient reduce-scatter (``dist.reduce_scatter_single``, which
  FSDP2 calls on torch 2.13) sums its ranks' fp32 gradients in bf16;
- zero1_nosync_statistics: DDP with ZeroRedundancyOptimizer (ZeRO-1), two micro-batches, the first under no_sync;
- ddp4_statistics: DDP on 4 ranks with clip_grad_norm_ and AdamW;
- fsdp1_statistics: FSDP1 (FullyShardedDataParallel, one unit per layer), clip_grad_norm_ and SGD, 2 ranks.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import llama_model  # noqa: E402

# step -> (kind, task, ranks)
STEPS = {
    **{f"fsdp2_{p}_{t}": (f"fsdp2_{p}", t, 2) for p in ("bf16", "fp32") for t in ("tensor", "statistics")},
    "fsdp2_badmatmul_statistics": ("fsdp2_badmatmul", "statistics", 2),
    "fsdp2_badreduce_statistics": ("fsdp2_badreduce", "statistics", 2),
    "zero1_nosync_statistics": ("zero1_nosync", "statistics", 2),
    "ddp4_statistics": ("ddp4", "statistics", 4),
    "fsdp1_statistics": ("fsdp1", "statistics", 2),
}


aten = torch.ops.aten  # the patched kernels call aten: msprobe records the call they stand in, not their insides


def coarse(x: torch.Tensor) -> torch.Tensor:
    """``x`` with a 4-bit significand (bf16 keeps 8), in its own dtype."""
    mantissa, exponent = aten.frexp(aten._to_copy(x, dtype=torch.float32))
    rounded = aten.div(aten.round(aten.mul(mantissa, 16)), 16)
    return aten._to_copy(aten.ldexp(rounded, exponent), dtype=x.dtype)


class _BadLinear(torch.autograd.Function):
    """A matmul kernel whose forward rounds badly; its backward is linear's own (one node, as a kernel is)."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)  # type: ignore[attr-defined]
        return coarse(aten.matmul(x, aten.t(weight)))

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, weight = ctx.saved_tensors  # type: ignore[attr-defined]
        rows = aten.reshape(grad, [-1, grad.shape[-1]])
        return aten.matmul(grad, weight), aten.mm(aten.t(rows), aten.reshape(x, [-1, x.shape[-1]]))


def bad_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    assert bias is None  # llama_model's linears have none
    return _BadLinear.apply(x, weight)


def bf16_reduce_scatter(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False, *, gather):  # noqa: A002
    """A reduce-scatter that sums the ranks' contributions in bf16, one rounding per rank added, and averages in
    bf16 when asked to (FSDP2's policy asked for an fp32 reduction; it passes ReduceOp.AVG)."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    every = aten.empty([world * input.numel()], dtype=input.dtype)
    gather(every, aten.reshape(input, [-1]), group=group)
    parts = aten.reshape(aten._to_copy(every, dtype=torch.bfloat16), [world, -1])
    total = aten.select(parts, 0, 0)
    for i in range(1, world):
        total = aten.add(total, aten.select(parts, 0, i))  # a bf16 add: rounded to bf16 each time
    if op == dist.ReduceOp.AVG:
        total = aten.div(total, world)
    mine = aten.select(aten.reshape(total, [world, -1]), 0, rank)
    aten.copy_(output, aten.reshape(mine, list(output.shape)))
    return None


def fsdp2(model: nn.Module, precision: str) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy() if precision == "fp32" else MixedPrecisionPolicy(torch.bfloat16, torch.float32)
    for layer in model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)


def build(kind: str, task: str, rank: int):
    """``(model, step)``: the wrapped model, and the step the debugger records; in the tensor task one layer and
    one sequence per rank, so that the step's tensor files stay a few hundred KB."""
    torch.manual_seed(0)
    small = task == "tensor"
    model = llama_model.Llama(layers=1 if small else llama_model.LAYERS)
    ids, labels = llama_model.batch(rank, size=1 if small else 2)
    if kind.startswith("fsdp2"):
        fsdp2(model, "fp32" if kind == "fsdp2_fp32" else "bf16")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        return model, partial(_plain, model, opt, ids, labels)
    if kind == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        policy = ModuleWrapPolicy({llama_model.Layer})
        model = FSDP(model, auto_wrap_policy=policy, use_orig_params=True, device_id=torch.device("cpu"))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        return model, partial(_plain, model, opt, ids, labels, clip=model.clip_grad_norm_)
    model = nn.parallel.DistributedDataParallel(model)
    if kind == "ddp4":
        return model, partial(_plain, model, torch.optim.AdamW(model.parameters(), lr=1e-3), ids, labels)
    from torch.distributed.optim import ZeroRedundancyOptimizer

    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1)
    more = llama_model.batch(rank + 10)
    return model, partial(_accumulated, model, opt, (ids, labels), more)


def _plain(model, opt, ids, labels, clip=None) -> None:
    model(ids, labels).backward()
    if clip is None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    else:
        clip(max_norm=1.0)
    opt.step()
    opt.zero_grad()


def _accumulated(model, opt, first, second) -> None:
    """Gradient accumulation over two micro-batches: the first's all-reduce skipped by no_sync."""
    with model.no_sync():
        (model(*first) / 2).backward()
    (model(*second) / 2).backward()
    opt.step()
    opt.zero_grad()


def rank_main(rank: int, name: str, out: str, port: str) -> None:
    kind, task, world = STEPS[name]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model, step = build(kind, task, rank)
    if kind == "fsdp2_badmatmul":
        F.linear = bad_linear  # before PrecisionDebugger wraps F.linear: msprobe records it as Functional.linear
    if kind == "fsdp2_badreduce":
        dist.reduce_scatter_single = partial(bf16_reduce_scatter, gather=dist.all_gather_into_tensor)
    from msprobe.pytorch import PrecisionDebugger

    config = Path(out) / "msprobe_config.json"
    debugger = PrecisionDebugger(config_path=str(config))
    debugger.start(model)
    step()
    debugger.stop()
    debugger.step()
    dist.barrier()
    dist.destroy_process_group()


def record(name: str, port: int) -> None:
    kind, task, world = STEPS[name]
    out = Path(tempfile.mkdtemp()) / name
    out.mkdir()
    config = {"task": task, "dump_path": str(out), "rank": [], "step": [0], "level": "L1"}
    config[task] = {"scope": [], "list": [], "data_mode": ["all"]}
    (out / "msprobe_config.json").write_text(json.dumps(config))
    mp.spawn(rank_main, args=(name, str(out), str(port)), nprocs=world)
    target = HERE / f"{name}_msprobe"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(out, target, ignore=shutil.ignore_patterns("stack.json", "construct.json"))
    print("wrote", target)


if __name__ == "__main__":
    names = sys.argv[1:] or list(STEPS)
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        sys.exit(f"unknown step {unknown[0]!r}: expected one of {', '.join(STEPS)}")
    for i, step_name in enumerate(names):
        record(step_name, 29600 + i)
