"""Precision standards (precheck.grader.standards) through compare() and judge(): every threshold pinned at its
boundary, ``auto`` routing, the rules that hold under every standard, real-tensor sanity, properties, and the
standards on a whole run_ut."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import real_dump_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from precheck.execution.options import CheckOptions
from precheck.grader import ERROR, PASS, STANDARD_CHOICES, WARNING, Metrics, compare, judge
from precheck.grader.standards import STANDARDS, benchmark_ratios
from precheck.run_ut import run_ut

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
LOW = [F16, BF16]
HIGH = [F32, F64]
TARGETS = [F16, BF16, F32]
RANK = {PASS: 0, WARNING: 1, ERROR: 2}
SINGLE = ["default", "msprobe", "absolute", "ulp", "binary", "thousandth", "accumulative"]  # no reference needed
EVERY = SINGLE + ["benchmark"]
FLOORS = {F16: 2.0**-11, BF16: 2.0**-8, F32: 2.0**-14}
PROPS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

IDEAL = dict(
    cosine=1.0,
    max_abs_err=0.0,
    rel_within_1e2=1.0,
    rel_within_1e3=1.0,
    rel_within_1e4=1.0,
    binary_mismatch=0.0,
    error_balance=0.0,
    rmse=0.0,
    small_value_err_ratio=0.0,
    max_rel_err=0.0,
    mean_rel_err=0.0,
    inf_nan_err_ratio=0.0,
    rel_err_ratio=0.0,
    abs_err_ratio=0.0,
    ulp_max=0.0,
    ulp_mean=0.0,
    ulp_above_ratio=0.0,
)
# Every metric as bad as it gets: a standard that ignores a metric must not be moved by it.
AWFUL = dict(
    cosine=-1.0,
    max_abs_err=1e9,
    rel_within_1e2=0.0,
    rel_within_1e3=0.0,
    rel_within_1e4=0.0,
    binary_mismatch=1.0,
    error_balance=1.0,
    rmse=1e9,
    small_value_err_ratio=1.0,
    max_rel_err=1e9,
    mean_rel_err=1e9,
    inf_nan_err_ratio=0.0,
    rel_err_ratio=1.0,
    abs_err_ratio=1.0,
    ulp_max=1e9,
    ulp_mean=1e9,
    ulp_above_ratio=1.0,
)


def M(**kw) -> Metrics:
    """Metrics of a perfect output, with the given fields changed."""
    return Metrics(**{**IDEAL, **kw})


def bad(**kw) -> Metrics:
    """Metrics of a hopeless output, with the given fields changed."""
    return Metrics(**{**AWFUL, **kw})


def status(m: Metrics, dtype: torch.dtype, standard: str, **kw) -> str:
    return judge(m, dtype, standard, **kw)[0]


def up(x: float) -> float:
    return math.nextafter(x, math.inf)


def down(x: float) -> float:
    return math.nextafter(x, -math.inf)


def seeded(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64) * scale


def compare_any(t, g, standard, dtype=None, **kw):
    """compare() with a reference (the golden rounded to the target dtype) for benchmark."""
    if standard == "benchmark" and "reference" not in kw:
        kw["reference"] = g.to(dtype or t.dtype)
    return compare(t, g, standard=standard, **kw)


# ============================================================================ thresholds, pinned at the boundary

# ----------------------------------------------------------------------------------------- msprobe cascade


@pytest.mark.parametrize("dtype", LOW + HIGH)
def test_msprobe_cosine_at_or_below_099_is_error(dtype):
    assert status(M(cosine=0.99), dtype, "msprobe") == ERROR
    assert status(M(cosine=up(0.99)), dtype, "msprobe") == PASS
    # the cosine check comes first: even a tiny max abs error cannot rescue it
    assert status(M(cosine=0.99, max_abs_err=0.0), dtype, "msprobe") == ERROR
    assert status(M(cosine=None), dtype, "msprobe") == PASS  # one element: no cosine, not judged


@pytest.mark.parametrize("dtype", LOW + HIGH)
def test_msprobe_max_abs_below_1e3_passes_whatever_the_shares(dtype):
    shares = dict(rel_within_1e2=0.0, rel_within_1e3=0.0, rel_within_1e4=0.0)
    assert status(M(max_abs_err=down(1e-3), **shares), dtype, "msprobe") == PASS
    assert status(M(max_abs_err=1e-3, **shares), dtype, "msprobe") == ERROR


@pytest.mark.parametrize("dtype", LOW)
def test_msprobe_low_precision_shares(dtype):
    big = dict(max_abs_err=1.0)
    assert status(M(rel_within_1e2=0.99, **big), dtype, "msprobe") == ERROR
    assert status(M(rel_within_1e2=up(0.99), **big), dtype, "msprobe") == PASS
    assert status(M(rel_within_1e3=0.999, **big), dtype, "msprobe") == WARNING
    assert status(M(rel_within_1e3=up(0.999), **big), dtype, "msprobe") == PASS
    assert status(M(rel_within_1e2=0.99, rel_within_1e3=0.0, **big), dtype, "msprobe") == ERROR
    # fp16/bf16 never look at the 1e-4 share
    assert status(M(rel_within_1e4=0.0, **big), dtype, "msprobe") == PASS


@pytest.mark.parametrize("dtype", HIGH)
def test_msprobe_fp32_shares(dtype):
    big = dict(max_abs_err=1.0)
    assert status(M(rel_within_1e3=0.999, **big), dtype, "msprobe") == ERROR
    assert status(M(rel_within_1e3=up(0.999), **big), dtype, "msprobe") == PASS
    assert status(M(rel_within_1e4=0.9999, **big), dtype, "msprobe") == WARNING
    assert status(M(rel_within_1e4=up(0.9999), **big), dtype, "msprobe") == PASS
    # fp32/fp64 never look at the 1e-2 share
    assert status(M(rel_within_1e2=0.0, **big), dtype, "msprobe") == PASS


@pytest.mark.parametrize("dtype", LOW + HIGH)
def test_default_pass_needs_cosine_and_max_abs_else_msprobe_decides_warning_or_error(dtype):
    assert status(M(cosine=up(0.99), max_abs_err=down(1e-4)), dtype, "default") == PASS
    assert status(M(max_abs_err=1e-4), dtype, "default") == WARNING  # msprobe passes it: warning
    assert status(M(cosine=0.99, max_abs_err=1e-2), dtype, "default") == ERROR  # msprobe errs: error
    # errors at the dtype's resolution have no direction worth a cosine (fp16 subnormals, underflow to zero)
    assert status(M(cosine=0.5, max_abs_err=2.0**-70), dtype, "default") == PASS
    share = "rel_within_1e2" if dtype in LOW else "rel_within_1e3"
    assert status(M(max_abs_err=1.0, **{share: 0.99 if dtype in LOW else 0.999}), dtype, "default") == ERROR
    assert status(M(max_abs_err=1.0), dtype, "default") == WARNING
    # custom thresholds move the pass boundary
    assert status(M(max_abs_err=1e-4), dtype, "default", max_abs=up(1e-4)) == PASS
    assert status(M(cosine=0.5, max_abs_err=0.0), dtype, "default", cosine=0.4) == PASS


# ------------------------------------------------------------------------------------------------ absolute


@pytest.mark.parametrize("dtype", LOW + HIGH)
def test_absolute_any_error_ratio_above_zero_is_error(dtype):
    tiny = 5e-324
    assert status(bad(rel_err_ratio=0.0, abs_err_ratio=0.0), dtype, "absolute") == PASS
    assert status(M(rel_err_ratio=tiny), dtype, "absolute") == ERROR
    assert status(M(abs_err_ratio=tiny), dtype, "absolute") == ERROR
    reason = judge(M(rel_err_ratio=0.5, abs_err_ratio=0.25), dtype, "absolute")[1]
    assert "50.0000%" in reason and "25.0000%" in reason


# ------------------------------------------------------------------------------------------------------ ULP


@pytest.mark.parametrize("dtype", HIGH)
def test_ulp_fp32_mean_below_64_or_share_below_5_percent(dtype):
    assert status(bad(ulp_mean=64.0, ulp_above_ratio=0.05), dtype, "ulp") == ERROR
    assert status(bad(ulp_mean=down(64.0), ulp_above_ratio=1.0), dtype, "ulp") == PASS
    assert status(bad(ulp_mean=1e9, ulp_above_ratio=down(0.05)), dtype, "ulp") == PASS
    assert status(M(ulp_mean=64.0, ulp_above_ratio=0.05), dtype, "ulp") == ERROR  # nothing else matters


@pytest.mark.parametrize("dtype", LOW)
def test_ulp_low_precision_share_above_1_ulp_below_01_percent(dtype):
    assert status(M(ulp_above_ratio=0.001), dtype, "ulp") == ERROR
    assert status(bad(ulp_above_ratio=down(0.001), ulp_mean=1e9), dtype, "ulp") == PASS
    assert status(M(ulp_above_ratio=0.001, ulp_mean=0.0), dtype, "ulp") == ERROR  # the mean never rescues


@pytest.mark.parametrize("dtype", TARGETS)
def test_ulp_share_no_worse_than_the_reference_passes(dtype):
    m = bad(ulp_mean=1e9, ulp_above_ratio=0.5)
    assert status(m, dtype, "ulp") == ERROR
    assert status(m, dtype, "ulp", reference=M(ulp_above_ratio=0.5)) == ERROR  # ratio 1: not < 1
    assert status(m, dtype, "ulp", reference=M(ulp_above_ratio=up(0.5))) == PASS  # ratio just below 1
    assert status(m, dtype, "ulp", reference=M(ulp_above_ratio=0.0)) == ERROR


def test_ulp_reference_share_is_floored():
    # bf16 floor 2^-8 is above the 0.1% limit: a share under the floor passes against a perfect reference
    share = 2.0**-8
    assert share > 0.001
    assert status(M(ulp_above_ratio=down(share)), BF16, "ulp") == ERROR  # alone: fails
    assert status(M(ulp_above_ratio=down(share)), BF16, "ulp", reference=M()) == PASS  # ratio < 1
    assert status(M(ulp_above_ratio=share), BF16, "ulp", reference=M()) == ERROR  # ratio == 1
    assert (
        status(M(ulp_above_ratio=down(share)), BF16, "ulp", reference=M(ulp_above_ratio=share / 4)) == PASS
    )  # floor, not 2^-10


def _ulps_off(dtype, n, offsets: dict[int, float]):
    """n goldens of 1.5 (ULP 2^-(mantissa bits)), elements i off by offsets[i] ULPs."""
    ulp = {F16: 2.0**-10, BF16: 2.0**-7, F32: 2.0**-23}[dtype]
    g = torch.full((n,), 1.5, dtype=F64)
    t = g.clone()
    for i, k in offsets.items():
        t[i] += k * ulp
    return t.to(dtype), g


@pytest.mark.parametrize("dtype", LOW)
def test_ulp_low_precision_with_real_tensors(dtype):
    assert compare(*_ulps_off(dtype, 2000, {i: 1 for i in range(2000)}), standard="ulp").status == PASS  # 1 ULP
    assert compare(*_ulps_off(dtype, 2000, {0: 2}), standard="ulp").status == PASS  # 0.05% above 1 ULP
    c = compare(*_ulps_off(dtype, 2000, {0: 2, 1: -2}), standard="ulp")  # 0.1%
    assert c.status == ERROR and c.metrics.ulp_above_ratio == 0.001


def test_ulp_fp32_with_real_tensors():
    # 4% far off (1000 ULP) and the rest exactly at the 32 ULP threshold: mean 70.7 >= 64, but 4% above 32
    offsets = {i: (1000 if i < 4 else 32) for i in range(100)}
    c = compare(*_ulps_off(F32, 100, offsets), standard="ulp")
    assert c.metrics.ulp_mean >= 64 and c.metrics.ulp_above_ratio == 0.04
    assert c.status == PASS
    offsets = {i: (1000 if i < 4 else 33) for i in range(100)}  # now all above 32
    assert compare(*_ulps_off(F32, 100, offsets), standard="ulp").status == ERROR
    offsets = {i: 1300 for i in range(5)}  # mean 65, 5% above 32
    assert compare(*_ulps_off(F32, 100, offsets), standard="ulp").status == ERROR
    offsets = {i: 1260 for i in range(5)}  # mean 63, 5% above 32
    assert compare(*_ulps_off(F32, 100, offsets), standard="ulp").status == PASS


# --------------------------------------------------------------------------------- binary, thousandth


@pytest.mark.parametrize("dtype", LOW + HIGH)
def test_binary_only_zero_mismatch_passes(dtype):
    assert status(bad(binary_mismatch=0.0), dtype, "binary") == PASS
    assert status(M(binary_mismatch=5e-324), dtype, "binary") == ERROR


@pytest.mark.parametrize("dtype", LOW + HIGH)
def test_thousandth_needs_999_per_mille_within_1e3(dtype):
    assert status(bad(rel_within_1e3=0.999), dtype, "thousandth") == PASS
    assert status(M(rel_within_1e3=down(0.999)), dtype, "thousandth") == ERROR


def test_thousandth_boundary_with_real_tensors():
    g = torch.full((1000,), 2.0, dtype=F64)
    t = g.clone()
    t[:1] = 2.0 * (1 + 2e-3)  # 1 of 1000 elements outside 1e-3: 99.9% within, passes (>=)
    assert compare(t, g, standard="thousandth").status == PASS
    t[:2] = 2.0 * (1 + 2e-3)  # 2 of 1000: 99.8%, error
    c = compare(t, g, standard="thousandth")
    assert c.status == ERROR and "99.8000%" in c.message


def _one_off(n: int, k: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A golden of n values near 1 that ``dtype`` holds exactly, and a target equal to it but for k elements 3% off."""
    g = torch.linspace(0.5, 1.5, n, dtype=F64).to(dtype).to(F64)
    t = g.to(dtype)
    t[:k] = (g[:k] * 1.03).to(dtype)
    return t, g


