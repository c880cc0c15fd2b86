"""Record the MoE expert-parallel steps of tests/test_all_to_all.py (issue 51 item 3): dispatch and combine by
all-to-all with uneven split sizes.

Each step runs 2 ranks with mp.spawn on gloo (CPU) and records them by msprobe 26.2 or by ``precheck.record``:

    .venv/bin/python tests/data/recipes/msprobe_venv.py -- tests/data/sharded/make_moe_steps.py [STEP ...]
    (PYTHONPATH=. for the steps precheck records; the msprobe venv has torch 2.13 and mindstudio-probe 26.2)

The step is a top-1 mixture of experts with one expert per rank, as Megatron's and DeepSpeed's expert parallelism
run it: each rank routes its tokens (a linear router, softmax, the top expert and its gate), sorts them by expert,
exchanges the per-expert counts with an even ``all_to_all_single`` of an int64 tensor, dispatches the tokens with
``all_to_all_single(output, input, output_split_sizes, input_split_sizes)`` (an autograd Function, as Megatron's
``_AllToAll``: its backward is the all-to-all with the splits swapped, recorded as a forward call of its own), runs
its expert (linear, relu), combines the results back with the splits swapped, unsorts them and scales them by the
gate; the loss's backward runs through both all-to-alls. Then the same dispatch by ``all_to_all`` with lists, one
tensor per peer: gloo's list form takes tensors of one size only, so each is padded with zero rows to the expert's
capacity (6 tokens), as GShard's capacity-bound dispatch does.

- moe_{statistics,tensor}: rank 0 sends 4 tokens to expert 0 and 2 to expert 1, rank 1 sends 1 and 5;
- moe_zero_{statistics,tensor}: rank 1 sends 0 tokens to expert 0 (all 6 to its own expert): an empty chunk,
  which msprobe records with null statistics;
- moe_zero_a2a_tensor: moe_zero's tensor dump of its forward dispatch, combine and list all-to-all alone
  (msprobe's "list"), their call numbers as in the whole dump;
- moe_precheck_statistics: moe recorded by precheck.record, to hold its records against msprobe's (on torch 2.13
  and msprobe 26.2 its dump.json files are msprobe's byte for byte).
- moe_bug1_statistics: moe with a bug on rank 1 alone (issue 51 item 7): its expert's linear computes in bf16 and
  returns fp32, patched into ``torch.nn.functional.linear`` before msprobe's PrecisionDebugger is made, so msprobe
  records it as the ``Functional.linear.1`` it wraps. Its twin is moe_statistics (rank 0 runs the same code in
  both): tests/test_compare_steps.py compares the two step folders, the bug's rows reaching rank 0 through the
  combine's all-to-all.

Committed: the four statistics dumps and moe_zero_a2a_tensor (about 260 KB together; a whole tensor dump holds a
file per tensor, 350 KB; moe_zero's is the one with an empty chunk). stack.json and construct.json are left out
(run_ut reads neither).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_collective_steps import _Msprobe, _recorder, keep_dump  # noqa: E402  (msprobe's PrecisionDebugger, precheck.record)

HERE = Path(__file__).resolve().parent
HIDDEN = 4
CAPACITY = 6  # each expert's slots per rank in the list form (GShard's capacity): a rank's tokens, all of them
# each rank's token count per expert: rank -> [to expert 0, to expert 1]
ROUTES = {"moe": [[4, 2], [1, 5]], "moe_zero": [[3, 3], [0, 6]]}


class _AllToAll(torch.autograd.Function):
    """Megatron's autograd all-to-all: rows out by ``input_splits``, in by ``output_splits``; backward swapped."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, output_splits: list[int], input_splits: list[int]) -> torch.Tensor:
        ctx.splits = (output_splits, input_splits)
        out = x.new_empty((sum(output_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), output_splits, input_splits)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        output_splits, input_splits = ctx.splits
        back = grad.new_empty((sum(input_splits), *grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), input_splits, output_splits)
        return back, None, None


def _tokens(router: torch.nn.Linear, rank: int, counts: list[int]) -> torch.Tensor:
    """This rank's batch: tokens the router sends to each expert as many times as ``counts`` says, shuffled."""
    gen = torch.Generator().manual_seed(100 + rank)
    candidates = torch.randn(200, HIDDEN, generator=gen)
    with torch.no_grad():
        expert = router(candidates).argmax(-1)
    picked = torch.cat([candidates[expert == e][:n] for e, n in enumerate(counts)])
    return picked[torch.randperm(len(picked), generator=gen)]


def _low_precision(weight: torch.Tensor) -> None:
    """The bug of moe_bug1: ``F.linear`` of ``weight`` computed in bf16 (its result returned in fp32), any other
    linear as it was. Patched before msprobe wraps the API, so msprobe's wrapper calls it as the API itself."""
    honest = torch.nn.functional.linear

    def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        if w is not weight:
            return honest(x, w, b)
        low = None if b is None else b.to(torch.bfloat16)
        return honest(x.to(torch.bfloat16), w.to(torch.bfloat16), low).to(x.dtype)

    torch.nn.functional.linear = linear


def moe(
    rank: int, out: str, task: str, who: str, step: str, port: int, apis: list[str] | None = None,
    bug: int | None = None,
) -> None:  # fmt: skip
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    router = torch.nn.Linear(HIDDEN, 2)  # the same on both ranks
    torch.manual_seed(10 + rank)
    expert_layer = torch.nn.Linear(HIDDEN, HIDDEN)  # this rank's expert
    x = _tokens(router, rank, ROUTES[step][rank]).requires_grad_()  # a previous layer's activations
    if rank == bug:
        _low_precision(expert_layer.weight)
    with _Msprobe(out, task, [], rank, apis) if apis else _recorder(who, out, task, rank):
        probs = torch.softmax(router(x), dim=-1)
        gate, expert = probs.max(dim=-1)
        order = torch.argsort(expert, stable=True)
        input_splits = torch.bincount(expert, minlength=2)
        output_splits = torch.empty_like(input_splits)
        dist.all_to_all_single(output_splits, input_splits)  # the counts: an even split
        ins, outs = input_splits.tolist(), output_splits.tolist()
        dispatched = _AllToAll.apply(x[order], outs, ins)
        hidden = torch.relu(expert_layer(dispatched))
        combined = _AllToAll.apply(hidden, ins, outs)
        y = combined[torch.argsort(order)] * gate.unsqueeze(-1)
        y.pow(2).mean().backward()
        chunks = [torch.cat([c, c.new_zeros(CAPACITY - len(c), HIDDEN)]) for c in x.detach()[order].split(ins)]
        received = [torch.empty(CAPACITY, HIDDEN) for _ in outs]
        dist.all_to_all(received, chunks)  # the list form of the dispatch: gloo's needs equal sizes, so padded
    dist.destroy_process_group()


# msprobe's "list" (names by substring) for a tensor dump of the dispatch, the combine and the list form alone
A2A = ["Distributed.all_to_all_single.1.", "Distributed.all_to_all_single.2.", "Distributed.all_to_all.0."]
STEPS = {  # name -> (the routes, task, recorder, port, msprobe's list[, the rank whose expert is bf16])
    "moe_statistics": ("moe", "statistics", "msprobe", 29651, None),
    "moe_tensor": ("moe", "tensor", "msprobe", 29652, None),
    "moe_zero_statistics": ("moe_zero", "statistics", "msprobe", 29653, None),
    "moe_zero_tensor": ("moe_zero", "tensor", "msprobe", 29654, None),
    "moe_zero_a2a_tensor": ("moe_zero", "tensor", "msprobe", 29656, A2A),
    "moe_precheck_statistics": ("moe", "statistics", "precheck", 29655, None),
    "moe_bug1_statistics": ("moe", "statistics", "msprobe", 29657, None, 1),
}


def record(name: str, into: Path = HERE) -> None:
    step, task, who, port, apis, *bug = STEPS[name]
    out = tempfile.mkdtemp()
    mp.spawn(moe, args=(f"{out}/dump", task, who, step, port, apis, *bug), nprocs=2)
    keep_dump(out, into / name)


if __name__ == "__main__":
    for each in sys.argv[1:] or STEPS:
        record(each)
