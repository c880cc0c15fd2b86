"""Grade one target output against its float64 golden with the product's default rule.

Pass iff cosine > ``cosine`` and max absolute error < ``max_abs``. Otherwise warning when the output still meets
the dtype-aware tolerance of its target dtype (msprobe's in-run cascade, computed against our float64 golden),
else error. Any non-finite value that the golden does not hold identically is an error. Integer and bool
outputs must match exactly. One-element outputs have no cosine and are judged by absolute and relative error.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from precheck.grader.limits import is_low_precision
from precheck.grader.metrics import Metrics, exact_metrics, float_metrics
from precheck.grader.status import ERROR, PASS, SKIP, WARNING

DEFAULT_COSINE = 0.99
DEFAULT_MAX_ABS = 1e-4


@dataclass(frozen=True)
class Comparison:
    """The verdict on one output, with everything the details CSV and a failing test need to say."""

    status: str
    message: str
    metrics: Metrics | None
    golden_dtype: str
    target_dtype: str
    shape: tuple[int, ...] | None


def compare(target: Any, golden: Any, *, cosine: float = DEFAULT_COSINE,
            max_abs: float = DEFAULT_MAX_ABS) -> Comparison:
    """Compare one output leaf: a tensor, a Python number, or any other value compared for equality."""
    if isinstance(target, torch.Tensor) and isinstance(golden, torch.Tensor):
        return _compare_tensors(target, golden, cosine, max_abs)
    if isinstance(target, torch.Tensor) or isinstance(golden, torch.Tensor):
        return Comparison(ERROR, f"type mismatch: target is {_kind(target)}, golden is {_kind(golden)}", None,
                          _kind(golden), _kind(target), None)
    if _is_real_number(target) and _is_real_number(golden) and (isinstance(target, float) or
                                                                  isinstance(golden, float)):
        result = _compare_tensors(torch.tensor(float(target), dtype=torch.float64),
                                  torch.tensor(float(golden), dtype=torch.float64), cosine, max_abs)
        return Comparison(result.status, result.message, result.metrics, str(type(golden)), str(type(target)),
                          None)
    same = target == golden and (type(target) is type(golden) or _is_real_number(target) and _is_real_number(golden))
    return Comparison(PASS if same else ERROR, "" if same else f"value {target!r} != golden {golden!r}",
                      Metrics(binary_mismatch=0.0 if same else 1.0), str(type(golden)), str(type(target)), None)


def _is_real_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _kind(x: Any) -> str:
    """A value's dtype as msprobe writes it: ``torch.float32`` or ``<class 'int'>``."""
    return str(x.dtype) if isinstance(x, torch.Tensor) else str(type(x))


def _compare_tensors(target: torch.Tensor, golden: torch.Tensor, cosine: float, max_abs: float) -> Comparison:
    shape = tuple(target.shape)
    dtypes = dict(golden_dtype=str(golden.dtype), target_dtype=str(target.dtype), shape=shape)
    if tuple(golden.shape) != shape:
        return Comparison(ERROR, f"shape mismatch: target {shape} vs golden {tuple(golden.shape)}", None, **dtypes)
    if target.numel() == 0:
        return Comparison(PASS, "empty output", Metrics(), **dtypes)
    is_float = target.dtype.is_floating_point or target.dtype.is_complex
    if not is_float and not (golden.dtype.is_floating_point or golden.dtype.is_complex):
        m = exact_metrics(target, golden)
        if m.binary_mismatch == 0:
            return Comparison(PASS, "", m, **dtypes)
        k = round(m.binary_mismatch * target.numel())
        where = _at(shape, m.worst_index, target, golden, "largest difference")
        return Comparison(ERROR, f"{k}/{target.numel()} elements differ from the golden{where}", m, **dtypes)
    target_dtype = target.dtype if is_float else torch.float64
    m = float_metrics(target, golden, target_dtype)
    status, message = judge(m, target_dtype, cosine, max_abs)
    if status != PASS:
        message += _at(shape, m.worst_index, target, golden) if m.nonfinite_mismatches == 0 else \
            _at(shape, m.first_nonfinite_mismatch, target, golden, "first")
    return Comparison(status, message, m, **dtypes)


def judge(m: Metrics, target_dtype: torch.dtype, cosine: float = DEFAULT_COSINE,
          max_abs: float = DEFAULT_MAX_ABS) -> tuple[str, str]:
    """The default rule on computed metrics: (status, reason); the reason is empty on pass."""
    if m.nonfinite_mismatches:
        return ERROR, f"inf/nan mismatch in {m.inf_nan_err_ratio:.4%} of elements"
    if m.max_abs_err is None:
        return PASS, ""  # every position holds the same non-finite value on both sides
    cos_ok = m.cosine is None or m.cosine > cosine
    if cos_ok and m.max_abs_err < max_abs:
        return PASS, ""
    reasons = []
    if not cos_ok:
        reasons.append(f"cosine {m.cosine:.6f} <= {cosine}")
    if m.max_abs_err >= max_abs:
        reasons.append(f"max abs error {m.max_abs_err:.3g} >= {max_abs:g}")
    verdict = _dtype_cascade(m, target_dtype)
    if verdict == ERROR:
        return ERROR, "; ".join(reasons) + f"; beyond the {target_dtype} tolerance ({_cascade_reason(m, target_dtype)})"
    return WARNING, "; ".join(reasons) + f"; within the {target_dtype} tolerance"


def _dtype_cascade(m: Metrics, dtype: torch.dtype) -> str:
    """msprobe's in-run verdict (REFERENCE §3), against our float64 golden."""
    if m.cosine is not None and m.cosine <= 0.99:
        return ERROR
    if m.max_abs_err < 1e-3:
        return PASS
    if is_low_precision(dtype):
        if m.rel_within_1e2 <= 0.99:
            return ERROR
        return WARNING if m.rel_within_1e3 <= 0.999 else PASS
    if m.rel_within_1e3 <= 0.999:
        return ERROR
    return WARNING if m.rel_within_1e4 <= 0.9999 else PASS


def _cascade_reason(m: Metrics, dtype: torch.dtype) -> str:
    if m.cosine is not None and m.cosine <= 0.99:
        return f"cosine {m.cosine:.6f} <= 0.99"
    if is_low_precision(dtype):
        return f"only {m.rel_within_1e2:.4%} of elements within 1e-2 relative error, 99% required"
    return f"only {m.rel_within_1e3:.4%} of elements within 1e-3 relative error, 99.9% required"


def _at(shape: tuple[int, ...], flat: int | None, target: torch.Tensor, golden: torch.Tensor,
        which: str = "worst") -> str:
    """Where the worst element is, and both values there, as assert_close reports it."""
    if flat is None:
        return ""
    t, g = target.detach().cpu(), golden.detach().cpu()
    if t.is_complex():
        t, g = torch.view_as_real(t), torch.view_as_real(g.to(torch.complex128))
        shape = tuple(t.shape)
    index = _unravel(flat, shape)
    return f" ({which} at index {index}: target {t.reshape(-1)[flat].item()!r}, golden {g.reshape(-1)[flat].item()!r})"


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Flat index to a multi-index (torch.unravel_index imports sympy on first use: half a second)."""
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        index.append(i)
    return tuple(reversed(index))
