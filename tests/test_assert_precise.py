"""precheck.grader.assert_precise: silent on close outputs, an assert_close-style message with the numbers a
precision investigation needs on the others."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from precheck.grader import assert_precise

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
# torch.testing.assert_close defaults (rtol, atol)
DEFAULTS = {F16: (1e-3, 1e-5), BF16: (1.6e-2, 1e-5), F32: (1.3e-6, 1e-5), F64: (1e-7, 1e-7)}
_NUM = r"[-+]?(?:inf|nan|[0-9.e+-]+)"
MIN_TOL = re.compile(
    rf"Minimum tolerance that would have passed: atol=({_NUM}) \(with rtol=({_NUM})\) "
    rf"or rtol=({_NUM}) \(with atol=({_NUM})\)"
)
MISMATCHED = re.compile(r"Mismatched elements: (\d+) / (\d+) \(([0-9.]+)%\)")
GREATEST = re.compile(
    rf"Greatest (absolute|relative) difference among them: ({_NUM}) at index \(([0-9, ]*)\) "
    rf"\(target ({_NUM}), golden ({_NUM})\)"
)
ABS_LINE = re.compile(
    rf"Absolute error: mean ({_NUM}), p99 ({_NUM}), max ({_NUM}); ULP \((\S+)\): "
    rf"mean ({_NUM}), max ({_NUM})"
)


def seeded(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64) * scale


def failure(actual, golden, **kw) -> str:
    with pytest.raises(AssertionError) as info:
        assert_precise(actual, golden, **kw)
    return str(info.value)


def index_of(text: str) -> tuple[int, ...]:
    return tuple(int(i) for i in text.split(",") if i.strip())


def greatest(message: str) -> dict[str, tuple]:
    return {m[0]: (float(m[1]), index_of(m[2]), float(m[3]), float(m[4])) for m in GREATEST.findall(message)}


def assert_close_passes(actual, golden, atol, rtol) -> bool:
    try:
        torch.testing.assert_close(actual.to(F64), golden.to(F64), atol=atol, rtol=rtol, equal_nan=True)
        return True
    except AssertionError:
        return False


# ============================================================================================ silent passes


@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 100.0])
def test_close_outputs_pass_silently(dtype, scale):
    g = seeded(16, 32, seed=1, scale=scale)
    assert assert_precise(g.to(dtype), g) is None


def test_close_nested_structures_pass():
    g = seeded(4, 4)
    assert_precise((g.float(), [g.half(), {"b": g.float(), "n": 3}], 2.5), (g, [g, {"b": g, "n": 3}], 2.5))
    assert_precise({"x": [torch.tensor([1, 2]), True]}, {"x": [torch.tensor([1, 2]), True]})
    assert_precise([(g.float(),)], ([g],))  # tuple and list are both sequences


@pytest.mark.parametrize(
    "actual, golden",
    [
        (3.0, 3.0 + 1e-9),
        (3, 3),
        (3, 3.0),
        (True, True),
        (0.0, 0.0),
        (-1e30, -1e30 * (1 + 1e-12)),
        ("relu", "relu"),
        (None, None),
    ],
)
def test_python_values_pass(actual, golden):
    assert_precise(actual, golden)


@pytest.mark.parametrize(
    "make",
    [
        lambda: (torch.empty(0), torch.empty(0, dtype=F64)),
        lambda: (torch.empty(3, 0), torch.empty(3, 0, dtype=F64)),
        lambda: (torch.tensor([2.5]), torch.tensor([2.5], dtype=F64)),
        lambda: (torch.tensor(2.5), torch.tensor(2.5, dtype=F64)),
        lambda: (torch.zeros(3, 3), torch.zeros(3, 3, dtype=F64)),
        lambda: (
            torch.tensor([math.inf, -math.inf, math.nan, 1.0]),
            torch.tensor([math.inf, -math.inf, math.nan, 1.0], dtype=F64),
        ),
        lambda: (
            torch.tensor([1 + 2j, -3j], dtype=torch.complex64),
            torch.tensor([1 + 2j, -3j], dtype=torch.complex128),
        ),
        lambda: (torch.tensor([1, -7], dtype=torch.int32), torch.tensor([1, -7], dtype=torch.int32)),
        lambda: (torch.tensor([True, False]), torch.tensor([True, False])),
    ],
)
def test_edge_case_values_pass(make):
    assert_precise(*make())


# ============================================================================================== the message


def _fp16_case():
    """The biggest absolute error (0.5 on 1000) is inside fp16's tolerance; the mismatched ones are smaller."""
    g = torch.tensor([[1000.0, 0.1, 5.0], [2.0, 3.0, 0.5]], dtype=F64)
    t = torch.tensor([[1000.5, 0.11, 5.0], [2.0, 3.004, 0.5005]], dtype=F16)
    return t, g


