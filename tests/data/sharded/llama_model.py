"""A small LLaMA-style decoder for the sharded steps of make_sharded_steps.py: token embedding, two layers of
(RMSNorm, attention with rotary position embedding, RMSNorm, SiLU-gated MLP), a final RMSNorm and an LM head.

Hidden 32, 4 heads, MLP 64, vocabulary 64, sequences of 8; two layers (one in the tensor task, whose files are
the size of its tensors): each recorded step stays a few hundred KB per rank.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, HEADS, MLP, SEQ, LAYERS = 64, 32, 4, 64, 8, 2


class RMSNorm(nn.Module):
    """LLaMA's norm: its statistics in fp32 whatever the activations' dtype."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(DIM, DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
        self.v, self.o = nn.Linear(DIM, DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
        self.heads = HEADS  # this rank's heads: HEADS / the tensor-parallel degree under a TP plan (make_2d_steps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (proj(x).view(b, t, self.heads, DIM // HEADS).transpose(1, 2) for proj in (self.q, self.k, self.v))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(att.transpose(1, 2).reshape(b, t, self.heads * (DIM // HEADS)))


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(DIM), Attention()
        self.mlp_norm = RMSNorm(DIM)
        self.gate, self.up = nn.Linear(DIM, MLP, bias=False), nn.Linear(DIM, MLP, bias=False)
        self.down = nn.Linear(MLP, DIM, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, layers: int = LAYERS) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(layers))
        self.norm = RMSNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        half = DIM // HEADS // 2
        freqs = torch.outer(torch.arange(SEQ, dtype=torch.float32), 1e4 ** (-torch.arange(half) / half))
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().reshape(-1, VOCAB), labels.reshape(-1))


def batch(rank: int, size: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Each rank's own tokens and labels (a data-parallel shard of the batch)."""
    generator = torch.Generator().manual_seed(100 + rank)
    ids = torch.randint(0, VOCAB, (size, SEQ), generator=generator)
    return ids, torch.roll(ids, -1, dims=1)
