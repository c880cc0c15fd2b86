"""A small GPT step (embedding, causal self-attention with a ``-inf`` mask, a SiLU MLP, residuals, a loss) for
the cross-precision compare fixtures (issue 38): recorded in fp32, under ``torch.autocast`` bf16, and under
autocast bf16 with a 6-bit SiLU injected (make_fixtures.py, ``gpt_*``). Pure torch, small tensors, seeded.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

DIM, HEADS, SEQ, VOCAB = 8, 2, 5, 7


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.up = nn.Linear(DIM, 2 * DIM)
        self.down = nn.Linear(2 * DIM, DIM)
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(DIM, dim=-1)
        q, k, v = (z.reshape(b, t, HEADS, DIM // HEADS).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (DIM // HEADS) ** -0.5
        scores = scores.masked_fill(mask, float("-inf"))  # the causal mask: -inf on both sides
        att = F.softmax(scores, dim=-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, DIM))  # an fp32 residual plus a bf16 branch
        return x + self.down(F.silu(self.up(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.block = Block()
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1)
        logits = self.head(self.block(self.emb(ids), mask))
        return F.cross_entropy(logits.reshape(-1, VOCAB).float(), labels.reshape(-1))


class _CoarseSilu(torch.autograd.Function):
    """SiLU's forward with a 6-bit significand (bf16 keeps 8); its backward SiLU's own derivative, taken in the
    forward (which the recorder sees as one call) and applied through aten, which it does not record."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(x.float())
        ctx.save_for_backward(s * (1 + x.float() * (1 - s)))  # type: ignore[attr-defined]
        mantissa, exponent = torch.frexp(x.float() * s)
        return torch.ldexp(torch.round(mantissa * 64) / 64, exponent).to(x.dtype)

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        (slope,) = ctx.saved_tensors  # type: ignore[attr-defined]
        return torch.ops.aten._to_copy(torch.ops.aten.mul.Tensor(grad, slope), dtype=grad.dtype)


def coarse_silu(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """A bad kernel in F.silu's place: one autograd node, as a real kernel is."""
    return _CoarseSilu.apply(x)


def build(precision: str, seed: int = 0) -> tuple[nn.Module, object]:
    """The model and its step: ``fp32``, ``bf16`` (autocast on the CPU) or ``bf16_silu6`` (autocast, the SiLU
    replaced by coarse_silu while the step runs, as a bad kernel would be); ``seed`` draws its weights and data."""
    torch.manual_seed(seed)
    model = Gpt()
    ids = torch.randint(0, VOCAB, (2, SEQ))
    labels = torch.randint(0, VOCAB, (2, SEQ))

    def run() -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision != "fp32"):
            return model(ids, labels)

    return model, run
