"""Training steps as users write them (issue 37), for record_vs_msprobe.py, bench_autocast.py and the corpus that
tests/data/record/make_fixtures.py records into tests/data/steps/: mixed precision (``torch.autocast`` to bf16,
fp16 with a ``GradScaler``), gradient clipping (``clip_grad_norm_``), gradient checkpointing
(``torch.utils.checkpoint`` with ``use_reentrant=False``, transformers' ``gradient_checkpointing_enable``), LSTM and
GRU, as hand-written models and tiny torchvision and transformers configurations (nothing is downloaded).

Each function returns (model, step): ``step()`` runs the whole step (forward, backward, clipping, and where a user
has one the optimizer and scaler), so that a recorder started on ``model`` sees what the user's loop runs. The
parameters are fp32, as users train, but for ``block_bf16`` (the same step as ``block_autocast_bf16`` with the
model cast to bf16: bench_autocast.py's pair). Small sizes: each dump the corpus commits stays under 300 KB.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import model_dumps
import real_models
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "data" / "record"))
from autocast_model import Block  # noqa: E402 - the LLaMA-ish block the autocast fixtures record

Step = tuple[nn.Module, Callable[[], None]]
BF16 = torch.bfloat16


class Conv(nn.Module):
    """Two convolutions with a batch norm, a pooling and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.c2 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn(self.c1(x)))
        return F.cross_entropy(self.fc(F.adaptive_avg_pool2d(self.c2(h), 1).flatten(1)), labels)


class Checkpointed(nn.Module):
    """Two MLP blocks, each under torch.utils.checkpoint (non-reentrant): its forward recomputed in the backward."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, 16), nn.GELU(), nn.Linear(16, width)) for _ in "ab")
        self.ln = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + checkpoint(block, self.ln(x), use_reentrant=False)
        return x.pow(2).mean()


class Recurrent(nn.Module):
    """An LSTM of two layers, then a bidirectional GRU, then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True)
        self.gru = nn.GRU(8, 4, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(x)
        h, _ = self.gru(h)
        return F.cross_entropy(self.fc(h[:, -1]), labels)


def _sgd_step(
    model: nn.Module, loss: Callable[[], torch.Tensor], dtype: torch.dtype | None, sgd: bool = True
) -> Callable[[], None]:
    """forward (under autocast to ``dtype`` unless None), backward, clip_grad_norm_, then (``sgd``) an SGD step
    and zero_grad."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step() -> None:
        with torch.autocast("cpu", dtype=dtype) if dtype else nullcontext():
            value = loss()
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        if sgd:
            opt.step()
            opt.zero_grad()

    return step


def _block(dtype: torch.dtype, autocast: bool) -> Step:
    model = Block(vocab=10) if autocast else Block(vocab=10).to(dtype)
    x, labels = torch.randn(2, 4, 8, dtype=torch.float32 if autocast else dtype), torch.randint(0, 10, (2, 4))
    return model, _sgd_step(model, lambda: model(x, labels), dtype if autocast else None)


def block_autocast_bf16() -> Step:
    """The block's step under torch.autocast("cpu", bf16), fp32 parameters, clipped, SGD."""
    return _block(BF16, autocast=True)


def block_bf16() -> Step:
    """The same step with the model cast to bf16 and no autocast (bench_autocast.py's pure-bf16 side)."""
    return _block(BF16, autocast=False)


def _scaled(init_scale: float) -> Step:
    """The conv net under autocast fp16 with a GradScaler: scale, backward, unscale_, clip, step, update."""
    model = Conv()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    x, labels = torch.randn(2, 3, 8, 8), torch.randint(0, 5, (2,))

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(x, labels)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()

    return model, step


def conv_gradscaler_fp16() -> Step:
    """fp16 autocast with a GradScaler at a scale whose gradients stay finite (2**8)."""
    return _scaled(2.0**8)


def conv_overflow_fp16() -> Step:
    """The same step at a scale of 2**24, where fp16 gradients overflow by design: the scaler finds an inf,
    skips the optimizer step and halves the scale, as on the first steps of many fp16 runs (its default 2**16
    does not overflow on this small net)."""
    return _scaled(2.0**24)


def checkpoint_mlp() -> Step:
    """torch.utils.checkpoint(use_reentrant=False) on two MLP blocks, fp32, clipped: the backward recomputes each
    block's forward and stops it early once the tensors it needs are back. No optimizer step: its tensor dump stays
    under 300 KB."""
    model = Checkpointed()
    x = torch.randn(4, 8)
    return model, _sgd_step(model, lambda: model(x), None, sgd=False)


def rnn_lstm_gru() -> Step:
    """An LSTM and a bidirectional GRU, fp32, clipped (an RNN step is where users clip most)."""
    model = Recurrent()
    x, labels = torch.randn(3, 4, 6), torch.randint(0, 4, (3,))
    return model, _sgd_step(model, lambda: model(x, labels), None)


def _clipped(model: nn.Module, loss: Callable[[], torch.Tensor], checkpointing: bool = False) -> Step:
    """A library model's step under autocast bf16, clipped (the optimizer step left out: its per-parameter calls
    are the hand-written steps' business)."""
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable()  # transformers 5: non-reentrant by default

    def step() -> None:
        with torch.autocast("cpu", dtype=BF16):
            value = loss()
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)

    return model, step