def test_message_reports_the_worst_mismatched_element():
    t, g = _fp16_case()
    # Beside 1000, an error of 0.01 is within fp16's rounding at the output's scale: a warning, not an error.
    msg = failure(t, g, fail_on="warning")
    assert msg.startswith("output: warning (torch.float16 vs golden torch.float64, shape (2, 3)): ")
    rtol, atol = DEFAULTS[F16]
    diff = (t.to(F64) - g).abs()
    mismatched = diff > atol + rtol * g.abs()
    k, n = int(mismatched.sum()), g.numel()
    assert k == 2  # 0.11 vs 0.1 and 3.004 vs 3.0; 1000.5 and 0.5005 are inside
    m = MISMATCHED.search(msg)
    assert m and (int(m[1]), int(m[2])) == (k, n) and float(m[3]) == pytest.approx(100 * k / n, abs=0.05)
    assert f"Mismatched elements: {k} / {n} (33.3%)" in msg
    found = greatest(msg)
    # greatest absolute difference among the mismatched elements: 0.01 at (0, 1), not 0.5 at (0, 0)
    err, idx, target, golden = found["absolute"]
    assert idx == (0, 1)
    assert target == float(t[0, 1]) and golden == 0.1
    assert err == pytest.approx(float(diff[0, 1]), rel=1e-5)
    # greatest relative difference among the mismatched elements: also (0, 1) (0.1 vs 0.0013 at (1, 1))
    err, idx, target, golden = found["relative"]
    assert idx == (0, 1) and err == pytest.approx(float(diff[0, 1] / 0.1), rel=1e-5)
    assert "Greatest absolute difference among them: " in msg and "Greatest relative difference among them: " in msg


def test_message_relative_and_absolute_worst_can_differ():
    g = torch.tensor([0.01, 100.0, 1.0, 7.0], dtype=F64)
    t = torch.tensor([0.02, 100.5, 1.0, 7.0], dtype=F64)  # rel 1.0 at 0, abs 0.5 at 1
    found = greatest(failure(t, g))
    assert found["absolute"][1] == (1,) and found["absolute"][0] == pytest.approx(0.5)
    assert found["absolute"][2:] == (100.5, 100.0)
    assert found["relative"][1] == (0,) and found["relative"][0] == pytest.approx(1.0)
    assert found["relative"][2:] == (0.02, 0.01)


def test_message_error_distribution_line():
    i = torch.arange(100, dtype=F64)
    g = torch.ones(100, dtype=F64)
    t = g + i * 2.0**-10  # errors 0 .. 99 / 1024 in float64
    msg = failure(t, g)
    m = ABS_LINE.search(msg)
    assert m, msg
    errors = (i * 2.0**-10).numpy()
    assert float(m[1]) == pytest.approx(errors.mean(), rel=5e-3)
    assert float(m[2]) == pytest.approx(np.percentile(errors, 99, method="inverted_cdf"), rel=5e-3)
    assert float(m[3]) == pytest.approx(errors.max(), rel=5e-3)
    assert m[4] == "torch.float64"
    # float64 ULP of a golden in [1, 2) is 2^-52
    assert float(m[5]) == pytest.approx(errors.mean() * 2.0**52, rel=5e-3)
    assert float(m[6]) == pytest.approx(errors.max() * 2.0**52, rel=5e-3)
    assert "Absolute error: mean " in msg and "; ULP" in msg


