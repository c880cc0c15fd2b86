"""Precision standards: each turns the metrics of one float output into (status, reason).

- ``default``: the product rule. Pass iff cosine > ``cosine`` and max abs error < ``max_abs``; otherwise warning
  when msprobe's dtype-aware cascade still accepts the output (against our float64 golden), else error.
- ``msprobe``: the incumbent's in-run cascade itself, without its bugs (identical inf/nan agree).
- ``absolute``, ``ulp``, ``binary``, ``thousandth``, ``accumulative``, ``benchmark``: msprobe's "new precision
  standard" with its numbers (REFERENCE §3). msprobe defines them but routes every float output to benchmark;
  here ``auto`` routes each API by its class in api_registry.
Integer and bool outputs are exact under every standard (see verdict.py); non-finite mismatches are errors under
every standard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from precheck.core.comparison import Metrics
from precheck.core.status import ERROR, PASS, WARNING, Status
from precheck.errors import OptionError
from precheck.grader.choices import DEFAULT_COSINE, DEFAULT_MAX_ABS, STANDARD_CHOICES
from precheck.grader.limits import is_low_precision, limits_for

# api_registry classes (api_registry/catalogue.py) and the standard `auto` gives them.
AUTO_ROUTES = {
    "matmul": "ulp",
    "conv": "thousandth",
    "reduction": "accumulative",
    "binary": "binary",
    "pointwise": "absolute",
}
# Benchmark ratio thresholds (max_rel, mean_rel, rmse, small_value); matmul-like APIs get the strict row.
_RATIO_LIMITS = {"default": (10.0, 2.0, 2.0, 2.0), "strict": (2.0, 1.2, 1.2, 2.0)}


@dataclass(frozen=True)
class Context:
    """What a standard may use besides the output's own metrics."""

    dtype: Any  # a torch.dtype or its name (a CSV's DEVICE Dtype)
    cosine: float = DEFAULT_COSINE
    max_abs: float = DEFAULT_MAX_ABS
    reference: Metrics | None = None  # the reference device's metrics against the same golden
    api_class: str | None = None


Verdict = tuple[Status, str]


class Standard(Protocol):
    """What a standard is: a judge of one float output's metrics, in its context, as (status, reason); the reason
    says why it is not a pass (empty on pass) and is the row's Message."""

    def __call__(self, m: Metrics, ctx: Context, /) -> Verdict: ...


def rule(m: Metrics, ctx: Context) -> list[str]:
    """Why the user's rule (cosine > ``cosine`` and max abs error < ``max_abs``) fails; empty when it holds."""
    # An output whose every error is below the dtype's small-value atol has no direction worth a cosine: values
    # at the dtype's resolution (fp16 subnormals, underflow to zero) are right however they point. Nor has one
    # that is zero at the dtype's scale on both sides (a gradient that cancels to 1e-16, computed as 1e-8).
    lim = limits_for(ctx.dtype)
    negligible = m.golden_max_abs is not None and max(m.golden_max_abs, m.max_abs_err) <= lim.small_value
    cos_ok = m.cosine is None or m.cosine > ctx.cosine or m.max_abs_err <= lim.small_value_atol or negligible
    reasons = []
    if not cos_ok:
        reasons.append(f"cosine {m.cosine:.6f} <= {ctx.cosine}")
    if m.max_abs_err >= ctx.max_abs:
        reasons.append(f"max abs error {m.max_abs_err:.3g} >= {ctx.max_abs:g}")
    return reasons


def default(m: Metrics, ctx: Context) -> Verdict:
    """The default standard on metrics alone (a details CSV row, ``judge``): the rule, then msprobe's cascade.
    With the tensors at hand, ``grade`` judges against an honest kernel instead (grader/honest.py)."""
    reasons = rule(m, ctx)
    if not reasons:
        return PASS, ""
    status, why = _cascade(m, ctx, floored=True)
    if status == ERROR:
        return ERROR, "; ".join(reasons) + f"; beyond the {ctx.dtype} tolerance ({why})"
    return WARNING, "; ".join(reasons) + f"; within the {ctx.dtype} tolerance"


def msprobe(m: Metrics, ctx: Context) -> Verdict:
    """msprobe's in-run cascade (REFERENCE §3), strict and non-strict comparisons as it has them, and as it
    counts: one element of a 64-vector decides, as in msprobe's own results."""
    return _cascade(m, ctx, floored=False)