def convnext() -> Step:
    """torchvision's ConvNeXt with two tiny stages (depthwise 7x7 convolutions, layer norm, layer scale)."""
    real_models._torchvision_models()
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    model = ConvNeXt([CNBlockConfig(8, 16, 1), CNBlockConfig(16, None, 1)], num_classes=5)
    x, labels = torch.randn(2, 3, 32, 32), torch.randint(0, 5, (2,))
    return _clipped(model, lambda: F.cross_entropy(model(x), labels))


def swin() -> Step:
    """torchvision's Swin Transformer, one stage of two blocks (windowed and shifted attention, relative bias)."""
    real_models._torchvision_models()
    from torchvision.models.swin_transformer import SwinTransformer

    model = SwinTransformer([4, 4], 16, [2], [2], [4, 4], stochastic_depth_prob=0.0, num_classes=5)
    x, labels = torch.randn(2, 3, 32, 32), torch.randint(0, 5, (2,))
    return _clipped(model, lambda: F.cross_entropy(model(x), labels))


def bert() -> Step:
    """model_dumps.py's BERT (2 layers, width 64, dropout in training) under autocast bf16."""
    model, run = model_dumps.bert(torch.float32)
    return _clipped(model, run)


_LM = {"vocab_size": 300, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
_HEADS = {"num_attention_heads": 4, "max_position_embeddings": 64}


def _causal_lm(model: nn.Module, checkpointing: bool = False) -> Step:
    ids = torch.randint(0, 300, (2, 12))
    return _clipped(model, lambda: model(input_ids=ids, labels=ids).loss, checkpointing)


def mistral() -> Step:
    """A 1-layer Mistral (sliding-window attention, GQA) under autocast bf16 with gradient checkpointing (one
    layer: a layer's forward is recorded twice, and the statistics dump stays under 300 KB)."""
    from transformers import MistralConfig, MistralForCausalLM

    real_models._torchvision_models()
    config = MistralConfig(**{**_LM, "num_hidden_layers": 1}, **_HEADS, num_key_value_heads=2)
    return _causal_lm(MistralForCausalLM(config), checkpointing=True)


def gemma() -> Step:
    """A 2-layer Gemma (GELU-tanh gates, scaled embeddings, one key-value head) under autocast bf16."""
    from transformers import GemmaConfig, GemmaForCausalLM

    real_models._torchvision_models()
    return _causal_lm(GemmaForCausalLM(GemmaConfig(**_LM, **_HEADS, num_key_value_heads=1, head_dim=16)))


_SEQ2SEQ = {"d_model": 64, "encoder_layers": 1, "decoder_layers": 1, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128}
_SEQ_HEADS = {"encoder_attention_heads": 4, "decoder_attention_heads": 4, "vocab_size": 300}


def bart() -> Step:
    """A 1+1-layer BART encoder-decoder under autocast bf16."""
    from transformers import BartConfig, BartForConditionalGeneration

    real_models._torchvision_models()
    model = BartForConditionalGeneration(BartConfig(**_SEQ2SEQ, **_SEQ_HEADS, max_position_embeddings=64))
    ids, labels = torch.randint(3, 300, (2, 12)), torch.randint(3, 300, (2, 8))
    return _clipped(model, lambda: model(input_ids=ids, labels=labels).loss)


def whisper() -> Step:
    """A 1+1-layer Whisper (1-d convolutions over 16 mel bins, sinusoidal positions) under autocast bf16."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    real_models._torchvision_models()
    tokens = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1}
    config = WhisperConfig(
        **_SEQ2SEQ, **_SEQ_HEADS, **tokens, num_mel_bins=16, max_source_positions=16, max_target_positions=32
    )
    model = WhisperForConditionalGeneration(config)
    features, labels = torch.randn(2, 16, 32), torch.randint(3, 300, (2, 8))
    return _clipped(model, lambda: model(input_features=features, labels=labels).loss)


STEPS: dict[str, Callable[[], Step]] = {
    f.__name__: f
    for f in (
        block_autocast_bf16,
        block_bf16,
        conv_gradscaler_fp16,
        conv_overflow_fp16,
        checkpoint_mlp,
        rnn_lstm_gru,
        convnext,
        swin,
        bert,
        mistral,
        gemma,
        bart,
        whisper,
    )
}