def test_message_ulp_in_the_target_dtype():
    g = torch.full((8,), 1.5, dtype=F64)
    t = g.to(BF16)
    t[3] = 1.5 + 16 * 2.0**-7  # 16 bf16 ULPs off
    m = ABS_LINE.search(failure(t, g))
    assert m[4] == "torch.bfloat16"
    assert float(m[6]) == pytest.approx(16.0) and float(m[5]) == pytest.approx(2.0)


def test_message_has_cosine_for_more_than_one_element_only():
    assert "Cosine similarity: " in failure(torch.tensor([1.0, 2.5]), torch.tensor([1.0, 2.0], dtype=F64))
    one = failure(torch.tensor([1.5]), torch.tensor([1.0], dtype=F64))
    assert "Cosine similarity" not in one
    assert "Mismatched elements: 1 / 1 (100.0%)" in one
    assert greatest(one)["absolute"] == (0.5, (0,), 1.5, 1.0)


# ===================================================================================== minimum tolerances


def _min_tolerances(msg: str) -> tuple[float, float, float, float]:
    m = MIN_TOL.search(msg)
    assert m, msg
    return tuple(float(x) for x in m.groups())


def _exact_minimum(t: torch.Tensor, g: torch.Tensor, rtol: float, atol: float) -> tuple[float, float]:
    e = (t.to(F64) - g).abs()
    need_atol = float((e - rtol * g.abs()).clamp(min=0).max())
    need_rtol = float(((e - atol).clamp(min=0) / g.abs()).max())
    return need_atol, need_rtol


TOL_CASES = {
    "fp32": (torch.tensor([1.0, 2.5, 3.0, 4.0]), torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)),
    "fp16": (torch.tensor([[10.0, 0.25], [3.0, 2.0]], dtype=F16), torch.tensor([[10.0, 0.2], [3.0, 2.0]], dtype=F64)),
    "bf16": (torch.tensor([1.0, 4.5, -2.0], dtype=BF16), torch.tensor([1.0, 4.0, -2.0], dtype=F64)),
    # minimum tolerances whose 3-digit round-to-nearest would fall below the true minimum
    "fp64-rounds-down": (torch.tensor([1.0, 2.0123444], dtype=F64), torch.tensor([1.0, 2.0], dtype=F64)),
    "fp32-rounds-down": (torch.tensor([0.5, 2.12345]), torch.tensor([0.5, 2.0], dtype=F64)),
}


@pytest.mark.parametrize("case", sorted(TOL_CASES))
def test_minimum_tolerance_matches_the_exact_minimum_to_3_digits(case):
    t, g = TOL_CASES[case]
    rtol, atol = DEFAULTS[t.dtype]
    atol_needed, rtol_with, rtol_needed, atol_with = _min_tolerances(failure(t, g))
    assert (rtol_with, atol_with) == pytest.approx((rtol, atol))
    exact_atol, exact_rtol = _exact_minimum(t, g, rtol, atol)
    assert atol_needed == pytest.approx(exact_atol, rel=5e-3)
    assert rtol_needed == pytest.approx(exact_rtol, rel=5e-3)


@pytest.mark.parametrize("case", sorted(TOL_CASES))
def test_minimum_tolerance_scaled_by_09_fails_assert_close(case):
    t, g = TOL_CASES[case]
    rtol, atol = DEFAULTS[t.dtype]
    atol_needed, _, rtol_needed, _ = _min_tolerances(failure(t, g))
    assert atol_needed > 0 and rtol_needed > 0
    assert not assert_close_passes(t, g, atol=0.9 * atol_needed, rtol=rtol)
    assert not assert_close_passes(t, g, atol=atol, rtol=0.9 * rtol_needed)


