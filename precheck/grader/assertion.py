"""``assert_precise``: the grader as a pytest assertion, with a failure message worth reading.

The message follows ``torch.testing.assert_close`` (mismatched elements k / n, the greatest absolute and relative
difference with their index and both values) and adds what a precision investigation needs next: the verdict of
the chosen standard and why, the distribution of the error (mean, p99, max, ULP) and the smallest tolerance that
would have passed. An element is "mismatched" when it is outside assert_close's default tolerance for the target
dtype (``|t - g| > atol + rtol * |g|``), so the counts mean what users already know them to mean.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from precheck.core.status import ERROR, WARNING, at_or_below
from precheck.grader.metrics import Metrics
from precheck.grader.verdict import Comparison, grade_tree, unravel

# torch.testing.assert_close defaults (rtol, atol) per dtype (REFERENCE §3).
_ASSERT_CLOSE = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


def assert_precise(actual: Any, golden: Any, *, fail_on: str = ERROR, **options: Any) -> None:
    """Raise AssertionError when any output leaf of ``actual`` is graded ``fail_on`` or worse against ``golden``.

    ``actual`` and ``golden`` may be tensors, Python numbers, or nested tuples / lists / dicts of them.
    ``options`` are those of :func:`precheck.grader.grade` (``standard``, ``target_dtype``, ``reference``,
    ``cosine``, ``max_abs``, ``api_class``); ``fail_on="warning"`` also fails on warnings.
    """
    __tracebackhide__ = True  # pytest: the user's line and the verdict lead, not precheck's own frames
    if fail_on not in (ERROR, WARNING):
        raise ValueError(f"fail_on must be 'error' or 'warning', not {fail_on!r}")
    failures = [(path, c) for path, c in grade_tree(actual, golden, **options) if at_or_below(c.status, fail_on)]
    if not failures:
        return
    leaves = _leaves(actual, golden)
    parts = [explain(c, *leaves.get(path, (None, None)), path=path) for path, c in failures]
    raise AssertionError("\n\n".join(parts))


def _leaves(actual: Any, golden: Any, path: str = "output") -> dict[str, tuple[Any, Any]]:
    if isinstance(actual, (tuple, list)) and isinstance(golden, (tuple, list)):
        out: dict[str, tuple[Any, Any]] = {}
        for i, (a, g) in enumerate(zip(actual, golden)):
            out.update(_leaves(a, g, f"{path}[{i}]"))
        return out
    if isinstance(actual, dict) and isinstance(golden, dict):
        out = {}
        for k in actual.keys() & golden.keys():
            out.update(_leaves(actual[k], golden[k], f"{path}[{k!r}]"))
        return out
    return {path: (actual, golden)}


def explain(c: Comparison, actual: Any = None, golden: Any = None, path: str = "output") -> str:
    """The full failure text for one compared leaf."""
    said = c.message
    if c.place:  # the message ends with its place: precheck's worst element is the largest absolute error overall
        said = said[: len(said) - len(c.place)] + c.place.replace(" (worst at", " (largest absolute error at", 1)
    lines = [
        f"{path}: {c.status} ({c.target_dtype} vs golden {c.golden_dtype}"
        + (f", shape {c.shape}" if c.shape is not None else "")
        + f"): {said}"
    ]
    if (
        isinstance(actual, torch.Tensor)
        and isinstance(golden, torch.Tensor)
        and actual.shape == golden.shape
        and actual.numel()
        and (actual.is_floating_point() or actual.is_complex())
    ):
        lines += _element_report(actual, golden, c.metrics)
    if c.metrics is not None and c.metrics.cosine is not None:
        lines.append(f"Cosine similarity: {c.metrics.cosine:.8f}")
    return "\n".join(lines)


def _element_report(actual: torch.Tensor, golden: torch.Tensor, metrics: Metrics | None) -> list[str]:
    a = actual.detach().cpu()
    g = golden.detach().cpu()
    dtype = a.dtype.to_real() if a.is_complex() else a.dtype
    rtol, atol = _ASSERT_CLOSE.get(dtype, _ASSERT_CLOSE[torch.float32])
    if a.is_complex():
        a, g = torch.view_as_real(a), torch.view_as_real(g.to(torch.complex128))
    a64, g64 = a.to(torch.float64).reshape(-1), g.to(torch.float64).reshape(-1)
    shape = tuple(a.shape)
    same_nonfinite = (a64 == g64) | (torch.isnan(a64) & torch.isnan(g64))
    abs_err = torch.where(same_nonfinite, torch.zeros_like(a64), (a64 - g64).abs())
    abs_err = torch.nan_to_num(abs_err, nan=math.inf, posinf=math.inf)
    rel_err = abs_err / g64.abs()
    rel_err = torch.where(
        abs_err == 0, torch.zeros_like(rel_err), torch.nan_to_num(rel_err, nan=math.inf, posinf=math.inf)
    )
    mismatch = abs_err > atol + rtol * g64.abs().nan_to_num(posinf=0.0)
    n, k = a64.numel(), int(mismatch.sum())
    lines = [
        f"Mismatched elements: {k} / {n} ({k / n:.1%}) outside assert_close's {dtype} tolerance "
        f"(rtol={rtol:g}, atol={atol:g})"
    ]
    if k:
        idx = mismatch.nonzero().reshape(-1)
        worst_abs = int(idx[abs_err[idx].argmax()])
        worst_rel = int(idx[rel_err[idx].argmax()])
        for label, i, err in (("absolute", worst_abs, abs_err), ("relative", worst_rel, rel_err)):
            lines.append(
                f"Greatest {label} difference among them: {float(err[i]):.6g} at index {unravel(i, shape)} "
                f"(target {a64[i].item()!r}, golden {g64[i].item()!r})"
            )
    finite = torch.isfinite(abs_err)
    if bool(finite.any()):
        e = abs_err[finite]
        gf = g64[finite].abs()
        ulp = _ulp_said(metrics, dtype)
        lines.append(f"Absolute error: mean {float(e.mean()):.3g}, p99 {_p99(e):.3g}, max {float(e.max()):.3g}{ulp}")
        if bool(finite.all()):
            need_atol = float((e - rtol * gf).clamp(min=0).max())
            nz = gf > 0
            need_rtol = float(((e[nz] - atol).clamp(min=0) / gf[nz]).max()) if bool(nz.any()) else math.inf
            if bool(((e > atol) & ~nz).any()):
                need_rtol = math.inf  # an error where the golden is 0 can only be covered by atol
            lines.append(
                f"Minimum tolerance that would have passed: atol={_up(need_atol)} (with rtol={rtol:g}) "
                f"or rtol={_up(need_rtol)} (with atol={atol:g})"
            )
        else:
            lines.append("Minimum tolerance that would have passed: none (inf/nan mismatch)")
    if not bool(finite.all()):
        lines.append(f"Non-finite mismatches: {int((~finite).sum())} element(s) hold inf/nan on one side only")
    return lines


# msprobe's ULP (the CSV's ULP columns): at a golden value below the dtype's smallest normal one ULP is the
# subnormal spacing, 2**(min exponent - mantissa bits)
_SUBNORMAL_ULP = {torch.bfloat16: 2.0**-133, torch.float16: 2.0**-24, torch.float32: 2.0**-149}


def _ulp_said(metrics: Metrics | None, dtype: torch.dtype) -> str:
    """The ULP figures, and why they are astronomical where they are: msprobe's ULP counts an error at a golden
    value near zero in subnormal spacings (bf16: 2**-133), so an error of 1e-8 there is 1e32 ULPs."""
    if metrics is None or metrics.ulp_max is None or metrics.ulp_mean is None:
        return ""
    said = f"; ULP ({dtype}): mean {metrics.ulp_mean:.3g}, max {metrics.ulp_max:.3g}"
    spacing = _SUBNORMAL_ULP.get(dtype)
    if spacing is not None and metrics.ulp_max > 2**24:
        said += f" (msprobe's ULP: near zero one ULP is {spacing:.3g}, so small errors there count as many)"
    return said


def _p99(values: torch.Tensor) -> float:
    """99th percentile by rank (torch.quantile refuses tensors above 16M elements)."""
    k = max(1, math.ceil(0.99 * values.numel()))
    return float(torch.kthvalue(values, k).values)


def _up(value: float) -> str:
    """Three significant digits, rounded up: a printed tolerance must itself pass."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    exponent = math.floor(math.log10(value)) - 2
    step = 10.0**exponent
    return f"{math.ceil(value / step * (1 - 1e-12)) * step:.3g}"
