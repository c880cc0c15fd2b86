"""Record 2-rank tensor-parallel steps of an embedding and a loss-parallel head with msprobe 26.2 on CPU/gloo, for
tests/test_whole_calls.py.

Run it in the msprobe venv (torch 2.13 CPU + mindstudio-probe), from the repository root:

    .venv/bin/python tests/data/recipes/msprobe_venv.py -- tests/data/sharded/make_whole_steps.py [STEP ...]

(default: all of
STEPS), each written to tests/data/sharded/STEP/step0/rank0, rank1 (tensor task, level L1; msprobe's stack.json and
construct.json left out, as they are no input of run_ut).

The model is torchtitan's ends, tiny: a vocab-parallel embedding (``RowwiseParallel(input_layouts=Replicate())`` on
``nn.Embedding``: DTensor masks the ids outside each rank's rows, ``_MaskPartial``, which msprobe writes as
``Partial(sum)`` with the local output before masking) and an output head ``ColwiseParallel(use_local_output=False)``
whose Shard(-1) logits go to ``F.cross_entropy`` under ``loss_parallel()``. Only ``embedding``, ``linear`` and
``cross_entropy`` are recorded (msprobe's ``list``).

- tp_vocab_tensor_msprobe: the clean step;
- tp_dropout_tensor_msprobe: the same with a dropout between embedding and head seeded per rank (unsynced), so
  the head's Replicate input differs between the ranks.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
STEPS = {"tp_vocab_tensor_msprobe": ("29641", False), "tp_dropout_tensor_msprobe": ("29642", True)}
VOCAB, DIM, BATCH, SEQ = 8, 4, 2, 3


class Ends(nn.Module):
    """An embedding and an output head: a language model without its layers."""

    def __init__(self, dropout: bool) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.out = nn.Linear(DIM, VOCAB, bias=False)
        self.dropout = dropout

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.tok(ids)
        if self.dropout:
            h = F.dropout(h, 0.5)
        return self.out(h)


def rank_main(rank: int, out: str, port: str, dropout: bool) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        loss_parallel,
        parallelize_module,
    )

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    model = Ends(dropout)
    plan = {
        "tok": RowwiseParallel(input_layouts=Replicate()),  # torchtitan's vocab-parallel embedding
        "out": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),  # logits for loss_parallel
    }
    parallelize_module(model, mesh, plan)
    torch.manual_seed(1)  # the ranks see the same batch
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    labels = torch.randint(0, VOCAB, (BATCH, SEQ))
    if dropout:
        torch.manual_seed(2 + rank)  # each rank its own dropout mask: the head's Replicate input differs
    from msprobe.pytorch import PrecisionDebugger

    debugger = PrecisionDebugger(config_path=str(Path(out) / "msprobe_config.json"))
    debugger.start(model)
    logits = model(ids)
    with loss_parallel():
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        loss.backward()
    debugger.stop()
    debugger.step()
    dist.destroy_process_group()


def record(name: str) -> None:
    port, dropout = STEPS[name]
    out = HERE / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    config = {"task": "tensor", "dump_path": str(out), "rank": [], "step": [0], "level": "L1"}
    config["tensor"] = {"scope": [], "list": ["embedding", "linear", "cross_entropy"], "data_mode": ["all"]}
    (out / "msprobe_config.json").write_text(json.dumps(config))
    mp.spawn(rank_main, args=(str(out), port, dropout), nprocs=2)
    for rank in (out / "step0").glob("rank*"):
        for extra in ("stack.json", "construct.json"):
            (rank / extra).unlink(missing_ok=True)


if __name__ == "__main__":
    for step in sys.argv[1:] or list(STEPS):
        record(step)