@pytest.mark.parametrize("case", sorted(TOL_CASES))
def test_minimum_tolerance_passes_assert_close(case):
    t, g = TOL_CASES[case]
    rtol, atol = DEFAULTS[t.dtype]
    atol_needed, _, rtol_needed, _ = _min_tolerances(failure(t, g))
    assert assert_close_passes(t, g, atol=atol_needed, rtol=rtol), atol_needed
    assert assert_close_passes(t, g, atol=atol, rtol=rtol_needed), rtol_needed


def test_minimum_rtol_is_inf_when_the_golden_is_zero_at_an_error():
    t = torch.tensor([0.0, 2.0**-10])
    g = torch.zeros(2, dtype=F64)
    atol_needed, _, rtol_needed, _ = _min_tolerances(failure(t, g))
    assert rtol_needed == math.inf
    assert atol_needed == pytest.approx(2.0**-10, rel=5e-3)
    assert assert_close_passes(t, g, atol=atol_needed, rtol=DEFAULTS[F32][0])


def test_minimum_tolerance_when_nothing_is_outside_assert_close():
    # bf16 rounding is inside assert_close's bf16 rtol: 0 mismatched, no "Greatest" lines; status warning
    g = torch.linspace(1, 2, 100, dtype=F64)
    msg = failure(g.to(BF16), g, fail_on="warning")
    assert msg.startswith("output: warning ")
    assert "Mismatched elements: 0 / 100 (0.0%)" in msg
    assert "Greatest" not in msg
    atol_needed, _, _, _ = _min_tolerances(msg)
    assert atol_needed == 0.0


# ============================================================================================ inf and nan


def test_nan_on_one_side():
    t = torch.tensor([1.0, math.nan, 3.0])
    g = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    msg = failure(t, g)
    assert msg.startswith("output: error ")
    assert "inf/nan mismatch at 1 position(s)" in msg
    assert "Mismatched elements: 1 / 3 (33.3%)" in msg
    assert "Non-finite mismatches: 1 element(s) hold inf/nan on one side only" in msg
    found = greatest(msg)
    assert found["absolute"][1] == (1,) and found["absolute"][0] == math.inf
    assert math.isnan(found["absolute"][2]) and found["absolute"][3] == 2.0


def test_nan_in_golden_only():
    msg = failure(torch.tensor([1.0, 2.0]), torch.tensor([1.0, math.nan], dtype=F64))
    assert "inf/nan mismatch" in msg and "index (1,)" in msg


def test_infinite_differences_are_reported_as_inf():
    msg = failure(torch.tensor([math.inf, 1.0]), torch.tensor([-math.inf, 1.0], dtype=F64))
    found = greatest(msg)
    assert found["absolute"][0] == math.inf
    assert found["relative"][0] == math.inf
    assert "Non-finite mismatches: 1 element(s)" in msg
    msg = failure(torch.tensor([math.nan, 1.0]), torch.tensor([2.0, 1.0], dtype=F64))
    assert greatest(msg)["relative"][0] == math.inf


def test_minimum_tolerance_is_not_claimed_for_a_nonfinite_mismatch():
    t = torch.tensor([math.nan, 1.0, 2.0])
    g = torch.tensor([2.0, 1.0, 2.0], dtype=F64)
    msg = failure(t, g)
    m = MIN_TOL.search(msg)
    if m is not None:
        atol_needed, rtol_with, rtol_needed, atol_with = (float(x) for x in m.groups())
        assert assert_close_passes(t, g, atol=atol_needed, rtol=rtol_with)
        assert assert_close_passes(t, g, atol=atol_with, rtol=rtol_needed)


def test_zero_golden_message():
    msg = failure(torch.tensor([0.0, 1e-3]), torch.tensor([1e-3, 0.0], dtype=F64))
    assert "cosine 0.000000 <= 0.99" in msg
    assert "Mismatched elements: 2 / 2 (100.0%)" in msg
    assert "rtol=inf" in msg


# ======================================================================================== nested structures


def test_nested_path_in_the_message():
    g = seeded(3, 4, seed=2)
    bad = g.float().clone()
    bad[2, 1] += 1.0
    msg = failure((g.float(), {"a": g.float(), "b": bad}), (g, {"a": g, "b": g}))
    assert msg.startswith("output[1]['b']: error (torch.float32 vs golden torch.float64, shape (3, 4))")
    assert "output[0]" not in msg and "output[1]['a']" not in msg
    assert greatest(msg)["absolute"][1] == (2, 1)


