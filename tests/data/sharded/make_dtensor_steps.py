"""Record 2-rank sharded training steps (DTensor) with msprobe 26.2 on CPU/gloo, for tests/test_sharded.py.

Run it in the msprobe venv (torch 2.13 CPU + mindstudio-probe):
``python tests/data/sharded/make_dtensor_steps.py KIND OUT [bad]``, or with no arguments to record the committed
fixtures beside it (tp_tensor_msprobe, tp_bad_matmul_tensor_msprobe, fsdp2_clip_tensor_msprobe,
hsdp_norms_tensor_msprobe; msprobe's stack.json left out, as it is no input of run_ut).

KIND tp: a LLaMA-style block (attention projections and a SwiGLU MLP) split by ``parallelize_module`` with
ColwiseParallel / RowwiseParallel: every projection is a sharded ``Functional.linear`` on DTensors.
KIND fsdp2: the same block under ``fully_shard``, its gradients clipped by ``clip_grad_norm_`` (whose norms are
DTensor calls). KIND hsdp: the same on 4 ranks, ``fully_shard`` on a 2 x 2 mesh (replicated across its first
dimension, sharded across its second); only the clipping's norms are recorded (msprobe's ``list``).
``bad`` patches ``F.linear`` before msprobe's debugger exists, so msprobe records the wrong result of every sharded
matmul (1% too large); only the matmuls are recorded (msprobe's ``list``).
OUT/step0/rank0, rank1 ... hold msprobe's dumps (tensor task, level L1).
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

WORLDS = {"tp": 2, "fsdp2": 2, "hsdp": 4}
PORTS = {"tp": "29631", "fsdp2": "29632", "hsdp": "29633"}
LISTS = {"hsdp": ["norm", "reciprocal"]}  # msprobe's list: the APIs recorded (all when empty)
DIM, HIDDEN, HEADS = 8, 16, 2


class Block(nn.Module):
    """A LLaMA-style block, tiny: RMS norm, attention with separate q/k/v/o projections, a SwiGLU MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(DIM, HIDDEN, bias=False), nn.Linear(DIM, HIDDEN, bias=False)
        self.down = nn.Linear(HIDDEN, DIM, bias=False)
        self.heads = HEADS

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        q, k, v = (p(h).view(b, s, -1, DIM // HEADS).transpose(1, 2) for p in (self.q, self.k, self.v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, -1)
        x = x + self.o(att)
        return x + self.down(F.silu(self.gate(x)) * self.up(x))


def _bad_linear() -> None:
    """A sharded matmul computed wrongly: its result 1% too large (recorded as it ran)."""
    good = F.linear

    def linear(x, weight, bias=None):
        return good(x, weight, bias) * 1.01

    F.linear = linear


def step(rank: int, kind: str, out: str, port: str, bad: bool) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    world = WORLDS[kind]
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if kind == "hsdp":
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = Block()
    if kind == "tp":
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        col, row = ColwiseParallel(), RowwiseParallel()
        plan = {"q": col, "k": col, "v": col, "o": row, "gate": col, "up": col, "down": row}
        model.heads = HEADS // world
        parallelize_module(model, mesh, plan)
    else:
        from torch.distributed.fsdp import fully_shard

        fully_shard(model, mesh=mesh)
    torch.manual_seed(1 if kind == "tp" else 1 + rank)  # TP ranks see the same batch, FSDP ranks their own
    x = torch.randn(2, 4, DIM)
    if bad:
        _bad_linear()
    from msprobe.pytorch import PrecisionDebugger

    config = os.path.join(out, f".config{rank}.json")
    with open(config, "w") as f:
        json.dump({"task": "tensor", "dump_path": out, "rank": [], "step": [0], "level": "L1",
                   "tensor": {"scope": [], "list": ["linear"] if bad else LISTS.get(kind, []),
                              "data_mode": ["all"]}}, f)  # fmt: skip
    debugger = PrecisionDebugger(config_path=config)
    debugger.start(model)
    loss = model(x).pow(2).mean()
    loss.backward()
    if kind != "tp":
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    debugger.stop()
    debugger.step()
    dist.destroy_process_group()
    os.remove(config)


def record(kind: str, out: str, bad: bool) -> None:
    os.makedirs(out, exist_ok=True)
    mp.spawn(step, args=(kind, out, PORTS[kind], bad), nprocs=WORLDS[kind])


if __name__ == "__main__":
    if len(sys.argv) > 2:
        record(sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3:] == ["bad"])
    else:
        import glob
        import shutil

        here = os.path.dirname(os.path.abspath(__file__))
        for kind, name, bad in (("tp", "tp_tensor_msprobe", False), ("tp", "tp_bad_matmul_tensor_msprobe", True),
                                ("fsdp2", "fsdp2_clip_tensor_msprobe", False),
                                ("hsdp", "hsdp_norms_tensor_msprobe", False)):  # fmt: skip
            shutil.rmtree(os.path.join(here, name), ignore_errors=True)
            record(kind, os.path.join(here, name), bad)
            for stack in glob.glob(os.path.join(here, name, "step0", "rank*", "stack.json")):
                os.remove(stack)
