"""Record the pipeline-parallel steps of tests/test_pipeline_p2p.py (issue 51 item 1, issue 50 items 7 and 10).

Each step runs its ranks with mp.spawn on gloo (CPU) and records them by msprobe 26.2 (PrecisionDebugger, level L1)
or by ``precheck.record``:

    .venv/bin/python tests/data/recipes/msprobe_venv.py -- tests/data/sharded/make_pipeline_steps.py [STEP ...]
    (PYTHONPATH=. for the steps precheck records; the msprobe venv has torch 2.13 and mindstudio-probe 26.2)

- pipeline_gpipe_statistics: 2 ranks, ``torch.distributed.pipelining`` as a user runs it: a 3-layer MLP cut
  into 2 ``PipelineStage``s (one per rank) and stepped by ``ScheduleGPipe`` over 2 microbatches. The stages infer
  their shapes by ``send``/``recv`` and ``send_object_list``/``recv_object_list`` (one-op ``batch_isend_irecv``s
  whose Work the program pops out of the returned list), then move activations forward and gradients back with
  ``isend(group_dst=)`` / ``irecv(group_src=)``.
- pipeline_1f1b_statistics: the same model stepped by ``Schedule1F1B`` over 4 microbatches: its steady state sends
  and receives in one ``batch_isend_irecv`` of two ``P2POp``s.
- pipeline_{gpipe,1f1b}_bug0_statistics: those steps with a bug on stage 0 alone (as moe_bug1_statistics has one on
  rank 1): its first linear computes in bf16 (make_moe_steps' ``_low_precision``, patched before msprobe wraps the
  API). Stage 1 runs the same code in both and receives stage 0's activations: tests/test_compare_steps_p2p.py
  compares each with its clean twin, the bug named on rank 0 and reaching rank 1 through the receive.
- p2p_calls_{statistics,tensor}: 4 ranks, every point-to-point spelling by hand, in the pipeline groups {0,2} and
  {1,3} (a group rank is not the global rank there): ``send``/``recv`` with ``dst``/``src``, ``isend``/``irecv``
  and ``send``/``recv`` with ``group_dst``/``group_src`` and a tag, ``batch_isend_irecv`` of ``P2POp``s both ways
  (``group_peer``), ``broadcast(group_src=1)``, and ``gather`` over the world with its default dst (torch's
  default, global rank 0: the record names no dst at all). Only calls of torch.distributed are recorded (every
  tensor is made before), which keeps the tensor dump small.
- p2p_calls_precheck_statistics: that step recorded by precheck.record (it writes a P2POp as null).

What msprobe 26.2 records of them on gloo (precheck.ranks.p2p reads these as they are):
- a ``P2POp`` as ``{"class_type": "torch.distributed.P2POp", "tensor": {...}, "op": "isend"|"irecv", "peer": R,
  "tag": T, "group_id": "8 hex digits"}``; ``peer`` is the global rank, ``group_id`` the crc32 of the group's
  ranks as a Python list (``"[0, 2]"``), and no record says which ranks a group_id names;
- a receive's tensor as given is null (``recv``/``irecv``'s ``input_args`` is ``[null]``); an ``isend``'s output
  tensor is null;
- ``batch_isend_irecv``'s output at its return, before its receives complete: on gloo its Works are the inner
  ``isend``/``irecv`` calls', whose wait hook fires instead of the batch's, so a batch's received tensor is its
  buffer as given (zeros, or ``torch.empty``'s garbage);
- and that inner call's wait hook rewrites the output of the rank's last recorded ``isend``/``irecv`` record with
  the batch op's tensor and arguments (rank 2's ``irecv.0`` of p2p_calls shows the (3, 2) tensor and tag 5 of its
  later ``batch_isend_irecv.0``; in pipeline_1f1b, rank 1's ``irecv.0`` shows the last batch's activation).

stack.json and construct.json are left out (run_ut reads neither).
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
from make_collective_steps import _Msprobe, keep_dump  # noqa: E402  (msprobe's debugger as its steps configure it)
from make_moe_steps import _low_precision  # noqa: E402  (the MoE twin's bug: one linear in bf16)


def _recorder(who: str, out: str, task: str, rank: int):
    if who == "msprobe":
        return _Msprobe(out, task, [], rank)  # every rank dumps
    import precheck

    return precheck.record(out, task=task)


def _init(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)


def pipeline(
    rank: int, out: str, task: str, schedule: str, port: int, who: str = "msprobe", bug: int | None = None
) -> None:
    """Two pipeline stages of a small MLP, one per rank, run by torch.distributed.pipelining's ``schedule``; on rank
    ``bug`` the stage's first linear computes in bf16."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    _init(rank, 2, port)
    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3)]
    stage_module = torch.nn.Sequential(*(layers[:2] if rank == 0 else layers[2:]))
    stage = PipelineStage(stage_module, rank, 2, torch.device("cpu"))
    microbatches = {"gpipe": 2, "1f1b": 4}[schedule]
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    runner = kind(stage, microbatches, loss_fn=lambda out, target: (out - target).pow(2).mean())
    torch.manual_seed(1)
    x, target = torch.randn(2 * microbatches, 4), torch.randn(2 * microbatches, 3)
    if rank == bug:
        _low_precision(stage_module[0].weight)
    with _recorder(who, out, task, rank):
        if rank == 0:
            runner.step(x)
        else:
            losses: list[torch.Tensor] = []
            runner.step(target=target, losses=losses)
    dist.destroy_process_group()


