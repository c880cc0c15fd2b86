"""Outputs larger than one chunk of the metric pass: the columns must be those of the whole tensor graded at once
(counts, maxima and places exactly, sums to the CSV's 14 printed decimals), wherever the interesting elements fall."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from precheck.grader import compare, float_metrics, metrics
from precheck.grader.limits import accumulative_regime

SUMS = {"cosine", "rmse", "mean_rel_err", "ulp_mean", "error_norm", "error_sum"}  # rounding follows summation order


def _whole(monkeypatch: pytest.MonkeyPatch, *args) -> metrics.Metrics:
    with monkeypatch.context() as m:
        m.setattr(metrics, "CHUNK", 1 << 30)
        return float_metrics(*args)


def _assert_same(chunked: metrics.Metrics, whole: metrics.Metrics) -> None:
    for f in dataclasses.fields(whole):
        a, b = getattr(chunked, f.name), getattr(whole, f.name)
        if f.name in SUMS and b is not None:
            assert a == pytest.approx(b, rel=1e-13, abs=1e-15), f.name
        else:
            assert a == b, f.name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("accumulative", [False, True])
def test_chunked_columns_are_the_whole_tensors(monkeypatch: pytest.MonkeyPatch, dtype, accumulative):
    monkeypatch.setattr(metrics, "CHUNK", 1000)
    gen = torch.Generator().manual_seed(5)
    n = 4321  # four full chunks and a short one
    golden = torch.randn(n, dtype=torch.float64, generator=gen) * 10.0 ** torch.randint(-8, 3, (n,), generator=gen)
    target = (
        golden.to(dtype)
        if dtype != torch.float64
        else golden * (1 + 1e-14 * torch.randn(n, dtype=torch.float64, generator=gen))
    )
    regime = accumulative_regime(dtype) if accumulative else None
    chunked = float_metrics(target, golden, dtype, regime)
    _assert_same(chunked, _whole(monkeypatch, target, golden, dtype, regime))
    assert chunked.ulp_max > 0 and chunked.max_rel_err > 0 and chunked.small_value_err_ratio is not None


def test_worst_element_and_first_nonfinite_mismatch_are_found_in_any_chunk(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(metrics, "CHUNK", 100)
    golden = torch.linspace(-1, 1, 1000, dtype=torch.float64)
    target = golden.clone()
    target[250] += 0.5  # the largest error, twice: the first one is reported
    target[870] += 0.5
    target[640], golden[930] = float("nan"), float("inf")
    target[420] = golden[420] = float("nan")  # agrees
    m = float_metrics(target, golden, torch.float64)
    assert (m.worst_index, m.max_abs_err) == (250, pytest.approx(0.5))
    assert (m.nonfinite_mismatches, m.first_nonfinite_mismatch) == (2, 640)
    assert m.inf_nan_err_ratio == pytest.approx(2 / 3)
    _assert_same(m, _whole(monkeypatch, target, golden, torch.float64))
    result = compare(target, golden)
    assert result.status == "error" and "first at index (640,)" in result.message


def test_large_complex_output_is_graded_as_interleaved_parts(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(metrics, "CHUNK", 64)
    golden = torch.randn(30, 20, dtype=torch.complex128, generator=torch.Generator().manual_seed(1))
    target = golden.to(torch.complex64).conj()  # a conjugate view, as fft outputs can be
    m = float_metrics(target, golden.conj(), torch.complex64)
    _assert_same(m, _whole(monkeypatch, target, golden.conj(), torch.complex64))
    assert m.cosine == pytest.approx(1.0, abs=1e-12) and m.binary_mismatch == 0.0


def test_ulp_just_below_a_power_of_two_uses_that_binade():
    """log2 of the largest double below 2^k rounds to k; the spacing there is the smaller binade's."""
    golden = torch.tensor([4.0 * (1 - 2.0**-53), 0.75], dtype=torch.float64)
    target = golden.to(torch.bfloat16)
    spacing = torch.tensor([2.0 ** (1 - 7), 2.0 ** (-1 - 7)], dtype=torch.float64)
    m = float_metrics(target, golden, torch.bfloat16)
    assert m.ulp_max == pytest.approx(float(((target.double() - golden).abs() / spacing).max()), rel=1e-15)


@pytest.mark.parametrize("scale", [1e-300, 1.0, 1e300])
def test_cosine_of_huge_tiny_and_partly_zero_outputs_over_chunks(monkeypatch: pytest.MonkeyPatch, scale):
    """Chunks taken on the values themselves and chunks scaled by their max-abs (values whose squares would
    overflow or vanish) combine into the whole tensor's cosine; a chunk of zeros on one side counts as zeros."""
    monkeypatch.setattr(metrics, "CHUNK", 100)
    gen = torch.Generator().manual_seed(9)
    golden = torch.randn(450, dtype=torch.float64, generator=gen) * scale
    target = golden + 0.1 * scale * torch.randn(450, dtype=torch.float64, generator=gen)
    target[100:200] = 0.0
    expected = float(torch.dot(target / scale, golden / scale) / (target / scale).norm() / (golden / scale).norm())
    assert float_metrics(target, golden, torch.float64).cosine == pytest.approx(expected, rel=1e-12)
    assert float_metrics(torch.zeros(450, dtype=torch.float64), golden, torch.float64).cosine == 0.0
