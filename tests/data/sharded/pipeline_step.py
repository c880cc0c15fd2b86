"""Two training steps of a small MLP cut into 2 pipeline stages on 2 gloo ranks, for ``precheck record`` to run as
it is (tests/test_record_pipeline.py) and msprobe 26.2 to record beside it (make_pipeline_record.py):

    python pipeline_step.py KIND OUT [--msprobe CONFIG | --library [TASK]]

KIND is ``gpipe`` or ``1f1b`` (torch.distributed.pipelining: a PipelineStage per rank and ScheduleGPipe or
Schedule1F1B over 4 micro-batches; torch sends activations and gradients with isend/irecv, and with
batch_isend_irecv where a batch mixes sends and receives) or ``hand`` (the stages exchange by hand: one
``dist.batch_isend_irecv`` of an isend and an irecv each way in the forward, one in the backward, as Megatron's
p2p_communication does; stage 0 waits for its send after the optimizer's update). Rank 0 holds stage 0, rank 1
stage 1 and the loss, so rank 1's step starts by receiving, before its first module forward. Ranks meet at a file
in OUT and each writes its two steps' losses (rank 1's; rank 0's are 0), exactly (float.hex), to OUT/loss<R>.txt.

Step 0 is recorded by msprobe's PrecisionDebugger with ``--msprobe CONFIG`` (a venv with mindstudio-probe),
placed as its guide places it: made before the model, start() at the top of the iteration (before the schedule's
step(), before a hand exchange), stop() and step() before the optimizer's update (where ``precheck record``'s step
ends). With ``--library`` it is recorded by ``precheck.record`` placed where msprobe's is (OUT/dump, in TASK: tensor by
default); run under
``precheck record -o DUMP --`` it is recorded as a program that knows nothing of precheck.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

MICRO, BATCH, DIM = 4, 8, 8


def stages() -> nn.Sequential:
    """The whole model, the same on both ranks (seeded); rank R keeps stage R, as a manual split does."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Sequential(nn.Linear(DIM, 16), nn.GELU(), nn.Linear(16, 16)),
        nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4)),
    )


def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + n)
    return torch.randn(BATCH, DIM, generator=generator), torch.randn(BATCH, 4, generator=generator)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(output, target)


def scheduled(kind: str, rank: int, stage: nn.Module) -> object:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    pipe = PipelineStage(stage, rank, 2, torch.device("cpu"))
    schedule = ScheduleGPipe if kind == "gpipe" else Schedule1F1B
    return schedule(pipe, n_microbatches=MICRO, loss_fn=loss_fn)


def by_schedule(schedule: object, rank: int, data: tuple) -> float:
    x, y = data
    if rank == 0:
        schedule.step(x)
        return 0.0
    losses: list = []
    schedule.step(target=y, losses=losses)
    return float(sum(loss.item() for loss in losses))


def by_hand(stage: nn.Module, rank: int, data: tuple, buffers: dict) -> float:
    """One step with the stages exchanging by hand: activations forward, a scale back, gradients back. Stage 0
    waits for its activations' send only after the optimizer's update, as a pipeline that overlaps its sends does
    (gloo's send has no future, and a second wait() of it waits for ever)."""
    x, y = data
    peer = 1 - rank
    if rank == 0:
        h = stage(x)
        scale = buffers["scale"]
        sent, received = dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, h.detach(), peer), dist.P2POp(dist.irecv, scale, peer)]
        )
        received.wait()
        buffers["sent"] = sent  # waited once the step is over, as an overlapped send is
        grad = buffers["grad"]
        for work in dist.batch_isend_irecv([dist.P2POp(dist.irecv, grad, peer)]):
            work.wait()
        (h * scale).backward(grad)
        return 0.0
    received = buffers["activation"]
    works = dist.batch_isend_irecv(
        [dist.P2POp(dist.irecv, received, peer), dist.P2POp(dist.isend, torch.full((1,), 0.5), peer)]
    )
    for work in works:
        work.wait()
    h = received.clone().requires_grad_()
    loss = loss_fn(stage(h * 0.5), y)
    loss.backward()
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, h.grad, peer)]):
        work.wait()
    return loss.item()


def main(rank: int, kind: str, out: str, how: str | None, config: str | None) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=2)
    debugger = None
    if how == "msprobe":
        from msprobe.pytorch import PrecisionDebugger

        debugger = PrecisionDebugger(config_path=config)
    elif how == "library":
        import precheck

        debugger = precheck.record(os.path.join(out, "dump"), steps=[0], task=config or "tensor")
    stage = stages()[rank]
    optimizer = torch.optim.SGD(stage.parameters(), lr=0.1)
    schedule = None if kind == "hand" else scheduled(kind, rank, stage)
    buffers = {"activation": torch.zeros(BATCH, 16), "scale": torch.zeros(1), "grad": torch.zeros(BATCH, 16)}
    losses = []
    for n in range(2):
        data = batch(n)
        if debugger is not None and n == 0:
            debugger.start()
        if schedule is None:
            losses.append(by_hand(stage, rank, data, buffers))
        else:
            losses.append(by_schedule(schedule, rank, data))
        if debugger is not None and n == 0:  # where precheck record's step ends: before the optimizer's update
            debugger.stop()
            debugger.step()
        optimizer.step()
        optimizer.zero_grad()
        if "sent" in buffers:
            buffers.pop("sent").wait()
    with open(os.path.join(out, f"loss{rank}.txt"), "w") as f:
        f.write(" ".join(x.hex() for x in losses) + "\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    option = sys.argv[3] if len(sys.argv) > 3 else None
    chosen = {"--msprobe": "msprobe", "--library": "library"}.get(option) if option else None
    mp.spawn(
        main,
        args=(sys.argv[1], os.path.abspath(sys.argv[2]), chosen, sys.argv[4] if len(sys.argv) > 4 else None),
        nprocs=2,
    )