def test_every_failing_leaf_is_reported():
    g = seeded(5, seed=3)
    t = g.float() + 1.0
    msg = failure([t, [g.float(), t], {"k": (7, t)}], [g, [g, g], {"k": (8, g)}])
    for path in ("output[0]:", "output[1][1]:", "output[2]['k'][0]:", "output[2]['k'][1]:"):
        assert path in msg, path
    assert "output[1][0]" not in msg
    assert "value 7 != golden 8" in msg
    assert msg.count("Mismatched elements") == 3


@pytest.mark.parametrize(
    "actual, golden, text",
    [
        ((torch.ones(2),), (torch.ones(2, dtype=F64), torch.ones(2, dtype=F64)), "target has 1 items, golden 2"),
        ({"a": torch.ones(2)}, {"b": torch.ones(2, dtype=F64)}, "keys differ"),
        ([torch.ones(2)], torch.ones(2, dtype=F64), "type mismatch"),
        (torch.ones(2, 3), torch.ones(3, 2, dtype=F64), "shape mismatch"),
        (torch.ones(0), torch.ones(1, dtype=F64), "shape mismatch"),
    ],
)
def test_structure_mismatch_is_an_error_message(actual, golden, text):
    msg = failure(actual, golden)
    assert msg.startswith("output")
    assert ": error" in msg.splitlines()[0]
    assert text in msg


def test_nested_structure_mismatch_path():
    g = torch.ones(2, dtype=F64)
    msg = failure((torch.ones(2), [torch.ones(2), torch.ones(2)]), (g, [g]))
    assert msg.startswith("output[1]: error") and "target has 2 items, golden 1" in msg


# ===================================================================================== scalars, ints, complex


def test_python_float_failure():
    msg = failure(3.0, 3.1)
    assert msg.startswith("output: error (<class 'float'> vs golden <class 'float'>)")
    assert "max abs error 0.1" in msg


@pytest.mark.parametrize(
    "actual, golden, text",
    [
        (3, 4, "value 3 != golden 4"),
        (True, False, "value True != golden False"),
        (True, 1, "value True != golden 1"),
        ("a", "b", "value 'a' != golden 'b'"),
    ],
)
def test_python_value_failures(actual, golden, text):
    assert text in failure(actual, golden)


def test_int_tensor_failure_names_the_element():
    msg = failure(torch.tensor([[1, 2], [3, 4]]), torch.tensor([[1, 2], [3, 5]]))
    assert "output: error (torch.int64 vs golden torch.int64, shape (2, 2))" in msg
    assert "1/4 elements differ" in msg and "index (1, 1)" in msg and "target 4, golden 5" in msg
    assert "Mismatched elements" not in msg  # exact comparison, no tolerance report


def test_bool_tensor_failure():
    msg = failure(torch.tensor([True, False, True]), torch.tensor([True, True, True]))
    assert "1/3 elements differ" in msg and "index (1,)" in msg


def test_complex_failure_reports_real_and_imaginary_parts():
    t = torch.tensor([1 + 1j, 2j], dtype=torch.complex64)
    g = torch.tensor([1 + 1j, 2.5j], dtype=torch.complex128)
    msg = failure(t, g)
    assert "torch.complex64 vs golden torch.complex128" in msg
    assert "Mismatched elements: 1 / 4 (25.0%)" in msg
    assert greatest(msg)["absolute"] == (0.5, (1, 1), 2.0, 2.5)  # element 1, imaginary part
    assert_precise(g.to(torch.complex64), g)


# ============================================================================================= fail_on


def test_fail_on_warning_fails_on_warnings():
    g = seeded(32, 32, seed=4)
    t = g.to(BF16)  # correctly rounded bf16 at unit scale: warning under default
    assert_precise(t, g)  # fail_on="error": a warning passes
    msg = failure(t, g, fail_on="warning")
    assert msg.startswith("output: warning (torch.bfloat16 vs golden torch.float64")
    assert "what bf16 explains: within its rounding" in msg
    assert_precise(t, g, fail_on="warning", max_abs=1.0)  # compare options pass through


