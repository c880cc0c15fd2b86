"""A broad, real msprobe L1 dump built from PyTorch's own OpInfo sample inputs.

Why: the hand-made dumps (mlp, gpt2) touch a few dozen APIs. This module feeds make_dump.py a "model" whose run()
calls every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db`` that supports the dtype on CPU,
once, on the op's FIRST sample input, and sums every floating output that needs a gradient into the loss, so msprobe
records hundreds of distinct APIs (Functional / Torch / Tensor), forward and backward, with real argument encodings.
It is a coverage and robustness corpus for precheck (decoding, re-running, grading), not a model.

Screening happens in model(), BEFORE msprobe starts: each op is run forward and backward once outside the dump, and
ops that fail to make samples, raise, take more than MAX_SECONDS, or whose backward fails are dropped, so the single
backward pass that make_dump.py runs under msprobe cannot fail. run() then calls only the survivors on fresh copies of
the same inputs (seeded, so the dump is deterministic up to ops that are random by nature).

Regenerate from the repository root, in msprobe's throwaway venv (tests/data/recipes/msprobe_venv.py makes it, with
the torch of the python that runs it; tests/data/README.md):
    .venv/bin/python tests/data/recipes/msprobe_venv.py --pip transformers expecttest -- \
        tests/data/recipes/make_dump.py --risk-level ALL opinfo_dump:model fp32 tensor OUT   # opinfo_fp32_all
    .venv/bin/python tests/data/recipes/msprobe_venv.py --pip transformers expecttest -- \
        tests/data/recipes/make_dump.py --risk-level ALL opinfo_dump:model bf16 statistics OUT   # opinfo_bf16_all_stats
then OUT/step0 becomes the fixture's step0. ``--risk-level ALL``: msprobe's default, FOCUS, drops its "LOW"-risk APIs
(cat, stack, clamp, reshape, view, to, zeros, clone, ... see msprobe/pytorch/dump/api_dump/api_risk_level.py).
Set OPINFO_DUMP_VERBOSE=1 to print the skipped ops (and why) to stderr. Not every op that runs leaves a record: msprobe
hooks only the APIs in its support_wrap_ops.yaml (no torch.fft.*, most torch.special.*, no torch.ops.aten.*).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

MAX_SECONDS = 1.0
# The modules msprobe patches (it replaces their attributes with hooked wrappers at debugger.start()). OpInfo holds
# direct references to the ORIGINAL functions, which would bypass the hooks, so every op is looked up again by
# (owner, attribute) when run() calls it. Order = preference when one function is reachable from several owners.
_OWNERS: tuple[tuple[str, Any], ...] = (
    ("torch.nn.functional", torch.nn.functional),
    ("torch.linalg", torch.linalg),
    ("torch.special", torch.special),
    ("torch.fft", torch.fft),
    ("torch", torch),
    ("torch.Tensor", torch.Tensor),
)
# The loss plumbing uses functions captured at import (before msprobe patches anything), so it is not dumped:
# every record in the dump then comes from an OpInfo call, not from summing outputs.
_SUM = torch.sum
_ADD = torch.add
_TO_FLOAT = torch.Tensor.float
_ZEROS = torch.zeros
# Name fragments of ops left out on purpose: sparse / nested / quantized layouts, in-place resizes, and ops that
# are known to be slow or to need inputs OpInfo only fakes (jiterator, CUDA-only kernels).
EXCLUDED_FRAGMENTS = ("sparse", "nested", "quantize", "jiterator", "_refs", "resize_", "to_sparse", "cuda")


@dataclass
class _Case:
    name: str
    func: Callable[..., Any]
    owner: Any  # module or class to look the function up on at call time, or None to call func as it is
    attr: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def call(self) -> Any:
        func = getattr(self.owner, self.attr) if self.owner is not None else self.func
        return func(*self.args, **self.kwargs)


def _index() -> dict[int, tuple[Any, str]]:
    """id(function) -> (owner, attribute) for every public callable of the patched owners (first owner wins)."""
    found: dict[int, tuple[Any, str]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _, owner in _OWNERS:
            for attr in dir(owner):
                try:
                    value = getattr(owner, attr)
                except Exception:  # noqa: BLE001, S112 - some attributes raise on access
                    continue
                if callable(value):
                    found.setdefault(id(value), (owner, attr))
    return found


def _where(func: Callable[..., Any], name: str, index: dict[int, tuple[Any, str]]) -> tuple[Any, str]:
    """(owner, attribute) under which torch exposes func, trying the OpInfo name first; (None, "") if nowhere."""
    owner_name, _, attr = f"torch.{name}".rpartition(".")
    for known_name, owner in _OWNERS:
        if known_name == owner_name and getattr(owner, attr, None) is func:
            return owner, attr
    return index.get(id(func), (None, ""))


def _fresh(value: Any) -> Any:
    """Deep-copy the tensors of a sample (keeping requires_grad) so that run() starts from untouched leaves."""

    def copy(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.detach().clone().requires_grad_(x.requires_grad)
        return x

    return tree_map(copy, value)


def _loss_of(output: Any) -> torch.Tensor | None:
    """Sum of every floating output tensor that requires grad, in fp32, or None if there is none."""
    leaves, _ = tree_flatten(output)
    total: torch.Tensor | None = None
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.requires_grad:
            part = _SUM(_TO_FLOAT(leaf))
            total = part if total is None else _ADD(total, part)
    return total


def _has_zero_tensor_grad(inputs: Any) -> bool:
    """True if autograd left an efficient ZeroTensor (no storage) as some input's gradient, as sgn's backward does."""
    leaves, _ = tree_flatten(inputs)
    return any(
        isinstance(leaf, torch.Tensor) and leaf.grad is not None and leaf.grad._is_zerotensor() for leaf in leaves
    )


def _excluded(name: str) -> bool:
    return any(fragment in name for fragment in EXCLUDED_FRAGMENTS)


def _say(message: str) -> None:
    if os.environ.get("OPINFO_DUMP_VERBOSE"):
        print(message, file=sys.stderr)


def _screen(dtype: torch.dtype) -> tuple[list[_Case], dict[str, str]]:
    """Pick the ops that run forward and backward on their first sample, quickly, outside the dump."""
    from torch.testing._internal.common_methods_invocations import op_db

    index = _index()
    cases: list[_Case] = []
    skipped: dict[str, str] = {}
    for op in op_db:
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if _excluded(op.name):
            skipped[name] = "excluded"
            continue
        try:
            dtypes = op.supported_dtypes("cpu")
        except Exception:  # noqa: BLE001 - any OpInfo that cannot say its dtypes is left out
            dtypes = op.dtypes
        if dtype not in dtypes:
            skipped[name] = "dtype"
            continue
        requires_grad = bool(op.supports_autograd and dtype.is_floating_point)
        torch.manual_seed(0)
        try:
            sample = next(iter(op.sample_inputs("cpu", dtype, requires_grad=requires_grad)))
        except Exception as exc:  # noqa: BLE001
            skipped[name] = f"samples: {type(exc).__name__}"
            continue
        args = (sample.input, *sample.args)
        kwargs = dict(sample.kwargs)
        owner, attr = _where(op.op, op.name, index)
        case = _Case(name, op.op, owner, attr, _fresh(args), _fresh(kwargs))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                torch.manual_seed(0)
                trial_args, trial_kwargs = _fresh(args), _fresh(kwargs)
                out = op.op(*trial_args, **trial_kwargs)
                loss = _loss_of(out)
                if loss is not None:
                    loss.backward()
                elapsed = time.perf_counter() - start
        except Exception as exc:  # noqa: BLE001
            skipped[name] = f"call: {type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''}"
            continue
        if _has_zero_tensor_grad((trial_args, trial_kwargs)):
            skipped[name] = "backward gives an efficient ZeroTensor gradient (msprobe tensor mode crashes saving it)"
            continue
        if elapsed > MAX_SECONDS:
            skipped[name] = f"slow: {elapsed:.2f} s"
            continue
        cases.append(case)
    return cases, skipped


def model(dtype: torch.dtype) -> tuple[torch.nn.Module, Callable[[], torch.Tensor]]:
    """make_dump.py entry point: a dummy module for debugger.start() and a run() that calls every screened op."""
    torch.manual_seed(0)
    dummy = torch.nn.Linear(2, 2).to(dtype)
    cases, skipped = _screen(dtype)
    for name, why in skipped.items():
        _say(f"skip {name}: {why}")
    print(f"opinfo_dump: {len(cases)} ops to record, {len(skipped)} skipped ({dtype})", file=sys.stderr)

    def run() -> torch.Tensor:
        torch.manual_seed(0)
        total = _ZEROS((), dtype=torch.float32, requires_grad=True)
        failed: list[str] = []
        for case in cases:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = case.call()
            except Exception as exc:  # noqa: BLE001 - an op that fails under msprobe is left out of the loss
                failed.append(f"{case.name}: {type(exc).__name__}")
                continue
            loss = _loss_of(out)
            if loss is not None:
                total = _ADD(total, loss)
        for line in failed:
            print(f"opinfo_dump: failed under msprobe: {line}", file=sys.stderr)
        return total

    return dummy, run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__ + "\nRun directly, it screens the OpInfo ops without msprobe and prints how many would "
        "be recorded and why the others are left out.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32")
    return parser


def main() -> None:
    parser = build_parser()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[parser.parse_args().dtype]
    try:
        cases, skipped = _screen(dtype)
    except ImportError as e:  # torch's OpInfo database imports test-only packages
        parser.error(f"the OpInfo database needs {e.name}: pip install {e.name}")
    reasons: dict[str, int] = {}
    for why in skipped.values():
        reasons[why.split(":")[0]] = reasons.get(why.split(":")[0], 0) + 1
    print(f"{len(cases)} ops would be recorded ({dtype}); left out: {reasons}")


if __name__ == "__main__":
    main()
