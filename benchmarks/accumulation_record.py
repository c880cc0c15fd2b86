"""Record bug/clean twin pairs of half-precision accumulation bugs, the records `precheck compare` must name although
their extra error (two or three roundings) stays below its fixed agreement bound (tests/data/compare/acc_*).

One training step of a two-layer attention model (linear q/k/v, scores, softmax, out projection, layer norm, GELU
MLP, head, cross entropy) recorded twice in the same dtype with msprobe's own dumper: clean, and with one kernel
patched before msprobe wraps it (benchmarks/detection_bugs.py: msprobe records what the buggy kernel computes):
- ``softmax_bf16``: the first softmax sums its exponentials in bf16, one rounding per addition (a bf16 step);
- ``softmax_fp16``: the same in fp16 (an fp16 step);
- ``linear_fp16``: the second linear accumulates its dot products in fp16, one rounding per term (an fp16 step).

Run it in msprobe's throwaway venv (its torch is the main venv's), from the repository root:
    .venv/bin/python tests/data/recipes/msprobe_venv.py -- benchmarks/accumulation_record.py OUT_DIR [VARIANT ...]
Each variant lands in OUT_DIR/VARIANT/step0/proc<pid>/; tests/data/compare holds them as acc_VARIANT/step0/rank0.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from detection_bugs import _linear_lowp, _softmax_lowp, forward_bug
from msprobe_step import record_step, record_variants, variants_parser

# name: (dtype, the patched API, the bug, which of its calls)
VARIANTS = {
    "bf16_clean": ("bf16", None, None, None),
    "bf16_softmax_bf16": ("bf16", "Functional.softmax", _softmax_lowp, {0}),
    "fp16_clean": ("fp16", None, None, None),
    "fp16_softmax_fp16": ("fp16", "Functional.softmax", _softmax_lowp, {0}),
    "fp16_linear_fp16": ("fp16", "Functional.linear", _linear_lowp, {1}),
}
DIM, HEADS, SEQ, BATCH, VOCAB = 32, 2, 16, 2, 16
SHARP = 2.5  # q and k weights scaled: attention scores of several units


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.up, self.down = nn.Linear(DIM, 2 * DIM), nn.Linear(2 * DIM, DIM)
        with torch.no_grad():  # sharp attention, as trained models have: it amplifies what an earlier layer lost
            self.q.weight.mul_(SHARP)
            self.k.weight.mul_(SHARP)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(BATCH, SEQ, HEADS, DIM // HEADS).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        p = F.softmax(torch.matmul(q, k.transpose(-1, -2)) * (DIM // HEADS) ** -0.5, dim=-1)
        h = self.ln1(x + self.o(torch.matmul(p, v).transpose(1, 2).reshape(BATCH, SEQ, DIM)))
        return self.ln2(h + self.down(F.gelu(self.up(h))))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def record(variant: str, out: str) -> None:
    dtype, api, bug, calls = VARIANTS[variant]
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    torch.manual_seed(0)
    model = Net().to(dt)
    x = torch.randn(BATCH, SEQ, DIM).to(dt)
    labels = torch.randint(0, VOCAB, (BATCH * SEQ,))
    if bug is not None:
        forward_bug(bug, calls)(api)  # before msprobe wraps the API: it records what the patched kernel computes

    settings = {"scope": [], "list": [], "data_mode": ["all"]}
    cfg = {"task": "tensor", "dump_path": out, "rank": [], "step": [0], "level": "L1", "tensor": settings}
    record_step(model, lambda: F.cross_entropy(model(x).reshape(-1, VOCAB), labels).backward(), out, cfg)


def build_parser() -> argparse.ArgumentParser:
    return variants_parser(__doc__, VARIANTS)


if __name__ == "__main__":
    record_variants(build_parser(), VARIANTS, record, __file__)
