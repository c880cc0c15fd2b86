"""compare across precisions (issue 38) on twins recorded in-process: does a clean low-precision step name nothing, and
is a bad kernel named?

usage: python benchmarks/bench_compare_precision.py [--arch NAME ...] [--out DIR]
Each architecture's step, at a small size and seeded, is recorded by ``precheck.record`` (tensor task) in fp32, under
``torch.autocast("cpu")`` to its low dtype, and under that autocast with one bad kernel patched into
torch.nn.functional before the recorder is made (as tests/data/record/make_fixtures.py injects its 6-bit SiLU): a
SiLU or GELU rounded to a 6-bit significand, a softmax that sums in bf16, a layer_norm whose variance is rounded to
a 6-bit significand. Each low-precision dump is then compared with its fp32 twin in this process
(``precheck.compare.dumps.compare_dumps``, the honest-kernel rule's replay included), and one row is printed per
pair: the record expected to be named (none on a clean pair) and the one named, the compare's rows, the candidates
kept for the honest-kernel rule and the calls it graded, its replay's seconds and the whole compare's seconds.

Architectures (each gets the bad kernels it calls):
- gpt: tests/data/record/gpt_model.py's hand-written GPT block (layer_norm, softmax, SiLU), autocast bf16;
- llama: a two-layer Llama from transformers' LlamaConfig (hidden 64, grouped-query attention, eager attention so
  that its softmax is F.softmax, SiLU MLP, RMSNorm), autocast bf16; skipped where transformers cannot be imported;
- convnext: torchvision's ConvNeXt with two small stages (depthwise convs, LayerNorm2d, GELU) on 32x32 images,
  autocast fp16; a hand-written conv net of the same ops where torchvision cannot be imported (real_models.py says
  how torchvision's CUDA wheel is imported on a CPU torch).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import real_models
import torch
import torch.nn as nn
import torch.nn.functional as F

import precheck
from precheck.compare.dumps import compare_dumps

ROOT = Path(__file__).resolve().parents[1]
_HIT = {True: "yes", False: "NO", None: "=clean"}  # =clean: the bad pair names what the clean pair named
BITS = 6  # the bad kernels' significand (bf16 keeps 8, fp16 11)
Step = Callable[[], torch.Tensor]


def _coarse(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to a BITS-bit significand, its gradient passed straight through (the bad kernel's backward is
    the honest one: only its forward rounds too coarsely)."""
    mantissa, exponent = torch.frexp(t.detach().float())
    rounded = torch.ldexp(torch.round(mantissa * 2**BITS) / 2**BITS, exponent).to(t.dtype)
    return t + (rounded - t.detach())


_REAL = {name: getattr(F, name) for name in ("silu", "gelu", "softmax", "layer_norm")}