@pytest.mark.parametrize("standard", ["thousandth", "ulp", "default"])
@pytest.mark.parametrize("dtype", [BF16, F16, F32])
def test_one_element_of_64_does_not_decide_a_share_rule(standard, dtype):
    t, g = _one_off(64, 1, dtype)
    c = compare(t, g, standard=standard)
    m = c.metrics
    assert m.count == 64
    if standard == "default":  # the rule fails (3% off), the cascade's 99% share is 98.4%: one element, no error
        assert judge(m, dtype, "default")[0] == WARNING
    else:
        assert c.status == PASS, c.message
    t, g = _one_off(64, 2, dtype)  # two elements beyond the bound do decide
    m = compare(t, g, standard="msprobe").metrics
    expected = ERROR if standard != "ulp" or dtype != F32 else PASS  # fp32 ulp: mean ULP < 64 also passes
    assert judge(m, dtype, standard)[0] == expected


@pytest.mark.parametrize("dtype", [BF16, F32])
def test_msprobe_counts_one_element_of_64_as_msprobe_does(dtype):
    t, g = _one_off(64, 1, dtype)
    c = compare(t, g, standard="msprobe")
    assert c.status == ERROR and "98.4375% of elements within" in c.message


def test_share_rules_without_a_count_decide_on_the_share():
    m = M(rel_within_1e3=63 / 64)  # a details-CSV row of another tool: no element count
    assert m.count is None and status(m, F32, "thousandth") == ERROR
    assert status(M(rel_within_1e3=63 / 64, count=64), F32, "thousandth") == PASS


