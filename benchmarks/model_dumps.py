"""Small training models for real msprobe dumps beyond GPT-2: BERT (dropout and attention dropout in training mode),
LLaMA (RMSNorm, rotary embeddings, grouped-query attention, SiLU gates), a CNN with batch norm, max pooling,
Dropout2d and an LSTM, and torch's own TransformerEncoder in training mode (multi-head attention with dropout).
Each function takes a dtype and returns (model, run) for make_dump.py's MODEL argument.

Regenerate the bundled dumps from the repository root (msprobe's throwaway venv; risk_level ALL as opinfo_dump.py):
    .venv/bin/python tests/data/recipes/msprobe_venv.py --pip transformers -- \
        tests/data/recipes/make_dump.py --risk-level ALL model_dumps:bert bf16 tensor OUT
(likewise model_dumps:cnn bf16 tensor, model_dumps:llama fp32 statistics, model_dumps:encoder fp32 tensor)
then copy each OUT/step0 into tests/data/{bert_bf16_tensor,cnn_bf16_tensor,llama_fp32_statistics,
encoder_fp32_tensor}/.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    """make_dump.py's mlp (tests/data/mlp_fp32_tensor)."""

    def __init__(self):
        super().__init__()
        self.l1, self.ln, self.l2 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 8)

    def forward(self, x):
        return self.l2(torch.softmax(F.gelu(self.ln(self.l1(x))), dim=-1)).sum()


def mlp(dt):
    m = MLP().to(dt)
    x = torch.randn(4, 16, dtype=dt)
    return m, lambda: m(x)


def bert(dt):
    from transformers import BertConfig, BertForMaskedLM

    m = BertForMaskedLM(
        BertConfig(
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            intermediate_size=128,
            vocab_size=300,
            max_position_embeddings=64,
        )
    ).to(dt)
    m.train()
    ids = torch.randint(0, 300, (2, 12))
    return m, lambda: m(input_ids=ids, labels=ids).loss


def gpt2(dt):
    """make_dump.py's GPT-2 (2 layers, width 64, 500 tokens), built in this process for bench_record.py."""
    from transformers import GPT2Config, GPT2LMHeadModel

    m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=64)).to(dt)
    ids = torch.randint(0, 500, (2, 16))
    return m, lambda: m(input_ids=ids, labels=ids).loss


def llama(dt):
    from transformers import LlamaConfig, LlamaForCausalLM

    m = LlamaForCausalLM(
        LlamaConfig(
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            vocab_size=300,
            max_position_embeddings=64,
        )
    ).to(dt)
    m.train()
    ids = torch.randint(0, 300, (2, 12))
    return m, lambda: m(input_ids=ids, labels=ids).loss


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2)
        self.drop = nn.Dropout2d(0.2)
        self.lstm = nn.LSTM(16, 12, batch_first=True)
        self.fc = nn.Linear(12, 5)

    def forward(self, x, y):
        h = F.max_pool2d(F.relu(self.bn(self.c1(x))), 2)
        h = self.drop(F.silu(self.c2(h)))
        h = F.adaptive_avg_pool2d(h, (1, 4)).flatten(2).transpose(1, 2)
        out, _ = self.lstm(h)
        return F.cross_entropy(self.fc(out[:, -1]), y, label_smoothing=0.1)


def cnn(dt):
    m = CNN().to(dt)
    m.train()
    x = torch.randn(4, 3, 16, 16, dtype=dt)
    y = torch.randint(0, 5, (4,))
    return m, lambda: m(x, y)


def encoder(dt):
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=2, dim_feedforward=64, dropout=0.1, batch_first=True)
    m = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).to(dt)
    m.train()
    x = torch.randn(2, 8, 32, dtype=dt)
    return m, lambda: m(x).pow(2).mean()


MODELS = {"mlp": mlp, "gpt2": gpt2, "bert": bert, "llama": llama, "cnn": cnn, "encoder": encoder}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _model(name: str) -> str:
    if name not in MODELS:
        raise argparse.ArgumentTypeError(f"unknown model {name!r} (expected one of {', '.join(MODELS)})")
    return name


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__ + "\nRun directly, it takes one training step of each model without msprobe (a check that "
        "a model builds and its loss is finite before recording it).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "models", nargs="*", type=_model, metavar="MODEL", help=f"{', '.join(MODELS)} (default: cnn encoder)"
    )
    parser.add_argument("--dtype", choices=DTYPES, default="fp32")
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    for name in args.models or ["cnn", "encoder"]:
        torch.manual_seed(0)
        try:
            model, run = MODELS[name](DTYPES[args.dtype])
        except ImportError as e:
            parser.error(f"{name} needs {e.name}: pip install {e.name} (the msprobe venv of make_dump.py has it)")
        loss = run()
        loss.backward()
        grads = sum(p.grad is not None for p in model.parameters())
        print(f"{name} {args.dtype}: loss {loss.item():.4f}, {grads} parameters with a gradient")


if __name__ == "__main__":
    main()
