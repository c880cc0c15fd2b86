"""Statistical checks of random API calls: a random op's output is graded against the law it should follow.

Two runs of a random op draw different numbers, so its target output cannot be compared with a golden. Each check
here measures instead what the law fixes: dropout zeroes a share p of its input and scales the rest by 1/(1-p), a
sampler's draws have the law's range and moments, a permutation is a permutation. Exact properties are checked
exactly, up to the rounding of the output dtype; statistical ones with a bound that a correct implementation exceeds
with probability at most DELTA, so that a failed finding points at a defect, not at bad luck.

The statistical bounds come from Bernstein's inequality. A sum S of independent terms whose variances add up to V,
each term satisfying Bernstein's moment condition E|X - EX|^k <= k!/2 Var(X) c^(k-2) (true with c = M/3 for terms
within M of their mean), obeys P(|S - ES| >= t) <= 2 exp(-t^2 / (2 (V + c t))). Solved at probability DELTA this
gives t = c L + sqrt((c L)^2 + 2 V L) with L = ln(2 / DELTA): 5.4 standard deviations for many draws, plus the
slack c L that keeps the bound true for few draws and skewed laws, where the normal approximation raises false
alarms (the sample variance of 20 exponential draws exceeds 6 sigma 1.5 times in a thousand, simulated).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

DELTA = 1e-6  # probability that a correct draw fails one statistical finding
_L = math.log(2 / DELTA)
MIN_N = 20  # fewer draws than this: exact and range findings only
MAX_FIXED_POINTS = 9  # a uniform permutation has 10 or more fixed points with probability <= 1/10!
MIN_EXPECTED = 10.0  # Pearson cells expected to hold fewer draws are pooled
SELU_ALPHA = -1.7580993408473766  # alpha' of alpha dropout: -SELU scale * SELU alpha, torch's Dropout.cpp


@dataclass(frozen=True)
class Finding:
    """One measured property of a random call's output: its name, whether it holds, and a one-line account."""

    what: str
    passed: bool
    message: str


class NotCheckable(Exception):
    """This particular call cannot be checked meaningfully; the message is a one-line reason."""


Check = Callable[[tuple, dict, list], list[Finding]]
BackwardCheck = Callable[[tuple, dict, list, list, dict], list[Finding]]
# Raises NotCheckable from the arguments' shapes alone (tensors or recorded TensorSpecs).
ShapeCheck = Callable[[tuple, dict, list], None]


# ---------------------------------------------------------------------------------------------------- arguments