# ------------------------------------------------------------------------------------------- accumulative


@pytest.mark.parametrize("dtype", LOW + HIGH)
def test_accumulative_any_error_ratio_above_zero_is_error(dtype):
    assert status(bad(rel_err_ratio=0.0, abs_err_ratio=0.0), dtype, "accumulative") == PASS
    assert status(M(rel_err_ratio=5e-324), dtype, "accumulative") == ERROR
    assert status(M(abs_err_ratio=5e-324), dtype, "accumulative") == ERROR


def _acc(target: list[float], golden: list[float], dtype=BF16) -> str:
    t, g = torch.tensor(target, dtype=F64), torch.tensor(golden, dtype=F64)
    return compare(t, g, standard="accumulative", target_dtype=dtype).status


def test_accumulative_bf16_bound_relative_above_1_absolute_at_or_below_1():
    b = 2.0**-7
    out = b * (1 + 1e-9)  # just outside the bound, after float64 rounding
    # |golden| > 1: relative error against the bound (an absolute error of 0.25 is fine on 64)
    assert _acc([64.0 * (1 + b)], [64.0]) == PASS
    assert _acc([64.0 * (1 + out)], [64.0]) == ERROR
    assert _acc([-64.0 * (1 + 0.5 * b)], [-64.0]) == PASS
    # |golden| <= 1: absolute error against the bound (a relative error of 2^-5 on 0.25 is fine)
    assert _acc([0.25 + b], [0.25]) == PASS
    assert _acc([0.25 + out], [0.25]) == ERROR
    assert _acc([1.0 + b], [1.0]) == PASS  # |golden| == 1 is in the absolute region
    assert _acc([0.75 - b], [0.75]) == PASS  # relative 2^-7 / 0.75 > bound: judged absolutely
    assert _acc([1.5 + 1.4 * b], [1.5]) == PASS  # absolute 1.4 * bound: judged relatively
    assert _acc([1.0 + 1.5 * b], [1.0]) == ERROR
    assert _acc([0.0 + b, -b], [0.0, 0.0]) == PASS
    assert _acc([0.0 + up(b)], [0.0]) == ERROR