def p2p_calls(rank: int, out: str, task: str, port: int, who: str = "msprobe") -> None:
    """Every point-to-point spelling in the pipeline groups {0,2} and {1,3}: group rank 0 sends, group rank 1
    receives (group_dst=1 is global rank 2 or 3)."""
    _init(rank, 4, port)
    groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    pp, me = groups[rank % 2], rank // 2  # my pipeline group, my rank in it
    base = torch.arange(6.0).reshape(2, 3) + 10 * rank  # every tensor made before recording: only calls of
    sent = [base * 1.5, base + 0.25, base - 1, base.t().contiguous() * (me + 2)]  # torch.distributed are recorded
    got, there = torch.zeros(2, 3), torch.zeros(3, 2)
    scale, mine = torch.full((2,), 1.0 + rank), torch.full((2,), 0.5 * rank)
    pieces = [torch.zeros(2) for _ in range(4)] if rank == 0 else None
    with _recorder(who, out, task, rank):
        if me == 0:
            dist.send(sent[0], dst=rank + 2)  # plain, in the default group
            dist.isend(sent[1], group=pp, group_dst=1, tag=3).wait()
            dist.send(sent[2], group=pp, group_dst=1, tag=7)
        else:
            dist.recv(got, src=rank - 2)
            dist.irecv(got, group=pp, group_src=0, tag=3).wait()
            dist.recv(got, group=pp, group_src=0, tag=7)
        ops = [dist.P2POp(dist.isend, sent[3], group=pp, group_peer=1 - me, tag=5),
               dist.P2POp(dist.irecv, there, group=pp, group_peer=1 - me, tag=5)]  # fmt: skip
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        dist.broadcast(scale, group=pp, group_src=1)  # the group's rank 1: global rank 2 or 3
        dist.gather(mine, gather_list=pieces)  # no dst, no group_dst: torch's default, global rank 0
    dist.destroy_process_group()


STEPS = {
    "pipeline_gpipe_statistics": (pipeline, 2, ("statistics", "gpipe", 29671)),
    "pipeline_1f1b_statistics": (pipeline, 2, ("statistics", "1f1b", 29672)),
    "pipeline_gpipe_bug0_statistics": (pipeline, 2, ("statistics", "gpipe", 29676, "msprobe", 0)),
    "pipeline_1f1b_bug0_statistics": (pipeline, 2, ("statistics", "1f1b", 29677, "msprobe", 0)),
    "p2p_calls_statistics": (p2p_calls, 4, ("statistics", 29673)),
    "p2p_calls_tensor": (p2p_calls, 4, ("tensor", 29674)),
    "p2p_calls_precheck_statistics": (p2p_calls, 4, ("statistics", 29675, "precheck")),
}


def record(name: str) -> None:
    func, world, args = STEPS[name]
    out = tempfile.mkdtemp()
    mp.spawn(func, args=(f"{out}/dump", *args), nprocs=world)
    keep_dump(out, HERE / name)


if __name__ == "__main__":
    for step in sys.argv[1:] or STEPS:
        record(step)
