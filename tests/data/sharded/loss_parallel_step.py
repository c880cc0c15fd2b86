"""A tensor-parallel loss on 2 gloo ranks, for ``precheck record`` (tests/test_record_pipeline.py) and msprobe 26.2
(make_pipeline_record.py) to record:

    python loss_parallel_step.py OUT [--msprobe CONFIG | --library [TASK]]

Logits sharded on the vocabulary (``Shard(1)``), their cross_entropy and its backward under ``loss_parallel()``:
DTensor propagates the shapes of several of its calls on FakeTensors (Tensor.__ne__, Torch.where, Torch.scatter
...), and msprobe records those calls with ``"type": "torch._subclasses.fake_tensor.FakeTensor"`` and no
statistics. Recorded (step 0) by msprobe's PrecisionDebugger with ``--msprobe CONFIG``, or by ``precheck.record``
with ``--library`` (OUT/dump, in TASK: tensor by default), each started before the loss and stopped after its
backward. Each rank writes its loss, exactly (float.hex), to OUT/loss<R>.txt.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F


def main(rank: int, out: str, how: str | None, config: str | None) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import loss_parallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    debugger = None
    if how == "msprobe":
        from msprobe.pytorch import PrecisionDebugger

        debugger = PrecisionDebugger(config_path=config)
    elif how == "library":
        import precheck

        debugger = precheck.record(os.path.join(out, "dump"), steps=[0], task=config or "tensor")
    torch.manual_seed(0)
    logits = distribute_tensor(torch.randn(4, 8, requires_grad=True), mesh, [Shard(1)])
    labels = torch.randint(0, 8, (4,))
    if debugger is not None:
        debugger.start()
    with loss_parallel():
        loss = F.cross_entropy(logits, labels)
        loss.backward()
    if debugger is not None:
        debugger.stop()
        debugger.step()
    with open(os.path.join(out, f"loss{rank}.txt"), "w") as f:
        f.write(loss.full_tensor().item().hex() + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    option = sys.argv[2] if len(sys.argv) > 2 else None
    chosen = {"--msprobe": "msprobe", "--library": "library"}.get(option) if option else None
    mp.spawn(main, args=(os.path.abspath(sys.argv[1]), chosen, sys.argv[3] if len(sys.argv) > 3 else None), nprocs=2)
