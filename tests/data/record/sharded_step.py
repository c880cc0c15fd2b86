"""Two training steps of a tiny LLaMA-style decoder on 2 gloo ranks, sharded as teams shard it, for
``precheck record`` to run as it is (tests/test_record_sharded.py) and msprobe 26.2 to record beside it:

    python sharded_step.py KIND OUT [--msprobe CONFIG]

KIND is ``tp`` (parallelize_module: ColwiseParallel q/k/v/gate/up, RowwiseParallel o/down: 14 DTensor linears),
``fsdp2`` (fully_shard per layer and the root, a bf16 MixedPrecisionPolicy, clip_grad_norm_), ``fsdp1``
(FullyShardedDataParallel, one unit per layer), ``zero`` (DDP with ZeroRedundancyOptimizer, which imports
TorchScript code, two micro-batches, the first under no_sync) or ``ddp`` (DDP, no_sync accumulation, AdamW).
Ranks meet at a file in OUT (no port to collide on) and each writes its two losses, exactly (float.hex), to
OUT/loss<R>.txt. With ``--msprobe CONFIG`` (a venv with mindstudio-probe) step 0 is recorded by msprobe's
PrecisionDebugger as its guide places it: made before the model, start(model) before the first forward, stop()
and step() before the optimizer's update (where precheck record's step ends). sharded_msprobe_names.json holds
the record names of rank 0's dump.json so written for tp, fsdp2 and zero (config: task tensor, level L1, step
[0], rank [], data_mode all; msprobe's venv: torch 2.13 CPU + mindstudio-probe 26.2).
"""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, HEADS, MLP, SEQ, LAYERS = 32, 16, 4, 32, 8, 2
HEAD_DIM = DIM // HEADS


class RMSNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(), RMSNorm()
        self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(DIM, MLP, bias=False), nn.Linear(DIM, MLP, bias=False)
        self.down = nn.Linear(MLP, DIM, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q, k, v = (p(h).view(b, t, -1, HEAD_DIM).transpose(1, 2) for p in (self.q, self.k, self.v))
        q = q * cos + torch.cat((-q[..., HEAD_DIM // 2 :], q[..., : HEAD_DIM // 2]), -1) * sin
        k = k * cos + torch.cat((-k[..., HEAD_DIM // 2 :], k[..., : HEAD_DIM // 2]), -1) * sin
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(att.transpose(1, 2).reshape(b, t, -1))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm()
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        freqs = torch.outer(torch.arange(SEQ, dtype=torch.float32), 1e4 ** (-torch.arange(HEAD_DIM // 2) / 4))
        angles = torch.cat((freqs, freqs), -1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, self.cos.to(x.dtype), self.sin.to(x.dtype))
        return F.cross_entropy(self.head(self.norm(x)).float().reshape(-1, VOCAB), labels.reshape(-1))


def shard(kind: str, model: nn.Module, mesh: object) -> tuple[nn.Module, torch.optim.Optimizer]:
    if kind == "tp":
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        plan = {n: ColwiseParallel() for n in ("q", "k", "v", "gate", "up")}
        plan.update(o=RowwiseParallel(), down=RowwiseParallel())
        for layer in model.layers:
            parallelize_module(layer, mesh, plan)
        return model, torch.optim.SGD(model.parameters(), lr=0.1)
    if kind == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(torch.bfloat16, torch.float32)
        for layer in model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        return model, torch.optim.SGD(model.parameters(), lr=0.1)
    if kind == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        model = FullyShardedDataParallel(
            model, auto_wrap_policy=ModuleWrapPolicy({Layer}), use_orig_params=True, device_id=torch.device("cpu")
        )
        return model, torch.optim.SGD(model.parameters(), lr=0.1)
    model = nn.parallel.DistributedDataParallel(model)
    if kind == "ddp":
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2)
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1)


def batch(kind: str, rank: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``n``'s two micro-batches of tokens and labels (TP ranks share theirs)."""
    generator = torch.Generator().manual_seed(100 * n + (0 if kind == "tp" else rank))
    ids = torch.randint(0, VOCAB, (2, 2, SEQ), generator=generator)
    return ids, torch.roll(ids, -1, dims=-1)


def step(kind: str, model: nn.Module, optimizer: torch.optim.Optimizer, data: tuple, debugger=None) -> float:
    ids, labels = data
    accumulate = kind in ("zero", "ddp")
    losses = []
    for micro in range(2 if accumulate else 1):
        with model.no_sync() if accumulate and micro == 0 else nullcontext():
            loss = model(ids[micro], labels[micro]) / (2 if accumulate else 1)
            loss.backward()
        losses.append(loss.detach())
    if kind == "fsdp2":
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    if kind == "fsdp1":
        model.clip_grad_norm_(max_norm=1.0)
    if debugger is not None:  # where precheck record's step ends: before the optimizer's update
        debugger.stop()
        debugger.step()
    optimizer.step()
    optimizer.zero_grad()
    return sum(losses).item()


def main(rank: int, kind: str, out: str, config: str | None) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=2)
    debugger = None
    if config:
        # msprobe's own torch.jit.script wrapper breaks TorchScript code imported after it (an undefined
        # _scripted_functional_optimizer_deprecation_warning): ZeroRedundancyOptimizer is imported before it is made
        from msprobe.pytorch import PrecisionDebugger
        from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: F401

        debugger = PrecisionDebugger(config_path=config)
    mesh = None
    if kind in ("tp", "fsdp2"):  # the mesh first, as torchtitan's trainer makes it
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    model, optimizer = shard(kind, Llama(), mesh)
    losses = []
    for n in range(2):
        data = batch(kind, rank, n)
        if debugger is not None and n == 0:
            debugger.start(model)
        losses.append(step(kind, model, optimizer, data, debugger if n == 0 else None))
    with open(os.path.join(out, f"loss{rank}.txt"), "w") as f:
        f.write(" ".join(x.hex() for x in losses) + "\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    msprobe_config = sys.argv[4] if sys.argv[3:4] == ["--msprobe"] else None
    mp.spawn(main, args=(sys.argv[1], os.path.abspath(sys.argv[2]), msprobe_config), nprocs=2)
