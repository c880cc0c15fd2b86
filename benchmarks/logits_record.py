"""Record per-token logits of greedy decoding with a small causal transformer (random weights, seed 0) in float32
and bfloat16, for `precheck logits`: the bench as one (tokens, vocab) .pt file, the target as one .npy file per
token, each run following its own generated tokens (as a serving stack does).

usage: python benchmarks/logits_record.py OUT_DIR   (tests/data/compare/logits holds its output)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn


class Decoder(nn.Module):
    def __init__(self, vocab: int = 96, width: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, 4, 128, dropout=0.0, batch_first=True)
        self.body = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(ids.shape[1], dtype=self.head.weight.dtype)
        return self.head(self.body(self.embed(ids), mask=mask, is_causal=True))[:, -1]


def decode(dtype: torch.dtype, steps: int = 24) -> torch.Tensor:
    torch.manual_seed(0)
    model = Decoder().eval()
    with torch.no_grad():
        for p in model.parameters():  # sharper distributions than the default init, as a trained model has
            p.mul_(3.0)
    model = model.to(dtype)
    ids = torch.tensor([[1, 7, 42, 5]])
    logits = []
    with torch.no_grad():
        for _ in range(steps):
            out = model(ids).float()
            logits.append(out[0])
            ids = torch.cat([ids, out.argmax(-1, keepdim=True)], dim=1)
    return torch.stack(logits)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    return parser


if __name__ == "__main__":
    out = build_parser().parse_args().out_dir
    (out / "bf16").mkdir(parents=True, exist_ok=True)
    torch.save(decode(torch.float32), out / "fp32_logits.pt")
    for k, row in enumerate(decode(torch.bfloat16)):
        np.save(out / "bf16" / f"logits_{k}.npy", row.numpy())