@pytest.mark.parametrize("dtype, bound", [(F16, 2.0**-8), (BF16, 2.0**-7), (F32, 2.0**-11)])
def test_accumulative_bound_per_dtype(dtype, bound):
    assert _acc([8.0 * (1 + bound), 0.5 + bound], [8.0, 0.5], dtype) == PASS
    assert _acc([8.0 * (1 + 2 * bound)], [8.0], dtype) == ERROR
    assert _acc([0.5 + 2 * bound], [0.5], dtype) == ERROR


def test_accumulative_message_names_the_regions():
    c = compare(
        torch.tensor([0.5 + 0.1, 8.0 * 1.1], dtype=F64),
        torch.tensor([0.5, 8.0], dtype=F64),
        standard="accumulative",
        target_dtype=BF16,
    )
    assert c.status == ERROR
    assert "|golden| > 1" in c.message and "|golden| <= 1" in c.message


# ---------------------------------------------------------------------------------------------- benchmark

METRIC_FIELDS = ["max_rel_err", "mean_rel_err", "rmse", "small_value_err_ratio"]
LIMITS = {"default": (10.0, 2.0, 2.0, 2.0), "matmul": (2.0, 1.2, 1.2, 2.0)}


@pytest.mark.parametrize("dtype", TARGETS)
@pytest.mark.parametrize("api_class", [None, "pointwise", "other", "matmul"])
@pytest.mark.parametrize("which", range(4), ids=METRIC_FIELDS)
def test_benchmark_ratio_limits(dtype, api_class, which):
    limit = LIMITS["matmul" if api_class == "matmul" else "default"][which]
    field = METRIC_FIELDS[which]
    ref = M(**{f: 1.0 for f in METRIC_FIELDS})
    same = {f: 1.0 for f in METRIC_FIELDS}
    at = M(**{**same, field: limit})
    above = M(**{**same, field: up(limit)})
    assert status(at, dtype, "benchmark", reference=ref, api_class=api_class) == PASS
    s, reason = judge(above, dtype, "benchmark", reference=ref, api_class=api_class)
    assert s == ERROR
    assert f"above {limit:g}x" in reason


@pytest.mark.parametrize("dtype", TARGETS)
@pytest.mark.parametrize("which", range(4), ids=METRIC_FIELDS)
def test_benchmark_reference_error_is_floored(dtype, which):
    floor, field, limit = FLOORS[dtype], METRIC_FIELDS[which], LIMITS["default"][which]
    for theirs in (0.0, floor / 2, down(floor)):
        ref = M(**{field: theirs})
        assert status(M(**{field: limit * floor}), dtype, "benchmark", reference=ref) == PASS
        assert status(M(**{field: up(limit * floor)}), dtype, "benchmark", reference=ref) == ERROR
    # above the floor the reference's own value divides
    ref = M(**{field: 2 * floor})
    assert status(M(**{field: up(limit * floor)}), dtype, "benchmark", reference=ref) == PASS


@pytest.mark.parametrize("dtype", TARGETS)
def test_benchmark_error_balance_is_reported_not_judged(dtype):
    m, ref = M(error_balance=1.0), M(error_balance=0.0)
    assert status(m, dtype, "benchmark", reference=ref) == PASS
    ratios = benchmark_ratios(m, ref, dtype, None)
    assert [r.name for r in ratios] == [
        "small-value error ratio",
        "RMSE",
        "max relative error",
        "mean relative error",
        "error balance",
    ]
    eb = ratios[-1]
    assert eb.ratio == pytest.approx(1.0 / FLOORS[dtype]) and eb.ratio > eb.limit
    assert not eb.counts and not eb.failed