@pytest.mark.parametrize("fail_on", ["pass", "SKIP", "Error", "", "errors", None])
def test_invalid_fail_on_raises_value_error(fail_on):
    g = seeded(4)
    with pytest.raises(ValueError, match="fail_on"):
        assert_precise(g, g, fail_on=fail_on)


def test_compare_options_reach_the_standard():
    g = torch.full((16,), 1.5, dtype=F64)
    t = torch.nextafter(g.float(), torch.full((16,), 2.0))  # 1 fp32 ULP off
    assert_precise(t, g, standard="ulp")
    msg = failure(t, g, standard="binary")
    assert "differ from the correctly rounded golden" in msg
    with pytest.raises(ValueError, match="reference"):
        assert_precise(t, g, standard="benchmark")
    assert_precise(t, g, standard="benchmark", reference=t.clone())
    assert_precise(g.float() + 1.0, g, max_abs=2.0, cosine=0.5)
    with pytest.raises(ValueError, match="standard"):
        assert_precise(t, g, standard="nope")


def test_a_failing_assert_precise_in_pytest_leads_with_the_users_line_and_the_verdict(tmp_path):
    """pytest printed about 25 lines of precheck's own source and tensors before the message: its frames are
    hidden (``__tracebackhide__``), so the user's line and the verdict lead."""
    (tmp_path / "test_kernel.py").write_text(
        "import torch\nfrom precheck import assert_precise\n\n\n"
        "def test_my_kernel():\n"
        "    golden = torch.linspace(-1, 1, 64, dtype=torch.float64)\n"
        "    assert_precise(golden.float() * 1.01, golden)  # the user's line\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_kernel.py"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:]
    assert "assert_precise(golden.float() * 1.01, golden)  # the user's line" in done.stdout
    said = [line for line in done.stdout.splitlines() if line.startswith("E ")]
    assert said[0].split(maxsplit=1)[1].startswith("AssertionError: output: error (torch.float32 vs golden")
    assert "precheck/grader/assertion.py" not in done.stdout and "def assert_precise(" not in done.stdout


def test_precheck_and_assert_close_worst_elements_are_named_apart():
    """One message named two different "worst" elements: precheck's is the largest absolute error over every
    element, assert_close's the greatest among the elements outside its tolerance."""
    golden = torch.tensor([1000.0, 0.01, 0.5], dtype=F64)
    actual = torch.tensor([1008.0, 0.02, 0.5]).bfloat16()  # 8 off within bf16's rtol at 0; 0.01 off at 1
    with pytest.raises(AssertionError) as e:
        assert_precise(actual, golden)
    msg = str(e.value)
    assert "(largest absolute error at index (0,): target 1008.0, golden 1000.0)" in msg and "worst at" not in msg
    assert "Greatest absolute difference among them: 0.0100195 at index (1,)" in msg


def test_a_ratio_printed_beside_its_limit_reads_above_it():
    """ "error 2x the honest kernel's (normwise, 2x allowed)" graded error: the ratio gets the digits that show it
    is above the limit."""
    from precheck.grader.honest import above

    assert above(2.0004, 2.0) == "2.0004" and above(89.2, 2.0) == "89.2" and above(8.00001, 8) == "8.00001"


def test_astronomical_ulps_at_golden_values_near_zero_say_why():
    torch.manual_seed(0)
    golden = torch.randn(1000, dtype=F64) * 1e-3
    golden[:500] = 1e-40  # a bf16 gradient's golden below bf16's smallest normal: one ULP there is 2**-133
    actual = (golden + 1e-4 * torch.randn(1000, dtype=F64)).bfloat16()
    with pytest.raises(AssertionError) as e:
        assert_precise(actual, golden)
    assert "(msprobe's ULP: near zero one ULP is 9.18e-41, so small errors there count as many)" in str(e.value)
