"""Record the pairs of real msprobe dumps that `precheck compare` is tested and measured on.

One small training step (linear, layer_norm, gelu, linear, residual add, softmax, mse loss) recorded with msprobe's
own dumper in several variants: fp32 and bf16, tensor, statistics and md5, API level (L1), module level (L0) and
both (mix), clean and with a deliberately wrong GELU patched in before the debugger wraps it (msprobe records what
the patched function computes), with layer_norm written out by hand on one side (more calls than the other side),
and with the modules renamed on one side (for a layer mapping).

Run it in a throwaway venv (pip install torch==2.13.0 mindstudio-probe):
    .venv/bin/python tests/data/recipes/msprobe_venv.py -- benchmarks/compare_record.py OUT_DIR [VARIANT ...]
Each variant lands in OUT_DIR/VARIANT/step0/proc<pid>/; tests/data/compare holds them as step0/rank0.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from msprobe_step import record_step, record_variants, variants_parser

from precheck.core.older_python import zip_strict

# name: (dtype, task, summary_mode, level, gelu bug, hand-written layer_norm, renamed modules)
VARIANTS = {
    "fp32_tensor": ("fp32", "tensor", None, "L1", False, False, False),
    "fp32_tensor_gelu_bug": ("fp32", "tensor", None, "L1", True, False, False),
    "bf16_tensor_gelu_bug": ("bf16", "tensor", None, "L1", True, False, False),
    "bf16_tensor": ("bf16", "tensor", None, "L1", False, False, False),
    "fp32_tensor_unfused_ln": ("fp32", "tensor", None, "L1", False, True, False),
    "fp32_statistics": ("fp32", "statistics", "statistics", "L1", False, False, False),
    "bf16_statistics_gelu_bug": ("bf16", "statistics", "statistics", "L1", True, False, False),
    "fp32_md5": ("fp32", "statistics", "md5", "L1", False, False, False),
    "fp32_md5_gelu_bug": ("fp32", "statistics", "md5", "L1", True, False, False),
    "fp32_l0": ("fp32", "tensor", None, "L0", False, False, False),
    "fp32_l0_renamed_gelu_bug": ("fp32", "tensor", None, "L0", True, False, True),
    "fp32_mix": ("fp32", "tensor", None, "mix", False, False, False),
    "fp32_mix_gelu_bug": ("fp32", "tensor", None, "mix", True, False, False),
}


def wrong_gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """A GELU kernel with the wrong constant: x * sigmoid(1.5 x) instead of about x * sigmoid(1.702 x)."""
    return x * torch.sigmoid(1.5 * x)


def hand_layer_norm(x, shape, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


class Block(nn.Module):
    def __init__(self, renamed: bool, unfused: bool) -> None:
        super().__init__()
        self.names = ("fc_in", "norm", "fc_out") if renamed else ("up", "ln", "down")
        for name, layer in zip_strict(self.names, (nn.Linear(32, 64), nn.LayerNorm(64), nn.Linear(64, 32))):
            setattr(self, name, layer)
        self.unfused = unfused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up, ln, down = (getattr(self, n) for n in self.names)
        h = up(x)
        h = hand_layer_norm(h, (64,), ln.weight, ln.bias, ln.eps) if self.unfused else ln(h)
        h = down(F.gelu(h))
        return torch.softmax(x + h, dim=-1)


class Net(nn.Module):
    def __init__(self, renamed: bool, unfused: bool) -> None:
        super().__init__()
        self.block = Block(renamed, unfused)
        self.head = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


def record(variant: str, out: str) -> None:
    dtype, task, summary_mode, level, bug, unfused, renamed = VARIANTS[variant]
    if bug:
        F.gelu = wrong_gelu  # before msprobe wraps the API: it records what the patched kernel computes

    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    torch.manual_seed(0)
    model = Net(renamed, unfused)
    x = torch.randn(4, 16, 32)
    target = torch.randn(4, 16, 8)
    model, x, target = model.to(dt), x.to(dt), target.to(dt)
    settings = {"scope": [], "list": [], "data_mode": ["all"]}
    if summary_mode:
        settings["summary_mode"] = summary_mode
    cfg = {"task": task, "dump_path": out, "rank": [], "step": [0], "level": level, task: settings}
    record_step(model, lambda: F.mse_loss(model(x), target).backward(), out, cfg)


def build_parser() -> argparse.ArgumentParser:
    return variants_parser(__doc__, VARIANTS)


if __name__ == "__main__":
    record_variants(build_parser(), VARIANTS, record, __file__)