def test_benchmark_without_reference_raises():
    with pytest.raises(ValueError, match="reference"):
        judge(M(), F32, "benchmark")
    g = seeded(8)
    with pytest.raises(ValueError, match="reference"):
        compare(g.float(), g, standard="benchmark")
    with pytest.raises(ValueError, match="reference"):  # a reference of the wrong shape is no reference
        compare(g.float(), g, standard="benchmark", reference=g[:4].float())


def test_benchmark_with_real_tensors_uses_the_reference_error():
    g = seeded(64, 64, seed=7)
    ref = (g * (1 + 1e-3)).float()  # the reference device is itself 1e-3 off
    assert compare((g * (1 + 1e-3)).float(), g, standard="benchmark", reference=ref).status == PASS
    assert compare((g * (1 + 1.9e-3)).float(), g, standard="benchmark", reference=ref).status == PASS
    c = compare((g * (1 + 3e-3)).float(), g, standard="benchmark", reference=ref)  # 3x the reference's
    assert c.status == ERROR and "RMSE" in c.message
    # matmul-like: 1.5x is already too much (strict 1.2)
    assert compare((g * (1 + 1.5e-3)).float(), g, standard="benchmark", reference=ref).status == PASS
    assert (
        compare((g * (1 + 1.5e-3)).float(), g, standard="benchmark", reference=ref, api_class="matmul").status == ERROR
    )


# ============================================================================================== auto routing

AUTO = [
    ("matmul", "ulp"),
    ("conv", "thousandth"),
    ("reduction", "accumulative"),
    ("binary", "binary"),
    ("pointwise", "absolute"),
]


@pytest.mark.parametrize("api_class, expected", AUTO)
@pytest.mark.parametrize("with_reference", [False, True])
def test_auto_routes_by_api_class(api_class, expected, with_reference):
    g = seeded(16, 16, seed=1)
    kw = dict(reference=g.float()) if with_reference else {}
    c = compare(g.float(), g, standard="auto", api_class=api_class, **kw)
    assert c.standard == expected
    assert c.status == PASS


@pytest.mark.parametrize("api_class", ["other", None, "no-such-class"])
def test_auto_other_is_benchmark_with_a_reference_else_default(api_class):
    g = seeded(16, 16, seed=2)
    assert compare(g.float(), g, standard="auto", api_class=api_class).standard == "default"
    c = compare(g.float(), g, standard="auto", api_class=api_class, reference=g.float())
    assert c.standard == "benchmark" and c.status == PASS
    # judge(): the same route (awful shares: default errs; the benchmark ratios are all 1)
    ref = bad()
    assert status(bad(), F32, "auto", api_class=api_class) == ERROR
    assert status(bad(), F32, "auto", api_class=api_class, reference=ref) == PASS


def test_auto_judge_routes_like_compare():
    # matmul -> ulp: judged on ulp columns only, everything else awful
    assert status(bad(ulp_mean=0.0, ulp_above_ratio=0.0), F32, "auto", api_class="matmul") == PASS
    assert status(bad(rel_within_1e3=1.0), F32, "auto", api_class="conv") == PASS
    assert status(bad(binary_mismatch=0.0), F32, "auto", api_class="binary") == PASS
    assert status(bad(rel_err_ratio=0.0, abs_err_ratio=0.0), F32, "auto", api_class="pointwise") == PASS
    assert status(bad(rel_err_ratio=0.0, abs_err_ratio=0.0), F32, "auto", api_class="reduction") == PASS
    # other with a reference: benchmark ratios decide
    ref = M(**{f: 1.0 for f in METRIC_FIELDS})
    assert status(M(rmse=2.0), F32, "auto", api_class="other", reference=ref) == PASS
    assert status(M(rmse=2.5), F32, "auto", api_class="other", reference=ref) == ERROR


# ================================================================================ rules under every standard


def _standards_with_auto():
    return [(s, None) for s in EVERY] + [("auto", c) for c, _ in AUTO] + [("auto", "other")]


@pytest.mark.parametrize("standard, api_class", _standards_with_auto())
@pytest.mark.parametrize("dtype", TARGETS)
@pytest.mark.parametrize(
    "t_bad, g_bad",
    [
        (math.nan, None),
        (None, math.nan),
        (math.inf, None),
        (None, -math.inf),
        (math.inf, -math.inf),
        (math.nan, math.inf),
    ],
)
def test_nonfinite_mismatch_is_error_under_every_standard(standard, api_class, dtype, t_bad, g_bad):
    g = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)
    t = g.to(dtype)
    if t_bad is not None:
        t[2] = t_bad
    if g_bad is not None:
        g = g.clone()
        g[2] = g_bad
    ref = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64).to(dtype)
    c = compare(t, g, standard=standard, api_class=api_class, reference=ref)
    assert c.status == ERROR, (standard, c.message)
    assert "inf/nan mismatch" in c.message and "index (2,)" in c.message


