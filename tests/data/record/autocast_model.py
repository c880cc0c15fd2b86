"""Training steps run under ``torch.autocast``, as users write them (issue 37): a LLaMA-ish block (linear, matmul,
softmax, layer norm, SiLU, cross entropy) and a small conv net, fp32 parameters, the step in autocast.
Recorded by make_fixtures.py into autocast_bf16/ (and autocast_fp16/ where the CPU's autocast takes fp16), read
by tests/test_autocast.py. Small tensors: the tensor dumps stay small.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """One attention block and a gated MLP, then a normed head and the loss."""

    def __init__(self, width: int = 8, vocab: int = 6) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.gate = nn.Linear(width, 2 * width, bias=False)
        self.down = nn.Linear(2 * width, width, bias=False)
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # fp32 input and weight, a bf16 output
        scores = torch.matmul(q, k.transpose(-1, -2)) / 8**0.5
        attn = F.softmax(scores, dim=-1)
        x = x + torch.matmul(attn, v)
        x = x + self.down(F.silu(self.gate(x)))  # down: a bf16 input, an fp32 weight
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())  # bf16 logits, an fp32 loss


class Conv(nn.Module):
    """Two convolutions, a pooling and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(2, 3, 3, padding=1)
        self.c2 = nn.Conv2d(3, 3, 3, padding=1)
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.c1(x))
        h = F.adaptive_avg_pool2d(self.c2(h), 1).flatten(1)  # c2: a bf16 input, an fp32 weight and bias
        return F.cross_entropy(self.fc(h), labels)


def build(dtype: torch.dtype) -> tuple[nn.Module, object]:
    """The two models and their step in autocast to ``dtype`` (fp32 parameters and inputs, as users train)."""
    torch.manual_seed(0)
    block, conv = Block(), Conv()
    model = nn.ModuleList([block, conv])
    x, labels = torch.randn(2, 3, 8), torch.randint(0, 6, (2, 3))
    image, classes = torch.randn(2, 2, 5, 5), torch.randint(0, 3, (2,))

    def run() -> torch.Tensor:
        with torch.autocast("cpu", dtype=dtype):
            return block(x, labels) + conv(image, classes)

    return model, run
