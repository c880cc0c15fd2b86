"""A LLaMA-style decoder at a real model's layer sizes, for benchmarks/bench_heavy.py: hidden 1024, intermediate
2816, 16 heads, 4 layers, vocabulary 32,000, batch 2, sequence 256, written with plain torch calls so msprobe
records every one (RMS norm written out, rotary embeddings, causal SDPA, a SwiGLU MLP, an LM head and cross
entropy). No transformers needed:

    .venv/bin/python tests/data/recipes/msprobe_venv.py -- \\
        tests/data/recipes/make_dump.py heavy_model:llama bf16 tensor OUT

heavy_model:llama_silu_bug is the same step with a wrong SiLU patched in (the other side of a compare pair).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

HIDDEN, INTERMEDIATE, HEADS, LAYERS, VOCAB, BATCH, SEQ = 1024, 2816, 16, 4, 32000, 2, 256


class _Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.Parameter(torch.ones(HIDDEN)), nn.Parameter(torch.ones(HIDDEN))
        self.qkv = nn.Parameter(torch.randn(3 * HIDDEN, HIDDEN) / math.sqrt(HIDDEN))
        self.o = nn.Parameter(torch.randn(HIDDEN, HIDDEN) / math.sqrt(HIDDEN))
        self.gate_up = nn.Parameter(torch.randn(2 * INTERMEDIATE, HIDDEN) / math.sqrt(HIDDEN))
        self.down = nn.Parameter(torch.randn(HIDDEN, INTERMEDIATE) / math.sqrt(INTERMEDIATE))

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = h.shape
        q, k, v = F.linear(_rms(h, self.n1), self.qkv).view(b, s, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        q, k = _rotary(q, cos, sin), _rotary(k, cos, sin)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + F.linear(att.transpose(1, 2).reshape(b, s, HIDDEN), self.o)
        gate, up = F.linear(_rms(h, self.n2), self.gate_up).chunk(2, dim=-1)
        return h + F.linear(F.silu(gate) * up, self.down)


def _rms(h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + turned * sin


class Llama(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Parameter(torch.randn(VOCAB, HIDDEN) * 0.02)
        self.layers = nn.ModuleList(_Layer() for _ in range(LAYERS))
        self.norm = nn.Parameter(torch.ones(HIDDEN))
        self.head = nn.Parameter(torch.randn(VOCAB, HIDDEN) / math.sqrt(HIDDEN))
        dim = HIDDEN // HEADS
        angles = torch.outer(torch.arange(SEQ).float(), 10000 ** (-torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("cos", torch.cat((angles, angles), -1).cos())
        self.register_buffer("sin", torch.cat((angles, angles), -1).sin())

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = F.embedding(ids, self.embed)
        for layer in self.layers:
            h = layer(h, self.cos, self.sin)
        logits = F.linear(_rms(h, self.norm), self.head)
        return F.cross_entropy(logits.view(-1, VOCAB).float(), labels.view(-1))


def llama(dt: torch.dtype):
    """(model, run) for make_dump.py: one training step's loss."""
    model = Llama().to(dt)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return model, lambda: model(ids, ids.roll(-1, 1))


def wrong_silu(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """A SiLU kernel with the wrong slope: x * sigmoid(1.5 x) instead of x * sigmoid(x)."""
    return x * torch.sigmoid(1.5 * x)


def llama_silu_bug(dt: torch.dtype):
    """llama with a wrong SiLU patched in, for a heavy pair that genuinely differs (bench_compare.py --heavy).
    make_dump.py builds the model before msprobe's debugger wraps the APIs, so msprobe records the patched
    kernel under its own name, as it does for compare_record.py's wrong GELU."""
    F.silu = wrong_silu
    return llama(dt)


def gpt2(dt: torch.dtype):
    """(model, run) for make_dump.py: a real model at its real size, Hugging Face's GPT-2 small (12 layers, hidden
    768, vocabulary 50,257; random weights: no download) on batch 2 x sequence 256, the step issue 54 measures
    beside the LLaMA-style one. Needs transformers in msprobe's venv (``msprobe_venv.py --pip transformers``)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config()).to(dt)
    ids = torch.randint(0, 50257, (BATCH, SEQ))
    return model, lambda: model(input_ids=ids, labels=ids).loss