@pytest.mark.parametrize("standard, api_class", _standards_with_auto())
@pytest.mark.parametrize("dtype", TARGETS)
def test_identical_nonfinite_values_pass_under_every_standard(standard, api_class, dtype):
    values = [1.5, math.inf, -math.inf, math.nan, -2.25, 0.0]
    t, g = torch.tensor(values, dtype=dtype), torch.tensor(values, dtype=F64)
    c = compare(t, g, standard=standard, api_class=api_class, reference=t.clone())
    assert c.status == PASS, (standard, c.message)
    only = torch.tensor([math.nan, math.inf, -math.inf])
    c = compare(only.to(dtype), only.to(F64), standard=standard, api_class=api_class, reference=only.to(dtype))
    assert c.status == PASS, (standard, c.message)


@pytest.mark.parametrize("standard", EVERY + ["auto"])
@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool])
def test_int_and_bool_outputs_are_exact_under_every_standard(standard, dtype):
    # benchmark without a reference does not raise: integers never reach a float standard
    g = torch.tensor([0, 1, 1, 0, 1]).to(dtype)
    c = compare(g.clone(), g, standard=standard, api_class="pointwise")
    assert (c.status, c.standard) == (PASS, "exact")
    t = g.clone()
    t[3] = 1 if dtype == torch.bool else 2
    c = compare(t, g, standard=standard, api_class="pointwise")
    assert (c.status, c.standard) == (ERROR, "exact")
    assert "1/5" in c.message


@pytest.mark.parametrize("standard", EVERY)
def test_int64_off_by_one_beyond_2_53_is_error_under_every_standard(standard):
    g = torch.tensor([2**62], dtype=torch.int64)
    assert compare(g + 1, g, standard=standard).status == ERROR
    assert compare(g.clone(), g, standard=standard).status == PASS


def test_unknown_standard_raises_naming_the_choices():
    g = seeded(4)
    with pytest.raises(ValueError) as info:
        compare(g.float(), g, standard="strictest")
    text = str(info.value)
    assert "strictest" in text
    names = ("default", "msprobe", "absolute", "ulp", "binary", "thousandth", "accumulative", "benchmark", "auto")
    for choice in names:
        assert choice in text
    assert set(STANDARD_CHOICES) == set(names)
    assert STANDARD_CHOICES == [*STANDARDS, "auto"]  # the command line's torch-free list names every standard
    with pytest.raises(ValueError, match="strictest"):
        judge(M(), F32, "strictest")


@pytest.mark.parametrize(
    "target, golden",
    [(torch.tensor([1, 2]), torch.tensor([1, 2])), (torch.empty(0), torch.empty(0, dtype=F64)), ("relu", "relu")],
)
def test_unknown_standard_raises_for_every_kind_of_output(target, golden):
    with pytest.raises(ValueError, match="ulps"):
        compare(target, golden, standard="ulps")


# ======================================================================================== real-tensor sanity


@pytest.mark.parametrize("dtype", TARGETS)
@pytest.mark.parametrize("scale", [1e-3, 1.0, 300.0])
def test_correctly_rounded_target_sanity(dtype, scale):
    g = seeded(48, 64, seed=11, scale=scale)
    t = g.to(dtype)
    for standard in ("ulp", "absolute", "binary", "accumulative"):
        c = compare(t, g, standard=standard)
        assert c.status == PASS, (standard, c.message)
    thousandth = compare(t, g, standard="thousandth").status
    # 99.9% within 1e-3 needs a half ULP below 1e-3: true for fp16 (2^-11) and fp32, not bf16 (2^-8)
    assert thousandth == (ERROR if dtype == BF16 else PASS)
    for standard in ("default", "msprobe"):
        c = compare(t, g, standard=standard)
        assert c.status != ERROR, (standard, c.message)
    assert compare(t, g, standard="benchmark", reference=t.clone()).status == PASS


@pytest.mark.parametrize("dtype", TARGETS)
@pytest.mark.parametrize("standard", EVERY)
def test_large_error_on_many_elements_is_error_under_every_standard(dtype, standard):
    g = seeded(48, 64, seed=12)
    t = g.to(dtype)
    t.view(-1)[::3] *= 1.5  # a third of the elements 50% off
    c = compare_any(t, g, standard)
    assert c.status == ERROR, (standard, c.message)
    assert "worst at index" in c.message


@pytest.mark.parametrize("scale", [1e-7, 1e-9])
def test_correctly_rounded_fp16_output_at_subnormal_scale_is_not_error_under_default(scale):
    g = torch.randn(64, dtype=F64, generator=torch.Generator().manual_seed(1)) * scale
    t = g.half()
    c = compare(t, g)
    assert c.metrics.binary_mismatch == 0.0  # nothing a device could do better
    assert c.status != ERROR, c.message


def test_status_does_not_improve_when_error_is_added_to_an_underflowed_output():
    g = torch.full((2,), -3e-66, dtype=F64)  # found by test_property_status_never_improves_as_error_grows
    exact = compare(g.half(), g).status  # zeros: the correctly rounded fp16 result
    worse = compare((g - 1e-7).half(), g).status  # 1e-7 off: two fp16 subnormals
    assert RANK[exact] <= RANK[worse], (exact, worse)


# ============================================================================================== properties

_SAFE_MAX = {F16: 1e4, BF16: 1e30, F32: 1e30}
_MIN_NORMAL = {F16: 2.0**-14, BF16: 2.0**-126, F32: 2.0**-126}


