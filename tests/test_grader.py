"""precheck.grader: metric values, the default pass/warning/error rule, and its properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from precheck.core.reasons import Reason
from precheck.grader import (
    DEFAULT_COSINE,
    DEFAULT_MAX_ABS,
    ERROR,
    PASS,
    SKIP,
    WARNING,
    Metrics,
    compare,
    exact_metrics,
    float_metrics,
    judge,
    worst,
)

RANK = {PASS: 0, WARNING: 1, ERROR: 2}
F64 = torch.float64
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def t64(values):
    return torch.tensor(values, dtype=F64)


def seeded(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64) * scale


# --------------------------------------------------------------------------------------------- identical outputs


def test_defaults():
    assert DEFAULT_COSINE == 0.99
    assert DEFAULT_MAX_ABS == 1e-4


def assert_ideal(m: Metrics, n: int):
    assert m.cosine == (None if n < 2 else pytest.approx(1.0, abs=1e-12))
    assert m.max_abs_err == 0.0
    assert m.rel_within_1e2 == m.rel_within_1e3 == m.rel_within_1e4 == 1.0
    assert m.binary_mismatch == 0.0
    assert m.error_balance == 0.0
    assert m.rmse == 0.0
    assert m.small_value_err_ratio == 0.0
    assert m.max_rel_err == 0.0 and m.mean_rel_err == 0.0
    assert m.inf_nan_err_ratio == 0.0
    assert m.rel_err_ratio == 0.0 and m.abs_err_ratio == 0.0
    assert m.ulp_max == 0.0 and m.ulp_mean == 0.0 and m.ulp_above_ratio == 0.0
    assert m.nonfinite_mismatches == 0


def test_identical_fp64_passes_with_ideal_metrics():
    g = seeded(8, 16)
    c = compare(g.clone(), g)
    assert c.status == PASS and c.message == ""
    assert_ideal(c.metrics, g.numel())
    assert c.shape == (8, 16)
    assert c.golden_dtype == c.target_dtype == "torch.float64"


def test_metrics_columns_are_the_17_csv_columns_in_order():
    m = float_metrics(seeded(10, seed=1).float(), seeded(10, seed=2), torch.float32)
    cols = m.columns()
    assert len(cols) == 17
    assert cols[0] == m.cosine and cols[1] == m.max_abs_err and cols[7] == m.rmse and cols[-1] == m.ulp_above_ratio


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("scale", [1e-3, 1.0, 100.0])
def test_golden_rounded_to_target_dtype_never_errors(dtype, scale):
    g = seeded(32, 64, seed=3, scale=scale)
    c = compare(g.to(dtype), g)
    assert c.status in (PASS, WARNING), c.message
    assert c.metrics.binary_mismatch == 0.0  # the target is exactly the golden rounded to its dtype
    assert c.target_dtype == str(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_golden_rounded_passes_when_rounding_error_is_below_max_abs(dtype):
    g = seeded(256, seed=4, scale=0.005)  # |g| < 0.03: rounding error < 1e-4 even in bf16
    assert compare(g.to(dtype), g).status == PASS
    assert compare(seeded(256, seed=4).float(), seeded(256, seed=4)).status == PASS  # fp32 at unit scale


def test_correctly_rounded_fp16_output_with_tiny_values_is_not_error():
    g = torch.cat([seeded(980, seed=5, scale=100.0), torch.full((20,), 2e-6, dtype=F64)])
    c = compare(g.half(), g)
    assert c.metrics.binary_mismatch == 0.0
    assert c.status != ERROR, c.message


def _finite_f64(lo: float, hi: float, zero: bool = True):
    mag = st.floats(lo, hi, allow_nan=False, allow_infinity=False)
    signed = st.tuples(mag, st.booleans()).map(lambda p: -p[0] if p[1] else p[0])
    return st.one_of(st.just(0.0), signed) if zero else signed


SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6)


@SETTINGS
@given(hnp.arrays(np.float64, SHAPES, elements=st.floats(allow_nan=False, allow_infinity=False)))
def test_property_identical_fp64_inputs_pass(array):
    g = torch.from_numpy(array)
    c = compare(g.clone(), g)
    assert c.status == PASS, c.message
    if g.numel():
        assert_ideal(c.metrics, g.numel())


def test_fp64_ulp_of_zero_golden_is_zero():
    m = compare(t64([0.0, 1.0]), t64([0.0, 1.0])).metrics
    assert m.ulp_max == 0.0 and m.ulp_mean == 0.0
    assert compare(0.0, 0.0).metrics.ulp_max == 0.0
    assert compare(t64([1e-300]), t64([1e-300])).metrics.ulp_max == 0.0


_NORMAL_RANGE = {torch.float16: (2.0**-14, 6.0e4), torch.bfloat16: (2.0**-126, 1e38), torch.float32: (2.0**-126, 1e38)}


@SETTINGS
@given(st.sampled_from(sorted(_NORMAL_RANGE, key=str)), st.data())
def test_property_golden_rounded_to_dtype_never_errors(dtype, data):
    lo, hi = _NORMAL_RANGE[dtype]
    array = data.draw(
        hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=8), elements=_finite_f64(lo, hi))
    )
    g = torch.from_numpy(array)
    c = compare(g.to(dtype), g)
    assert c.status != ERROR, c.message


# --------------------------------------------------------------------------------------------- thresholds


def test_cosine_threshold_is_strict():
    g = t64([1.0, 2.0, 3.0, 4.0]) * 1e-5
    t = t64([1.0, 2.0, 3.0, 4.5]) * 1e-5  # max abs error 5e-6: only the cosine decides
    cos = compare(t, g).metrics.cosine
    assert 0.99 < cos < 1.0
    assert compare(t, g).status == PASS
    assert compare(t, g, cosine=cos).status != PASS  # equal to the threshold: not pass
    assert compare(t, g, cosine=math.nextafter(cos, 0.0)).status == PASS  # strictly greater: pass
    assert "cosine" in compare(t, g, cosine=cos).message


def test_small_output_pointing_the_wrong_way_is_an_error():
    g = t64([1e-6, 0.0, 0.0])
    t = t64([0.0, 1e-6, 0.0])  # max abs error 1e-6 < 1e-4, but cosine 0
    c = compare(t, g)
    assert c.metrics.cosine == pytest.approx(0.0)
    assert c.status == ERROR and "cosine" in c.message
    assert compare(t, g, cosine=-0.5).status == PASS


def test_max_abs_threshold_is_strict():
    g = t64([1.0, 2.0, 3.0 + 2.0**-23])
    t = torch.tensor([1.0, 2.0, 3.0])  # fp32 rounds 3 + 2^-23 (a tie) to 3: error 2^-23, within its rounding
    c = compare(t, g)
    assert c.metrics.max_abs_err == 2.0**-23
    assert c.status == PASS
    at = compare(t, g, max_abs=2.0**-23)
    assert at.status == WARNING and "max abs error" in at.message
    assert compare(t, g, max_abs=math.nextafter(2.0**-23, 1.0)).status == PASS


def test_custom_max_abs_turns_warning_into_pass():
    g = seeded(100, seed=6, scale=10.0)
    t = g.to(torch.bfloat16)  # correctly rounded: max abs error ~0.03
    assert compare(t, g).status == WARNING
    assert compare(t, g, max_abs=1.0).status == PASS


def _one_bad(n: int, dtype: torch.dtype, value: float = 1.03125) -> tuple[torch.Tensor, torch.Tensor]:
    """n ones where one target element is ``value`` (1.03125: 3.1% relative error, 4 bf16 ULPs, exact in
    bf16/fp16/fp32)."""
    g = torch.ones(n, dtype=F64)
    t = torch.ones(n, dtype=dtype)
    t[n // 2] = value
    return t, g


@pytest.mark.parametrize("n", [64, 100, 2000])
def test_one_outlier_error_beyond_four_ulps_whatever_the_share(n):
    """The honest verdict's outlier rule: one element of n, whatever n, decides only when it is beyond a few
    ULPs of its dtype (8 roundings); within them it is what the dtype explains."""
    t, g = _one_bad(n, torch.bfloat16)  # 4 bf16 ULPs: at the limit, not beyond
    c = compare(t, g)
    assert c.status == WARNING and "what bf16 explains" in c.message, c.message
    assert compare(t, g, max_abs=0.04).status == PASS
    t, g = _one_bad(n, torch.bfloat16, 1.0390625)  # 5 bf16 ULPs
    c = compare(t, g)
    assert c.status == ERROR and "an element off by 10 roundings" in c.message, c.message
    assert compare(t, g, max_abs=0.04).status == PASS  # the rule holds and no honest kernel says otherwise
    honest = g.to(torch.bfloat16)
    assert compare(t, g, max_abs=0.04, honest=honest).status == ERROR  # worse than it: whatever the rule says
    for dtype in (torch.float16, torch.float32):  # 3.1% is 64 fp16 roundings, 2^19 fp32 ones
        c = compare(*_one_bad(n, dtype))
        assert c.status == ERROR and "worse than an honest" in c.message, c.message


def _metrics(**kw):
    base = dict(cosine=0.9999, max_abs_err=0.01, rel_within_1e2=1.0, rel_within_1e3=1.0, rel_within_1e4=1.0)
    base.update(kw)
    return Metrics(**base)


@pytest.mark.parametrize(
    "kw, dtype, expected",
    [
        (dict(max_abs_err=0.0), torch.float32, PASS),
        (dict(max_abs_err=DEFAULT_MAX_ABS), torch.float32, WARNING),
        (dict(max_abs_err=5e-5, cosine=0.99), torch.float32, ERROR),
        (dict(max_abs_err=5e-5, cosine=0.9901), torch.float32, PASS),
        (dict(max_abs_err=0.0, cosine=0.5), torch.float32, PASS),  # no error worth a direction
        (dict(cosine=None, max_abs_err=5e-5), torch.float32, PASS),
        (dict(cosine=None, max_abs_err=5e-4), torch.float32, WARNING),
        (dict(rel_within_1e2=0.99), torch.bfloat16, ERROR),
        (dict(rel_within_1e2=0.9901, rel_within_1e3=0.5), torch.bfloat16, WARNING),
        (dict(rel_within_1e2=0.99), torch.float16, ERROR),
        (dict(rel_within_1e3=0.999), torch.float32, ERROR),
        (dict(rel_within_1e3=0.9991, rel_within_1e4=0.5), torch.float32, WARNING),
        (dict(rel_within_1e3=0.999), torch.float64, ERROR),
        (dict(rel_within_1e3=0.999), torch.bfloat16, WARNING),
        (dict(max_abs_err=5e-4, rel_within_1e2=0.0, rel_within_1e3=0.0), torch.bfloat16, WARNING),
        (dict(nonfinite_mismatches=1, inf_nan_err_ratio=0.5, max_abs_err=0.0), torch.float32, ERROR),
    ],
)
def test_judge_table(kw, dtype, expected):
    status, message = judge(_metrics(**kw), dtype)
    assert status == expected, message
    assert (message == "") == (status == PASS)


def test_judge_custom_thresholds():
    m = _metrics(cosine=0.995, max_abs_err=0.05)
    assert judge(m, torch.float32)[0] == WARNING
    assert judge(m, torch.float32, cosine=0.99, max_abs=0.06)[0] == PASS
    assert judge(m, torch.float32, cosine=0.995, max_abs=0.06)[0] == WARNING  # cosine not strictly greater
    assert judge(m, torch.float32, cosine=0.9, max_abs=0.05)[0] == WARNING  # max abs not strictly lower


# --------------------------------------------------------------------------------------------- inf / nan


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_identical_nonfinite_positions_agree(dtype):
    g = t64([math.inf, -math.inf, math.nan, 1.0, -2.0])
    c = compare(g.to(dtype), g)
    assert c.status == PASS, c.message
    assert c.metrics.inf_nan_err_ratio == 0.0
    assert c.metrics.binary_mismatch == 0.0
    assert c.metrics.max_abs_err == 0.0


def test_all_nonfinite_identical_pass():
    g = t64([math.nan, math.inf, math.nan])
    assert compare(g.float(), g).status == PASS


def test_nan_on_one_side_is_error_with_index():
    g = t64([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    t = g.float().clone()
    t[1, 2] = math.nan
    c = compare(t, g)
    assert c.status == ERROR
    assert "inf/nan" in c.message and "(1, 2)" in c.message
    assert c.metrics.inf_nan_err_ratio == 1.0  # as msprobe: 1 of the 1 non-finite positions disagrees
    assert c.metrics.nonfinite_mismatches == 1
    # the other elements are still measured
    assert c.metrics.max_abs_err == 0.0


def test_nan_in_golden_only_is_error():
    g = t64([1.0, math.nan, 3.0])
    c = compare(t64([1.0, 2.0, 3.0]).float(), g)
    assert c.status == ERROR and "inf/nan" in c.message and "(1,)" in c.message


@pytest.mark.parametrize(
    "t_value, g_value", [(math.inf, 1e4), (1e4, math.inf), (math.inf, -math.inf), (-math.inf, math.nan)]
)
def test_inf_mismatch_is_error(t_value, g_value):
    g = t64([0.5, g_value, 0.25])
    t = t64([0.5, t_value, 0.25]).float()
    c = compare(t, g)
    assert c.status == ERROR and "inf/nan" in c.message


@pytest.mark.parametrize("standard", ["default", "msprobe", "absolute"])
def test_an_fp16_overflow_the_golden_has_too_is_a_warning_one_the_target_has_alone_an_error(standard):
    g = t64([1.0, 70000.0, -1e6])  # beyond fp16's 65504: the golden in fp16 is inf too
    over = compare(g.half(), g, standard=standard)
    assert (over.status, over.reason, over.metrics.overflows) == (WARNING, Reason.OVERFLOW, 2), over.message
    assert over.message.startswith("overflow: inf at 2 position(s)") and "(first at index (1,)" in over.message
    alone = compare(t64([1.0, math.inf, -math.inf]).half(), t64([1.0, 60000.0, -1e6]), standard=standard)
    assert (alone.status, alone.reason) == (ERROR, Reason.NONFINITE_MISMATCH)


def test_nonfinite_mismatch_beats_loose_thresholds():
    g = t64([1.0, 2.0])
    t = t64([1.0, math.nan])
    assert compare(t, g, cosine=-2.0, max_abs=1e300).status == ERROR


# --------------------------------------------------------------------------------------------- special shapes and types


@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_one_element_has_no_cosine_and_uses_abs_rel(shape):
    g = torch.full(shape, 1.0, dtype=F64)
    ok = compare(torch.full(shape, 1.0 + 2.0**-15), g)
    assert ok.metrics.cosine is None and ok.status == PASS
    far = compare(torch.full(shape, 1.5), g)
    assert far.metrics.cosine is None and far.status == ERROR
    flip = compare(torch.full(shape, -1.0), g)
    assert flip.status == ERROR
    big = torch.full(shape, 1001.5, dtype=F64)
    close = compare(torch.full(shape, 1000.0, dtype=torch.bfloat16), big)  # bf16's rounding of 1001.5
    assert close.status == WARNING, close.message
    far = compare(torch.full(shape, 1000.0625, dtype=F64), torch.full(shape, 1000.0, dtype=F64))
    assert far.status == ERROR, far.message  # 6e-5 relative is no fp64 rounding


def test_empty_tensors_pass():
    c = compare(torch.empty(0, 3), torch.empty(0, 3, dtype=F64))
    assert c.status == PASS and c.shape == (0, 3)
    assert compare(torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64)).status == PASS


def test_all_zero_cosine_is_one():
    c = compare(torch.zeros(5), torch.zeros(5, dtype=F64))
    assert c.metrics.cosine == 1.0 and c.status == PASS


def test_zero_against_nonzero_cosine_is_zero():
    c = compare(torch.zeros(3), t64([1.0, 2.0, 3.0]))
    assert c.metrics.cosine == 0.0 and c.status == ERROR
    c = compare(t64([1e-6, 0.0]), torch.zeros(2, dtype=F64))
    assert c.metrics.cosine == 0.0


def test_shape_mismatch():
    c = compare(torch.zeros(2, 3), torch.zeros(3, 2, dtype=F64))
    assert c.status == ERROR
    assert "(2, 3)" in c.message and "(3, 2)" in c.message and "shape" in c.message
    assert compare(torch.zeros(6), torch.zeros(1, 6, dtype=F64)).status == ERROR


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.int8])
def test_int_exact(dtype):
    g = torch.arange(10).to(dtype)
    assert compare(g.clone(), g).status == PASS
    t = g.clone()
    t[7] = 1
    c = compare(t, g)
    assert c.status == ERROR
    assert "1/10 elements differ" in c.message and "(7,)" in c.message
    assert c.metrics.binary_mismatch == pytest.approx(0.1)


def test_int_off_by_one_at_any_magnitude_is_error():
    g = torch.full((4,), 1000, dtype=torch.int64)
    t = g.clone()
    t[0] = 1001
    assert compare(t, g).status == ERROR
    assert compare(t, g, cosine=-2, max_abs=1e9).status == ERROR  # float thresholds do not apply


def test_large_int64_difference_message_names_the_differing_element():
    g = torch.tensor([0, 2**60 + 1])
    t = torch.tensor([0, 2**60])
    c = compare(t, g)
    assert c.status == ERROR
    assert "(1,)" in c.message, c.message


def test_bool_exact():
    g = torch.tensor([[True, False], [False, True]])
    assert compare(g.clone(), g).status == PASS
    t = g.clone()
    t[1, 0] = True
    c = compare(t, g)
    assert c.status == ERROR and "1/4 elements differ" in c.message and "(1, 0)" in c.message


def test_exact_metrics_values():
    m = exact_metrics(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 5, 4]))
    assert m.binary_mismatch == 0.25 and m.max_abs_err == 2.0 and m.error_balance == 0.25
    assert m.worst_index == 2
    m = exact_metrics(torch.tensor([1, 2]), torch.tensor([1, 2]))
    assert m.binary_mismatch == 0.0 and m.worst_index is None


@pytest.mark.parametrize(
    "target, golden, status",
    [
        (3.0, 3.0 + 1e-9, PASS),
        (3.0, 3.0, PASS),
        (3.0, 3.5, ERROR),
        (0.0, 1e-7, PASS),
        (float("nan"), float("nan"), PASS),
        (float("inf"), float("inf"), PASS),
        (float("nan"), 1.0, ERROR),
        (float("inf"), 1e308, WARNING),  # judged as float32: 1e308 is beyond its range, an overflow of the dtype
        (float("inf"), 1e30, ERROR),
        (2, 2.0, PASS),
        (3, 3, PASS),
        (3, 4, ERROR),
        (True, True, PASS),
        (True, False, ERROR),
        (True, 1, ERROR),
        (None, None, PASS),
        ("mean", "mean", PASS),
        ("a", "b", ERROR),
        (torch.Size([2, 3]), torch.Size([2, 3]), PASS),
        (torch.Size([2, 3]), torch.Size([3, 2]), ERROR),
    ],
)
def test_python_scalars(target, golden, status):
    c = compare(target, golden)
    assert c.status == status, c.message
    if status == ERROR:
        assert c.message


def test_int_against_bool_golden_is_a_mismatch():
    assert compare(1, True).status == ERROR


def test_tensor_against_scalar_is_type_mismatch():
    c = compare(torch.ones(2), 1.0)
    assert c.status == ERROR and "type" in c.message
    assert compare(1.0, torch.ones(2, dtype=F64)).status == ERROR


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex(dtype):
    g = torch.complex(seeded(4, 5, seed=7), seeded(4, 5, seed=8))
    c = compare(g.to(dtype), g)
    assert c.status in (PASS, WARNING) and c.status == PASS, c.message
    t = g.to(dtype).clone()
    t[2, 3] = t[2, 3] + 1j  # imaginary part off by 1
    c = compare(t, g)
    assert c.status == ERROR
    assert c.metrics.max_abs_err == pytest.approx(1.0, rel=1e-6)
    assert "index" in c.message


def test_complex_nan_imaginary_part():
    g = torch.tensor([1 + 1j, 2 + 2j], dtype=torch.complex128)
    t = torch.tensor([1 + 1j, complex(2, math.nan)], dtype=torch.complex64)
    assert compare(t, g).status == ERROR


# --------------------------------------------------------------------------------------------- metric values


def test_hand_computed_float_metrics():
    g = t64([1.0, 2.0, 4.0, 0.5])
    t = t64([1.0078125, 2.0, 3.875, 0.5])  # errors +2^-7 and -2^-3, all exact in fp32
    m = float_metrics(t.float(), g, torch.float32)
    assert m.max_abs_err == 0.125 and m.worst_index == 2
    assert m.rel_within_1e2 == 0.75  # rel errors 0.0078125, 0, 0.03125, 0
    assert m.rel_within_1e3 == 0.5 and m.rel_within_1e4 == 0.5
    assert m.error_balance == 0.0  # one above, one below
    assert m.rmse == pytest.approx(math.sqrt((2.0**-14 + 2.0**-6) / 4), rel=1e-12)
    assert m.max_rel_err == pytest.approx(0.03125, rel=1e-12)
    assert m.mean_rel_err == pytest.approx((0.0078125 + 0.03125) / 4, rel=1e-12)
    assert m.binary_mismatch == 0.5
    assert m.rel_err_ratio == 0.5  # rel > 2^-20 (fp32 rtol)
    assert m.small_value_err_ratio == 0.0 and m.abs_err_ratio == 0.0
    # ULP (fp32, 23 mantissa bits): 2^-7 at eb 0 -> 2^16, 2^-3 at eb 2 -> 2^18
    assert m.ulp_max == 2.0**18
    assert m.ulp_mean == pytest.approx((2.0**16 + 2.0**18) / 4)
    assert m.ulp_above_ratio == 0.5
    a, b = t.numpy(), g.numpy()
    assert m.cosine == pytest.approx(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))), rel=1e-12)
    assert m.inf_nan_err_ratio == 0.0


def test_error_balance_counts_direction():
    g = t64([1.0, 1.0, 1.0, 1.0])
    t = t64([1.5, 1.25, 1.125, 0.5])  # three above, one below
    assert float_metrics(t, g, F64).error_balance == 0.5
    assert float_metrics(g + 0.1, g, F64).error_balance == 1.0


def test_error_balance_divides_by_every_position_as_msprobe():
    """msprobe's get_error_balance: |#(device > bench) - #(device < bench)| / size over the whole arrays, so
    nan and inf positions dilute it and an inf above a finite golden counts as above."""
    golden = t64([1.0, 2.0, 3.0, math.inf, math.nan])
    assert float_metrics(t64([1.1, 2.1, 3.1, math.inf, math.nan]), golden, F64).error_balance == pytest.approx(0.6)
    assert float_metrics(t64([1.0, math.inf]), t64([1.0, 2.0]), F64).error_balance == 0.5
    assert float_metrics(t64([0.9, -math.inf, 2.1]), t64([1.0, 2.0, 2.0]), F64).error_balance == pytest.approx(1 / 3)


def test_cosine_values():
    assert float_metrics(t64([1.0, 1.0]), t64([1.0, 0.0]), F64).cosine == pytest.approx(1 / math.sqrt(2))
    assert float_metrics(t64([-1.0, -2.0, -3.0]), t64([1.0, 2.0, 3.0]), F64).cosine == pytest.approx(-1.0)
    m = float_metrics(t64([2.0, 4.0, 6.0]), t64([1.0, 2.0, 3.0]), F64)
    assert m.cosine == pytest.approx(1.0) and m.max_abs_err == 3.0
    assert compare(t64([2.0, 4.0, 6.0]), t64([1.0, 2.0, 3.0])).status == ERROR  # scaled copy is not "close"


def test_cosine_does_not_overflow_on_huge_values():
    g = t64([1e300, -1e300, 5e299])
    m = float_metrics(g.clone(), g, F64)
    assert m.cosine == pytest.approx(1.0)


@pytest.mark.parametrize(
    "dtype, target, golden, ulp",
    [
        (torch.bfloat16, 1.0 + 2.0**-7, 1.0, 1.0),  # one bf16 ULP above 1.0
        (torch.bfloat16, 3.0 + 2.0**-6, 3.0, 1.0),  # eb = floor(log2 3) = 1
        (torch.bfloat16, 1.0 - 2.0**-8, 1.0, 0.5),  # one ULP below 1.0 is half a ULP of 1.0
        (torch.bfloat16, 0.0, 2.0**-130, 8.0),  # eb clamped to min_eb -126: 2^-130 * 2^(7+126)
        (torch.bfloat16, 2.0**-133, 0.0, 1.0),  # golden 0 -> eb = min_eb
        (torch.float16, 1.0 + 2.0**-10, 1.0, 1.0),
        (torch.float16, 2.0**-24, 0.0, 1.0),  # fp16 min_eb -14, 10 mantissa bits
        (torch.float16, 1024.0 + 1.0, 1024.0, 1.0),
        (torch.float32, 1.0 + 2.0**-23, 1.0, 1.0),
        (torch.float32, 2.0**-149, 0.0, 1.0),
    ],
)
def test_ulp(dtype, target, golden, ulp):
    t = torch.tensor([target], dtype=F64).to(dtype)
    assert float(t) == target  # the target is exact in its dtype
    m = float_metrics(t, t64([golden]), dtype)
    assert m.ulp_max == pytest.approx(ulp, rel=1e-12)
    assert m.ulp_mean == pytest.approx(ulp, rel=1e-12)


def test_ulp_above_threshold_share():
    g = t64([1.0, 1.0, 1.0, 1.0])
    t = torch.tensor([1.0, 1.0 + 2.0**-7, 1.0 + 2.0**-6, 1.0], dtype=torch.bfloat16)  # 0, 1, 2, 0 ULP
    m = float_metrics(t, g, torch.bfloat16)
    assert m.ulp_max == 2.0 and m.ulp_mean == 0.75
    assert m.ulp_above_ratio == 0.25  # bf16 threshold: more than 1 ULP


def test_small_value_ratio():
    sv, atol = 2.0**-10, 2.0**-16  # bf16 small value and its absolute tolerance
    g = t64([1e-4, 1e-4, sv, 0.0, 1.0, 2.0])  # four small values (|g| <= 2^-10)
    t = g.clone()
    t[0] += 2.0**-15  # small, above atol -> counted
    t[3] = atol  # small, exactly atol -> not counted (strict >)
    t[5] += 2.0**-15  # normal value: judged by relative error instead
    m = float_metrics(t, g, torch.bfloat16)
    assert m.small_value_err_ratio == 0.25  # 1 of 4 small values
    assert m.abs_err_ratio == 0.25  # as msprobe: 1 of the 4 small values
    assert m.rel_err_ratio == 0.0  # 2^-16 relative error is below bf16's rtol 2^-8
    t[4] = 1.0 + 2.0**-7
    assert float_metrics(t, g, torch.bfloat16).rel_err_ratio == pytest.approx(1 / 2)  # 1 of 2 normal values


def test_small_value_limits_per_dtype():
    g = t64([2.0**-15, 1.0])  # small for fp16/bf16 (2^-10), normal for fp32 (2^-20)
    t = t64([2.0**-15 + 2.0**-25, 1.0])
    assert float_metrics(t, g, torch.float16).small_value_err_ratio == 0.0  # 2^-25 < atol 2^-16
    assert float_metrics(t, g, torch.float32).small_value_err_ratio == 0.0  # no small value at all
    t2 = t64([2.0**-15, 1.0])
    t2[0] = 2.0**-15 + 2.0**-12
    assert float_metrics(t2, g, torch.bfloat16).small_value_err_ratio == 1.0


def test_binary_mismatch_against_golden_rounded_to_target_dtype():
    g = t64([1.0 / 3.0, 2.0 / 3.0, 0.1])
    t = g.float()
    assert float_metrics(t, g, torch.float32).binary_mismatch == 0.0
    t[1] = torch.nextafter(t[1], torch.tensor(1.0))
    assert float_metrics(t, g, torch.float32).binary_mismatch == pytest.approx(1 / 3)


def test_metrics_ignore_agreeing_nonfinite_positions():
    g = t64([math.inf, 1.0, 2.0])
    t = t64([math.inf, 1.5, 2.0])
    m = float_metrics(t, g, F64)
    assert m.max_abs_err == 0.5 and m.rmse == pytest.approx(math.sqrt(0.25 / 2))
    assert m.worst_index == 1


# --------------------------------------------------------------------------------------------- worst


@pytest.mark.parametrize(
    "statuses, expected",
    [
        ([], SKIP),
        ([SKIP], SKIP),
        ([SKIP, SKIP], SKIP),
        ([SKIP, PASS], PASS),
        ([PASS, SKIP], PASS),
        ([PASS, WARNING], WARNING),
        ([ERROR, WARNING, PASS], ERROR),
        ([WARNING, ERROR, SKIP], ERROR),
        ([WARNING, PASS, WARNING], WARNING),
    ],
)
def test_worst(statuses, expected):
    assert worst(statuses) == expected
    assert worst(iter(statuses)) == expected


@SETTINGS
@given(st.lists(st.sampled_from([PASS, WARNING, ERROR, SKIP]), max_size=8))
def test_property_worst(statuses):
    result = worst(statuses)
    graded = [s for s in statuses if s != SKIP]
    assert (result == SKIP) == (not graded)
    if graded:
        assert result == max(graded, key=RANK.__getitem__)


# --------------------------------------------------------------------------------------------- properties

_MODERATE = st.floats(-100.0, 100.0, allow_nan=False, allow_infinity=False)
_FACTORS = [0.0, 1e-9, 1e-7, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0, 100.0]


@SETTINGS
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            hnp.arrays(np.float64, n, elements=_MODERATE),
            hnp.arrays(np.float64, n, elements=st.floats(-1.0, 1.0, allow_nan=False)),
        )
    ),
    st.sampled_from(FLOATS),
)
def test_property_status_never_improves_as_error_grows(pair, dtype):
    g, p = (torch.from_numpy(a) for a in pair)
    ranks = []
    for k in _FACTORS:
        t = g + k * p
        status, message = judge(float_metrics(t, g, dtype), dtype)
        ranks.append(RANK[status])
    assert ranks == sorted(ranks), list(zip(_FACTORS, ranks))
    assert ranks[0] == RANK[PASS]


@SETTINGS
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            hnp.arrays(np.float64, n, elements=_MODERATE),
            hnp.arrays(np.float64, n, elements=st.floats(-1.0, 1.0, allow_nan=False)),
        )
    )
)
def test_property_compare_status_never_improves_fp64(pair):
    g, p = (torch.from_numpy(a) for a in pair)
    ranks = [RANK[compare(g + k * p, g).status] for k in _FACTORS]
    assert ranks == sorted(ranks)


@SETTINGS
@given(
    st.integers(2, 40).flatmap(
        lambda n: st.tuples(
            hnp.arrays(np.float64, n, elements=_MODERATE),
            hnp.arrays(np.float64, n, elements=st.floats(-1.0, 1.0, allow_nan=False)),
            st.permutations(list(range(n))),
        )
    ),
    st.sampled_from(FLOATS),
)
def test_property_metrics_invariant_to_permutation(data, dtype):
    g_np, p_np, perm = data
    g = torch.from_numpy(g_np)
    t = (g + torch.from_numpy(p_np) * 0.01).to(dtype)
    perm = torch.tensor(perm)
    a = float_metrics(t, g, dtype)
    b = float_metrics(t[perm], g[perm], dtype)
    assert b.cosine == pytest.approx(a.cosine, rel=1e-9, abs=1e-12)
    assert b.max_abs_err == a.max_abs_err
    assert b.rmse == pytest.approx(a.rmse, rel=1e-9, abs=1e-300)
    assert b.error_balance == a.error_balance
    for name in (
        "rel_within_1e2",
        "rel_within_1e3",
        "rel_within_1e4",
        "binary_mismatch",
        "small_value_err_ratio",
        "rel_err_ratio",
        "abs_err_ratio",
        "ulp_above_ratio",
        "inf_nan_err_ratio",
    ):
        assert getattr(b, name) == getattr(a, name), name
    # NaN-aware: the fp64 ULP of a zero golden is NaN (see test_fp64_ulp_of_zero_golden_is_zero)
    assert b.ulp_max == a.ulp_max or math.isnan(a.ulp_max) and math.isnan(b.ulp_max)
    assert b.max_rel_err == a.max_rel_err
    assert judge(a, dtype)[0] == judge(b, dtype)[0]


def test_statistics_of_a_complex_output_are_graded_on_its_modulus():
    """msprobe records a complex tensor's Max/Min/Mean of its modulus; the imaginary part must count."""
    from precheck.dump.decode import Stats, TensorSpec
    from precheck.execution.statistics import grade_statistics

    golden = torch.tensor([3 + 4j, 6 + 8j, 0 + 1j], dtype=torch.complex128)
    modulus = golden.abs()
    recorded = Stats(float(modulus.max()), float(modulus.min()), float(modulus.mean()), None)
    spec = TensorSpec(torch.complex64, (3,), recorded)
    assert grade_statistics(spec, golden).status == PASS
    real_only = Stats(6.0, 0.0, 3.0, None)
    verdict = grade_statistics(TensorSpec(torch.complex64, (3,), real_only), golden)
    assert verdict.status == WARNING and "Max 6 vs golden 10" in verdict.message