# A share rule ("99% of elements within ...") is a claim about a kernel's error rate, and a handful of elements is
# no evidence of a rate: a 64-vector with one element beyond the bound is 98.4% within. So where a share rule is
# ours to count (every standard but ``msprobe``, which mirrors the incumbent), it fails only on more elements
# beyond its bound than this, whatever their share. Outliers are the honest verdict's business (grader/honest.py).
SHARE_MIN_ELEMENTS = 1


def beyond_share(bad_share: float, failed: bool, m: Metrics) -> bool:
    """Does a share rule that ``failed`` on its share also fail on its count of ``bad_share * m.count`` elements?
    Without a count (a details-CSV row of another tool) the share alone decides."""
    return failed and (m.count is None or round(bad_share * m.count) > SHARE_MIN_ELEMENTS)


def _cascade(m: Metrics, ctx: Context, floored: bool) -> Verdict:
    def fails(within: float, required: float) -> bool:
        return beyond_share(1 - within, within <= required, m) if floored else within <= required

    if m.cosine is not None and m.cosine <= 0.99:
        return ERROR, f"cosine {m.cosine:.6f} <= 0.99"
    if m.max_abs_err < 1e-3:
        return PASS, ""
    if is_low_precision(ctx.dtype):
        if fails(m.rel_within_1e2, 0.99):
            return ERROR, f"only {m.rel_within_1e2:.4%} of elements within 1e-2 relative error, above 99% required"
        if fails(m.rel_within_1e3, 0.999):
            return WARNING, f"only {m.rel_within_1e3:.4%} of elements within 1e-3 relative error, above 99.9% wanted"
        return PASS, ""
    if fails(m.rel_within_1e3, 0.999):
        return ERROR, f"only {m.rel_within_1e3:.4%} of elements within 1e-3 relative error, above 99.9% required"
    if fails(m.rel_within_1e4, 0.9999):
        return WARNING, f"only {m.rel_within_1e4:.4%} of elements within 1e-4 relative error, above 99.99% wanted"
    return PASS, ""


def absolute(m: Metrics, ctx: Context) -> Verdict:
    """Every normal element within rtol relative error, every small one within atol absolute error."""
    lim = limits_for(ctx.dtype)
    reasons = []
    if m.rel_err_ratio > 0:
        reasons.append(f"{m.rel_err_ratio:.4%} of normal elements above relative error {lim.rtol:g}")
    if m.abs_err_ratio > 0:
        reasons.append(
            f"{m.abs_err_ratio:.4%} of small values (|golden| <= {lim.small_value:g}) above absolute "
            f"error {lim.small_value_atol:g}"
        )
    return (ERROR, "; ".join(reasons)) if reasons else (PASS, "")


def accumulative(m: Metrics, ctx: Context) -> Verdict:
    """Reductions: relative error (|golden| > 1) or absolute error (|golden| <= 1) within the dtype's bound.
    The threshold columns of such an output are computed with that split (metrics' accumulative regime)."""
    bound = limits_for(ctx.dtype).accumulative_bound
    reasons = []
    if m.rel_err_ratio > 0:
        reasons.append(f"{m.rel_err_ratio:.4%} of elements with |golden| > 1 above relative error {bound:g}")
    if m.abs_err_ratio > 0:
        reasons.append(f"{m.abs_err_ratio:.4%} of elements with |golden| <= 1 above absolute error {bound:g}")
    return (ERROR, "; ".join(reasons)) if reasons else (PASS, "")


def ulp(m: Metrics, ctx: Context) -> Verdict:
    """fp32 (and fp64): mean ULP < 64 or fewer than 5% of elements above 32 ULP; fp16/bf16: fewer than 0.1% of
    elements above 1 ULP. With a reference, a share above threshold no worse than the reference's also passes."""
    lim = limits_for(ctx.dtype)
    share = m.ulp_above_ratio
    no_worse = ctx.reference is not None and ratio_of(share, ctx.reference.ulp_above_ratio, lim.ratio_floor) < 1
    if is_low_precision(ctx.dtype):
        if not beyond_share(share, share >= 0.001, m) or no_worse:
            return PASS, ""
        return ERROR, f"{share:.4%} of elements above {lim.ulp_threshold:g} ULP, below 0.1% required"
    if m.ulp_mean < 64 or not beyond_share(share, share >= 0.05, m) or no_worse:
        return PASS, ""
    return ERROR, (
        f"mean ULP error {m.ulp_mean:.3g} >= 64 and {share:.4%} of elements above "
        f"{lim.ulp_threshold:g} ULP (below 5% required)"
    )