def _representable(dtype, *, zero=True, subnormal=False, min_side=1):
    """An array drawn in float64 and rounded to ``dtype`` (so the golden is exactly representable)."""
    lo = 0.0 if subnormal else _MIN_NORMAL[dtype]
    mag = st.floats(lo, _SAFE_MAX[dtype], allow_nan=False, allow_infinity=False)
    signed = st.tuples(mag, st.booleans()).map(lambda p: -p[0] if p[1] else p[0])
    elements = st.one_of(st.just(0.0), signed) if zero else signed
    shapes = hnp.array_shapes(min_dims=1, max_dims=2, min_side=min_side, max_side=8)
    return hnp.arrays(np.float64, shapes, elements=elements).map(lambda a: torch.from_numpy(a).to(dtype).to(F64))


@PROPS
@given(st.sampled_from(TARGETS), st.data())
def test_property_identical_inputs_pass_under_every_standard(dtype, data):
    g = data.draw(_representable(dtype, subnormal=True))
    t = g.to(dtype)
    for standard in EVERY:
        c = compare_any(t, g, standard)
        assert c.status == PASS, (standard, c.message)


def _one_ulp(g: torch.Tensor, dtype: torch.dtype, directions: torch.Tensor) -> torch.Tensor:
    r = g.to(dtype)
    toward = torch.where(directions, torch.full_like(r, math.inf), torch.full_like(r, -math.inf))
    return torch.nextafter(r, toward)


@PROPS
@given(st.sampled_from(TARGETS), st.data())
def test_property_one_ulp_perturbation(dtype, data):
    """Every element exactly 1 ULP (of the target dtype) off a representable golden.

    Normal-range goldens only: at subnormal scale one ULP is a large relative error and msprobe's cascade
    (cosine first) has no resolution. bf16 under absolute (rtol 2^-8) and thousandth (1e-3) is pinned
    separately: both limits lie below one bf16 ULP relative (2^-8 .. 2^-7), as msprobe defines them."""
    g = data.draw(_representable(dtype, zero=False))
    directions = torch.from_numpy(data.draw(hnp.arrays(np.bool_, tuple(g.shape))))
    t = _one_ulp(g, dtype, directions)
    assert bool((t.to(F64) != g).all())
    for standard in ("ulp", "accumulative", "absolute", "thousandth"):
        if dtype == BF16 and standard in ("absolute", "thousandth"):
            continue
        c = compare(t, g, standard=standard)
        assert c.status == PASS, (standard, c.message)
    msprobe = compare(t, g, standard="msprobe")
    if dtype == BF16:  # 1 ULP is up to 2^-7 relative: outside 1e-3 (warning), inside 1e-2 (never error)
        assert msprobe.status != ERROR, msprobe.message
    else:
        assert msprobe.status == PASS, msprobe.message
    assert compare(t, g, standard="default").status != ERROR  # warning tier: max abs >= 1e-4 at scale
    assert compare(t, g, standard="binary").status == ERROR  # every element differs from the golden
    assert compare(t, g, standard="benchmark", reference=t.clone()).status == PASS


@pytest.mark.parametrize("standard", ["absolute", "thousandth"])
def test_bf16_one_ulp_fails_absolute_and_thousandth_as_msprobe_defines_them(standard):
    # one bf16 ULP at 1.5 is 2^-7: relative 0.0052, above both rtol 2^-8 (0.0039) and 1e-3
    g = torch.full((16,), 1.5, dtype=F64)
    t = _one_ulp(g, BF16, torch.ones(16, dtype=torch.bool))
    assert compare(t, g, standard=standard).status == ERROR
    # half an ULP (the correctly rounded worst case, relative 2^-9 .. 2^-8) passes absolute
    assert compare(torch.full((16,), 1.5 + 2**-8, dtype=F64), g, standard="absolute", target_dtype=BF16).status == PASS


@PROPS
@given(st.sampled_from(TARGETS), st.data())
def test_property_nan_on_one_side_is_error(dtype, data):
    g = data.draw(_representable(dtype, subnormal=True))
    i = data.draw(st.integers(0, g.numel() - 1))
    t = g.to(dtype)
    t_nan = t.clone()
    t_nan.view(-1)[i] = math.nan
    g_nan = g.clone()
    g_nan.view(-1)[i] = math.nan
    for standard in EVERY:
        for tt, gg in ((t_nan, g), (t, g_nan)):
            c = compare(tt, gg, standard=standard, reference=t)
            assert c.status == ERROR, (standard, c.message)


_FACTORS = [0.0, 1e-7, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0]
_MONOTONE = ["default", "msprobe", "absolute", "ulp", "thousandth", "accumulative"]


# Goldens of any magnitude, down to far below the target dtype's resolution (where values underflow).
_GOLDEN = st.one_of(
    st.just(0.0), st.tuples(st.floats(1e-70, 100.0), st.booleans()).map(lambda p: -p[0] if p[1] else p[0])
)


@PROPS
@given(
    st.sampled_from(TARGETS),
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            hnp.arrays(np.float64, n, elements=_GOLDEN),
            hnp.arrays(np.float64, n, elements=st.floats(-1.0, 1.0, allow_nan=False)),
        )
    ),
)
def test_property_status_never_improves_as_error_grows(dtype, pair):
    g, p = (torch.from_numpy(a) for a in pair)
    for standard in _MONOTONE:
        ranks = [
            RANK[compare((g + k * p * g.abs().clamp(min=1.0)).to(dtype), g, standard=standard).status] for k in _FACTORS
        ]
        assert ranks == sorted(ranks), (standard, list(zip(_FACTORS, ranks)))