def test_statistics_none_of_which_can_be_compared_are_not_a_pass():
    """A recorded output whose four statistics are blank (or infinite sums of msprobe's) graded nothing: its row
    says so as a SKIP, never a pass."""
    from precheck.core.status import SKIP
    from precheck.dump.decode import Stats, TensorSpec
    from precheck.execution.statistics import grade_statistics

    golden = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    verdict = grade_statistics(TensorSpec(torch.float32, (3,), Stats(None, None, None, None)), golden)
    assert verdict.status == SKIP and "not graded" in verdict.message and "left blank" in verdict.message
    assert grade_statistics(TensorSpec(torch.float32, (3,), Stats(None, None, math.inf, None)), golden).status == ERROR
    one = grade_statistics(TensorSpec(torch.float32, (3,), Stats(3.0, None, None, None)), golden)
    assert one.status == PASS  # one number compared is a (weak) grade


def test_the_details_csvs_metric_columns_are_the_metrics_first_fields_in_order():
    # schema.py names the 17 columns once (torch-free); Metrics must hold them first and in msprobe's order, or a
    # column of every details CSV would be filled from another field.
    import dataclasses

    from precheck.core.comparison import Metrics
    from precheck.schema import METRIC_FIELDS, METRIC_HEADERS

    assert [f.name for f in dataclasses.fields(Metrics)][:17] == list(METRIC_FIELDS)
    assert len(METRIC_HEADERS) == len(METRIC_FIELDS) == 17


def test_comparisons_name_what_they_pass():
    """A Comparison is built with at most its status, message and metrics in order, the rest by name, and an
    output never compared is ``Comparison.failed``: six positional blanks (``None, "", "", None``) do not say
    which is a dtype and which the shape."""
    import ast
    from pathlib import Path

    from precheck.core.comparison import Comparison

    package = Path(__file__).resolve().parents[1] / "precheck"
    crowded = [
        f"{p.relative_to(package)}:{node.lineno}"
        for p in package.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Comparison" and len(node.args) > 3
    ]
    assert crowded == []
    failed = Comparison.failed("no gradient on the golden side", Reason.STRUCTURE_MISMATCH)
    assert (failed.status, failed.message, failed.metrics, failed.shape) == (
        "error",
        "no gradient on the golden side",
        None,
        None,
    )
    assert (failed.golden_dtype, failed.target_dtype, failed.reason) == ("", "", Reason.STRUCTURE_MISMATCH)