def number_arg(value: Any, name: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        return float(value.item())
    if isinstance(value, (bool, int, float)):
        return float(value)
    raise NotCheckable(f"{name} is not a number ({type(value).__name__})")


def tensor_arg(value: Any, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise NotCheckable(f"{name} is not a tensor ({type(value).__name__})")
    if value.is_complex():
        raise NotCheckable(f"{name} is complex: only real laws are checked")
    if value.is_nested or value.is_sparse:
        raise NotCheckable(f"{name} is a nested or sparse tensor")
    return value


def float_tensor_arg(value: Any, name: str) -> torch.Tensor:
    tensor = tensor_arg(value, name)
    if not tensor.is_floating_point():
        raise NotCheckable(f"{name} is not floating point ({tensor.dtype})")
    return tensor


def output_tensor(outputs: list, index: int = 0) -> torch.Tensor:
    if len(outputs) <= index:
        raise NotCheckable(f"expected at least {index + 1} output tensor(s), got {len(outputs)}")
    out = tensor_arg(outputs[index], "the output")
    if out.numel() == 0:
        raise NotCheckable("empty output")
    return out


def aliased(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether b was written over a (an in-place call): the input the output should be measured against is gone."""
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def f64(tensor: torch.Tensor) -> torch.Tensor:
    """The values in float64 on the CPU: exact for every real dtype torch draws in (integers up to 2^53)."""
    return tensor.detach().to("cpu", torch.float64)


# ---------------------------------------------------------------------------------------------------- tolerances


def rtol_of(dtype: torch.dtype) -> float:
    """Relative error allowed where the target rounds a value to ``dtype``.

    Half types get two unit roundoffs (bfloat16 2^-7, float16 2^-10): CPU dropout rounds its scale 1/(1-p) to the
    dtype before rounding the product, and errors of 1.3 roundoffs are measured there. float32 (1e-6) and float64
    (1e-12) get dozens of roundoffs, still far below any scale or slope error worth reporting."""
    return {torch.float32: 1e-6, torch.float64: 1e-12}.get(dtype, torch.finfo(dtype).eps)


def eps_of(dtype: torch.dtype) -> float:
    """Relative spacing of the dtype's values: how far rounding a draw to it may move the draw (0 for integers)."""
    return torch.finfo(dtype).eps if dtype.is_floating_point else 0.0


def tiny_of(dtype: torch.dtype) -> float:
    """Absolute slack for values that round into the subnormal range, where the relative bound does not hold."""
    return torch.finfo(dtype).tiny if dtype.is_floating_point else 0.0


def deviation(variance: float, scale: float) -> float:
    """Deviation of a sum of independent terms from its mean exceeded with probability at most DELTA (Bernstein,
    see the module docstring): ``variance`` is the sum's, ``scale`` the terms' moment scale c."""
    return scale * _L + math.sqrt((scale * _L) ** 2 + 2 * variance * _L)


# ---------------------------------------------------------------------------------------------------- findings


def _word(passed: bool) -> str:
    return "within" if passed else "outside"


def _pc(x: float) -> str:
    return f"{100 * x:.3g}%"


def same_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise equality where NaN equals NaN."""
    return (a == b) | (a.isnan() & b.isnan())


def count_finding(what: str, bad: torch.Tensor, n: int, ok: str, wrong: str) -> Finding:
    """An exact property: passes when no element is ``bad``; ``ok``/``wrong`` finish the message."""
    k = int(bad.sum())
    return Finding(what, k == 0, f"{what}: all {n} {ok}" if k == 0 else f"{what}: {k} of {n} {wrong}")


def range_finding(
    values: torch.Tensor, lo: float, hi: float, *, hi_open: bool = False, integer: bool = False, what: str = "range"
) -> Finding:
    """Every draw lies in [lo, hi] (or [lo, hi)), and is an integer where the law is discrete; NaN fails."""
    inside = (values >= lo) & ((values < hi) if hi_open else (values <= hi))
    if integer:
        inside &= values == values.round()
    span = f"[{lo:g}, {hi:g}{')' if hi_open else ']'}"
    kind = "integers" if integer else "values"
    n, bad = values.numel(), int((~inside).sum())
    if bad == 0:
        return Finding(what, True, f"{what}: all {n} {kind} in {span}")
    return Finding(
        what,
        False,
        f"{what}: {bad} of {n} values are not {kind} in {span} "
        f"(min {values.min().item():g}, max {values.max().item():g})",
    )


def share_finding(what: str, hits: int, n: int, p: float, context: str, slack: float = 0.0) -> Finding:
    """The share of n independent units that hit, each with probability p: Bernstein with terms in [0, 1]."""
    share = hits / n
    bound = deviation(n * p * (1 - p), 1 / 3) / n + slack
    passed = abs(share - p) <= bound
    return Finding(what, passed, f"{what} {_pc(share)} {_word(passed)} {_pc(p)} ± {_pc(bound)} ({context})")


def sum_finding(what: str, total: float, expected: float, variance: float, context: str, slack: float = 0.0) -> Finding:
    """A sum of independent draws in [0, 1] or Poisson counts (Bennett: moment scale 1/3 for both)."""
    bound = deviation(variance, 1 / 3) + slack
    passed = abs(total - expected) <= bound
    return Finding(what, passed, f"{what} {total:.6g} {_word(passed)} {expected:.6g} ± {bound:.4g} ({context})")


@dataclass(frozen=True)
class Law:
    """Moments of a law and the Bernstein moment scales of the terms of its sample mean and variance.

    ``mu4`` is None for laws with exponential tails: their squared deviations meet no Bernstein condition, and
    the mean alone pins the law's single parameter."""

    label: str
    mean: float
    var: float
    mean_scale: float
    mu4: float | None = None
    var_scale: float = 0.0


def uniform_law(lo: float, hi: float) -> Law:
    w = hi - lo
    return Law(f"uniform on [{lo:g}, {hi:g})", (lo + hi) / 2, w * w / 12, w / 6, w**4 / 80, w * w / 18)


def integer_law(lo: float, hi: float) -> Law:
    """The discrete uniform law on lo .. hi-1 (m values; 4th central moment (m^2-1)(3m^2-7)/240)."""
    m = hi - lo
    return Law(
        f"integers uniform on [{lo:g}, {hi:g})",
        (lo + hi - 1) / 2,
        (m * m - 1) / 12,
        (m - 1) / 6,
        (m * m - 1) * (3 * m * m - 7) / 240,
        (m - 1) ** 2 / 12,
    )


# Squared standard normal draws (chi-square, 1 degree): Bernstein scale 1.92, computed numerically, taken as 2.
STANDARD_NORMAL = Law("(out - mean) / std, standard normal", 0.0, 1.0, 0.0, 3.0, 2.0)


def moment_findings(values: torch.Tensor, law: Law, quantum: float) -> list[Finding]:
    """Sample mean, and sample variance about the law's mean, of float64 draws against the law.

    ``quantum`` bounds how far rounding to the output dtype moves a draw on average: it widens the mean's bound by
    itself and the variance's by 2 quantum std + quantum^2. Fewer than MIN_N draws: no finding."""
    n = values.numel()
    if n < MIN_N:
        return []
    mean = values.mean().item()
    bound = deviation(n * law.var, law.mean_scale) / n + quantum
    passed = abs(mean - law.mean) <= bound
    findings = [
        Finding("mean", passed, f"mean {mean:.6g} {_word(passed)} {law.mean:.6g} ± {bound:.3g} ({law.label}, n={n})")
    ]
    if law.mu4 is not None:
        var = ((values - law.mean) ** 2).mean().item()
        bound = deviation(n * (law.mu4 - law.var**2), law.var_scale) / n + quantum * (2 * math.sqrt(law.var) + quantum)
        passed = abs(var - law.var) <= bound
        findings.append(
            Finding(
                "variance",
                passed,
                f"variance {var:.6g} {_word(passed)} {law.var:.6g} ± {bound:.3g} ({law.label}, n={n})",
            )
        )
    return findings