@PROPS
@given(
    st.sampled_from(TARGETS),
    st.integers(2, 40).flatmap(
        lambda n: st.tuples(
            hnp.arrays(np.float64, n, elements=st.floats(-100.0, 100.0, allow_nan=False)),
            hnp.arrays(np.float64, n, elements=st.floats(-1.0, 1.0, allow_nan=False)),
            st.permutations(list(range(n))),
        )
    ),
    st.sampled_from([1e-4, 1e-2, 0.3]),
)
def test_property_invariant_to_permuting_elements(dtype, data, scale):
    g_np, p_np, perm = data
    g = torch.from_numpy(g_np)
    t = (g + torch.from_numpy(p_np) * scale).to(dtype)
    perm = torch.tensor(perm)
    for standard in _MONOTONE + ["binary"]:
        a = compare(t, g, standard=standard)
        b = compare(t[perm], g[perm], standard=standard)
        assert a.status == b.status, (standard, a.message, b.message)
        assert b.metrics.max_abs_err == a.metrics.max_abs_err
        assert b.metrics.rel_err_ratio == a.metrics.rel_err_ratio
        assert b.metrics.ulp_above_ratio == a.metrics.ulp_above_ratio
        # the worst element moves with the permutation (ties may pick another element of the same error)
        i = b.metrics.worst_index
        assert abs(float(t[perm][i]) - float(g[perm][i])) == a.metrics.max_abs_err


# =============================================================================================== run_ut


@pytest.fixture(scope="module")
def gpt2_benchmark(tmp_path_factory):
    return run_ut(
        real_dump_json("gpt2_bf16_tensor"),
        tmp_path_factory.mktemp("bench"),
        device="cpu",
        workers=1,
        options=CheckOptions(standard="benchmark"),
    )


def test_run_ut_benchmark_against_the_same_cpu_passes_every_non_random_api(gpt2_benchmark):
    results = gpt2_benchmark.results
    assert len(results) == 47
    random = [r for r in results if r.details[0].comparison.standard == "statistical"]
    assert {r.name.rsplit(".", 1)[0] for r in random} == {
        "Functional.dropout",
        "Functional.scaled_dot_product_attention",
    }
    for r in results:
        assert r.forward == PASS, (r.name, r.message)
        if r in random:  # a draw has no benchmark to compare with: checked by its law
            continue
        assert r.backward in (PASS, None), (r.name, r.message)
        for d in r.details:
            assert d.comparison.standard in ("benchmark", "exact"), d.name
            if d.comparison.standard == "benchmark":
                assert d.comparison.metrics.rmse is not None
    assert sum(d.comparison.standard == "benchmark" for r in results for d in r.details) > 100


def test_run_ut_auto_routes_rows_to_several_standards(tmp_path):
    summary = run_ut(
        real_dump_json("gpt2_bf16_tensor"), tmp_path, device="cpu", workers=1, options=CheckOptions(standard="auto")
    )
    assert len(summary.results) == 47
    by_api = {}
    for r in summary.results:
        for d in r.details:
            if d.comparison.standard:
                by_api.setdefault(r.name.rsplit(".", 1)[0], set()).add(d.comparison.standard)
    assert by_api["Torch.addmm"] == {"ulp"}
    assert by_api["Functional.linear"] == {"ulp"}
    assert by_api["Tensor.__add__"] >= {"absolute"}
    assert by_api["Functional.cross_entropy"] == {"accumulative"}
    assert by_api["Functional.layer_norm"] == {"default"}  # "other" without a reference
    assert by_api["Functional.pad"] == {"exact"}  # int output
    assert summary.details_path.exists()


def test_an_output_that_cancels_to_zero_has_no_direction_to_grade():
    """A gradient that is 1e-16 in float64 and 1e-8 in float32 is zero on both sides at float32's scale: its
    cosine is noise against noise (batch_norm, softmin backward), not an error; a real value there still is."""
    from precheck.grader import compare

    golden = torch.linspace(-1, 1, 50, dtype=torch.float64) * 1e-16
    noise = torch.linspace(1, -1, 50, dtype=torch.float32) * 7e-8
    assert compare(noise, golden).status == "pass"
    assert compare(noise * 1e4, golden).status == "error"


def test_dtype_facts_by_name_agree_with_torch_for_every_dtype():
    """The grader judges a CSV's DEVICE Dtype without torch (core/dtypes.py); it must say what torch says."""
    from precheck.core import dtypes
    from precheck.grader.limits import is_low_precision, limits_for

    every = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    assert set(dtypes.NAMES) == {str(d) for d in every}
    for d in every:
        real = d.to_real() if d.is_complex else d
        assert (dtypes.is_floating(d), dtypes.is_complex(d), dtypes.itemsize(d)) == (
            d.is_floating_point,
            d.is_complex,
            d.itemsize,
        ), d
        assert is_low_precision(d) == is_low_precision(str(d)) == (real.is_floating_point and real.itemsize <= 2)
        assert limits_for(d) == limits_for(str(d))
    assert dtypes.canonical("BFloat16") == "torch.bfloat16" and dtypes.canonical("torch.nope") is None