def silu6(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    return _coarse(_REAL["silu"](input))


def gelu6(input: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return _coarse(_REAL["gelu"](input, approximate=approximate))


def softmax_bf16_sum(input: torch.Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> torch.Tensor:
    """A softmax whose denominator is a running sum rounded to bf16 at every addition."""
    x = (input if dtype is None else input.to(dtype)).float()
    e = (x - x.amax(dim, keepdim=True)).exp()
    parts = e.unbind(dim)
    total = parts[0].bfloat16()
    for part in parts[1:]:
        total = total + part.bfloat16()
    return (e / total.float().unsqueeze(dim)).to(input.dtype if dtype is None else dtype)


def layer_norm_coarse_var(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> torch.Tensor:
    """layer_norm with its variance rounded to a BITS-bit significand; fp32 out, as autocast's layer_norm."""
    dims = tuple(range(-len(normalized_shape), 0))
    x = input.float()
    centred = x - x.mean(dims, keepdim=True)
    y = centred / torch.sqrt(_coarse(centred.pow(2).mean(dims, keepdim=True)) + eps)
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


BAD = {  # bad kernel -> (the functional it replaces, the record it should name)
    "silu6": ("silu", silu6),
    "gelu6": ("gelu", gelu6),
    "softmax_bf16_sum": ("softmax", softmax_bf16_sum),
    "layer_norm_coarse_var": ("layer_norm", layer_norm_coarse_var),
}


def gpt() -> Step:
    sys.path.insert(0, str(ROOT / "tests" / "data" / "record"))
    import gpt_model

    model = gpt_model.Gpt()
    ids = torch.randint(0, gpt_model.VOCAB, (2, gpt_model.SEQ))
    labels = torch.randint(0, gpt_model.VOCAB, (2, gpt_model.SEQ))
    return lambda: model(ids, labels)


def llama() -> Step:
    real_models._torchvision_models()  # transformers imports torchvision when it is installed (real_models' note)
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    config._attn_implementation = "eager"  # its softmax is F.softmax (sdpa's is inside one call)
    model = LlamaForCausalLM(config)
    model.train()
    ids = torch.randint(0, 256, (2, 16))
    return lambda: model(input_ids=ids, labels=ids).loss


class _ConvNet(nn.Module):
    """ConvNeXt's ops by hand (torchvision not importable): conv stem, channel layer_norm, depthwise conv, GELU."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 4, stride=4)
        self.dw = nn.Conv2d(16, 16, 7, padding=3, groups=16)
        self.norm1, self.norm2 = nn.LayerNorm(16), nn.LayerNorm(16)
        self.up, self.down = nn.Linear(16, 64), nn.Linear(64, 16)
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(self.stem(x).permute(0, 2, 3, 1))
        x = x + self.down(F.gelu(self.up(self.norm2(self.dw(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)))))
        return self.head(x.mean((1, 2)))


def convnext() -> Step:
    try:
        real_models._torchvision_models()
        from torchvision.models.convnext import CNBlockConfig, ConvNeXt

        model = ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10)
    except Exception as e:  # noqa: BLE001 (any import failure: the same ops by hand)
        print(f"convnext: torchvision not importable ({type(e).__name__}): a hand-written conv net instead")
        model = _ConvNet()
    model.train()
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    return lambda: F.cross_entropy(model(x).float(), y)


ARCHS = {  # name -> (step builder, autocast dtype, its bad kernels)
    "gpt": (gpt, torch.bfloat16, ("silu6", "softmax_bf16_sum", "layer_norm_coarse_var")),
    "llama": (llama, torch.bfloat16, ("silu6", "softmax_bf16_sum")),
    "convnext": (convnext, torch.float16, ("gelu6", "layer_norm_coarse_var")),
}


def record(step: Callable[[], Step], dtype: torch.dtype | None, bad: str | None, out: Path) -> Path:
    """One step, seeded, recorded into ``out`` (under autocast to ``dtype`` unless None, with the bad kernel in
    its functional's place while it is recorded); its dump.json."""
    torch.manual_seed(0)
    run = step()
    name, kernel = BAD[bad] if bad else (None, None)
    if name:
        setattr(F, name, kernel)  # before the recorder wraps it: recorded as Functional.<name>
    try:
        with precheck.record(out), torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            run().backward()
    finally:
        if name:
            setattr(F, name, _REAL[name])
    return next(out.glob("step0/*/dump.json"))


def pair_row(
    label: str, expected: str | None, clean: str | None, target: Path, bench: Path, out: Path
) -> tuple[str, str, bool | None]:
    """Compare ``target`` with ``bench``: the table's row, the record compare named ("-": none) and whether it is
    the one expected (None: the bad kernel's record, but the clean pair names it too)."""
    start = time.perf_counter()
    summary = compare_dumps(target, bench, out).as_dict()
    seconds = time.perf_counter() - start
    first, where = summary["first_divergent"], summary["localization"]
    named = first["name"] if first else "-"
    hit = named == "-" if expected is None else named.startswith(expected + ".")
    if expected and hit and named == clean:  # the clean pair's own headline: the bad kernel is not what named it
        hit = None
    explained = summary.get("explained")
    if first:
        note = f"{first['rule']}"
    elif explained:  # across precisions: the runs agree within what it explains (precheck.compare.divergence)
        note = "explained by the precision: {deviation:.3g} at {record}".format(**explained)
    else:
        note = "worst {worst} at {roundings} roundings".format(**summary["rounding"])
    row = (f"{label:40} {expected or '-':22} {named:36} {_HIT[hit]:>5} {summary['rows']:5} "
           f"{where['candidates']:5} {where['replayed_calls']:6} {where['replay_seconds']:8.2f} {seconds:8.2f}  "
           f"{note}")  # fmt: skip
    return row, named, hit


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", nargs="+", choices=list(ARCHS), default=list(ARCHS), help="default: all")
    parser.add_argument("--out", help="keep the dumps and compare outputs in this folder (default: a temporary one)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        print(f"{'pair':40} {'expected':22} {'named':36} {'hit':>5} {'rows':>5} {'cands':>5} {'graded':>6} "
              f"{'replay s':>8} {'cmp s':>8}  rule / clean pair's worst")  # fmt: skip
        misses = 0
        for arch in args.arch:
            step, dtype, bads = ARCHS[arch]
            low = str(dtype).removeprefix("torch.").replace("bfloat", "bf").replace("float", "fp")
            try:
                fp32 = record(step, None, None, out / arch / "fp32")
            except ImportError as e:
                print(f"{arch}: skipped ({e})")
                continue
            clean = None
            for bad in (None, *bads):
                variant = f"{low}_{bad}" if bad else low
                target = record(step, dtype, bad, out / arch / variant)
                expected = f"Functional.{BAD[bad][0]}" if bad else None
                label = f"{arch} {variant} vs fp32"
                row, named, hit = pair_row(label, expected, clean, target, fp32, out / arch / "cmp" / variant)
                print(row, flush=True)
                clean = named if bad is None else clean
                misses += hit is not True
        print(f"{misses} pair(s) where compare did not name what it should (a false headline, a miss, or =clean)")


if __name__ == "__main__":
    main()