def binary(m: Metrics, ctx: Context) -> Verdict:
    """Bit-exact against the golden rounded to the target dtype (movement, index and compare ops)."""
    if m.binary_mismatch == 0:
        return PASS, ""
    return ERROR, f"{m.binary_mismatch:.4%} of elements differ from the correctly rounded golden"


def thousandth(m: Metrics, ctx: Context) -> Verdict:
    """Convolutions: at least 99.9% of elements within 1e-3 relative error."""
    if not beyond_share(1 - m.rel_within_1e3, m.rel_within_1e3 < 0.999, m):
        return PASS, ""
    return ERROR, f"only {m.rel_within_1e3:.4%} of elements within 1e-3 relative error, 99.9% required"


@dataclass(frozen=True)
class Ratio:
    """One benchmark comparison: the target's metric over the reference's, and the limit it must not exceed."""

    name: str
    mine: float
    theirs: float
    ratio: float
    limit: float
    counts: bool = True  # error balance is reported, not judged (as msprobe)

    @property
    def failed(self) -> bool:
        return self.counts and self.ratio > self.limit


def benchmark_ratios(m: Metrics, ref: Metrics, dtype: Any, api_class: str | None) -> list[Ratio]:
    """The ratios of the two-reference verdict, in msprobe's column order (small value, RMSE, max rel, mean rel,
    error balance). A reference error below the dtype's floor counts as the floor."""
    floor = limits_for(dtype).ratio_floor
    max_rel, mean_rel, rmse, small = _RATIO_LIMITS["strict" if api_class == "matmul" else "default"]
    rows = (
        ("small-value error ratio", m.small_value_err_ratio, ref.small_value_err_ratio, small, True),
        ("RMSE", m.rmse, ref.rmse, rmse, True),
        ("max relative error", m.max_rel_err, ref.max_rel_err, max_rel, True),
        ("mean relative error", m.mean_rel_err, ref.mean_rel_err, mean_rel, True),
        ("error balance", m.error_balance, ref.error_balance, 2.0, False),
    )
    return [
        Ratio(name, mine, theirs, ratio_of(mine, theirs, floor), limit, counts)
        for name, mine, theirs, limit, counts in rows
    ]


def benchmark(m: Metrics, ctx: Context) -> Verdict:
    """Two references: the target's error against the float64 golden, divided by the reference device's error
    against the same golden (divisor floored per dtype), must stay under the ratio thresholds."""
    if ctx.reference is None:
        raise ValueError("the benchmark standard needs reference metrics (run_ut: --bench-device cpu)")
    reasons = [
        f"{r.name} {r.ratio:.3g}x the reference's ({r.mine:.3g} vs {r.theirs:.3g}), above {r.limit:g}x"
        for r in benchmark_ratios(m, ctx.reference, ctx.dtype, ctx.api_class)
        if r.failed
    ]
    return (ERROR, "; ".join(reasons)) if reasons else (PASS, "")


def ratio_of(mine: float, theirs: float, floor: float) -> float:
    return abs(mine) / max(abs(theirs), floor)


STANDARDS: dict[str, Standard] = {
    "default": default,
    "msprobe": msprobe,
    "absolute": absolute,
    "ulp": ulp,
    "binary": binary,
    "thousandth": thousandth,
    "accumulative": accumulative,
    "benchmark": benchmark,
}


def register_standard(name: str, judge: Standard) -> None:
    """``judge`` becomes the standard ``name`` asks for (``CheckOptions(standard=name)``, ``--standard name``,
    ``grade(..., standard=name)``); a float output it judges gets its verdict as the built-in ones' do."""
    STANDARDS[name] = judge
    if name not in STANDARD_CHOICES:
        STANDARD_CHOICES.insert(STANDARD_CHOICES.index("auto"), name)  # the command line's, torch-free


def resolve(standard: str, api_class: str | None, has_reference: bool) -> str:
    """The concrete standard for one output: ``auto`` routes by API class, the rest to benchmark when a
    reference exists, else to default."""
    if standard != "auto":
        if standard not in STANDARDS:
            raise OptionError(f"unknown standard {standard!r} (choose from {', '.join(STANDARD_CHOICES)})")
        return standard
    return AUTO_ROUTES.get(api_class or "", "benchmark" if has_reference else "default")
