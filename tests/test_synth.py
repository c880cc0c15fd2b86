"""precheck.inputs.synth: tensors rebuilt from recorded Max/Min/Mean/Norm (statistics-mode dumps), their seeding, the
InputBuilder that wires them in, and run_ut end to end on the real statistics dump.

The property tests compute a real tensor's statistics the way msprobe records them (max, min, mean and L2 norm of
the dtype's values, here in float64), rebuild a tensor from them and check the guarantees of synth's docstring.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import forward_rec, real_dump_json, tensor_rec
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from precheck.dump.records import Stats, TensorSpec, load_dump
from precheck.execution.options import CheckOptions
from precheck.inputs.builder import InputBuilder, InputError
from precheck.inputs.synth import rng_for, synthesize
from precheck.inputs.synth_large import LARGE
from precheck.run_ut import run_ut

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.int32, torch.int64]
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GPT2_STATS = real_dump_json("gpt2_bf16_statistics")
RANDOM_OPS = ("dropout", "scaled_dot_product_attention")
SEED0 = "inputs generated from statistics (seed 0)"


# ------------------------------------------------------------------------------------------------- helpers


def stats_of(t: torch.Tensor) -> Stats:
    """What msprobe records: max, min, mean and L2 norm of the dtype's values (computed here in float64)."""
    d = t.double()
    return Stats(float(d.max()), float(d.min()), float(d.mean()), float(d.norm()))


def spec_of(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(dtype=t.dtype, shape=tuple(t.shape), stats=stats_of(t))


def spec(stats: Stats, dtype=torch.float32, shape=(1000,), data_name=None) -> TensorSpec:
    return TensorSpec(
        dtype=dtype, shape=tuple(shape), stats=Stats(*stats) if isinstance(stats, tuple) else stats, data_name=data_name
    )


def make(s: TensorSpec, seed: int = 0, case: str = "Torch.case.0", where: str = "input_args[0]", int_floor=None):
    return synthesize(s, rng_for(seed, case, where), int_floor)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits, so equality is bit for bit (nan == nan, -0.0 != 0.0)."""
    if t.dtype.is_floating_point:
        return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.dtype.itemsize])
    return t


def assert_moments_met(out: torch.Tensor, want: Stats) -> None:
    """synth's guarantee for jointly feasible statistics: exact Max/Min; the mean within 1e-3 relative, or within
    one rounding step at the tensor's RMS (rms * eps of the dtype) for a mean that is zero up to rounding; the norm
    within 1e-3 relative."""
    got = stats_of(out)
    assert got.max == want.max and got.min == want.min, (got, want)
    rms = want.norm / math.sqrt(out.numel())
    eps = torch.finfo(out.dtype).eps
    mean_err = abs(got.mean - want.mean)
    assert mean_err <= 1e-3 * abs(want.mean) or mean_err <= rms * eps, (
        f"mean {got.mean!r} vs recorded {want.mean!r}: error {mean_err:.3g} > 1e-3 rel and > rms*eps {rms * eps:.3g}"
    )
    assert abs(got.norm - want.norm) <= 1e-3 * want.norm, f"norm {got.norm!r} vs recorded {want.norm!r}"


@st.composite
def shapes(draw, lo: int = 2, hi: int = 2000) -> tuple[int, ...]:
    n = draw(st.integers(lo, hi))
    d = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
    return draw(st.sampled_from([(n,), (d, n // d), (1, d, n // d)]))


# Largest |value| per dtype, as a power of ten the dtype holds with room to spare (fp16 tops out at 65504).
_SCALE_EXP = {torch.float16: (-3, 4), torch.bfloat16: (-20, 20), torch.float32: (-20, 20), torch.float64: (-50, 50)}


@st.composite
def real_tensors(draw, lo: int = 2, hi: int = 2000) -> torch.Tensor:
    """A tensor like a real activation or weight: a continuous law around mu with spread sigma, scaled so its
    largest magnitude is 10**k, a power the dtype represents as a normal number. Tensors with two distinct values
    are generated separately (tested below with fixed examples)."""
    dtype = draw(st.sampled_from(FLOATS))
    shape = draw(shapes(lo, hi))
    kind = draw(st.sampled_from(["normal", "uniform", "lognormal", "laplace", "student"]))
    mu = draw(st.floats(-1.0, 1.0))
    sigma = draw(st.floats(1e-3, 1.0))
    k = draw(st.integers(*_SCALE_EXP[dtype]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = math.prod(shape)
    z = {
        "normal": lambda: rng.standard_normal(n),
        "uniform": lambda: rng.uniform(-1, 1, n),
        "lognormal": lambda: rng.lognormal(0, 1, n),
        "laplace": lambda: rng.laplace(0, 1, n),
        "student": lambda: rng.standard_t(3, n),
    }[kind]()
    raw = mu + sigma * z
    raw = raw / np.abs(raw).max() * 10.0**k
    t = torch.from_numpy(raw.reshape(shape)).to(dtype)
    assume(len(torch.unique(t)) != 2 or n == 2)
    return t


# ------------------------------------------------------------------------ 1. feasible statistics, property


@SETTINGS
@given(real_tensors())
def test_feasible_statistics_are_met(t):
    want = spec_of(t)
    out, note = synthesize(want, rng_for(0, "Torch.prop.0", "input_args[0]"))
    assert tuple(out.shape) == tuple(t.shape) and out.dtype == t.dtype
    assert bool(torch.isfinite(out).all())
    got = stats_of(out)
    assert got.max == want.stats.max and got.min == want.stats.min
    assert note == "", note  # statistics of a real tensor are feasible: no fallback note
    assert_moments_met(out, want.stats)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_feasible_statistics_on_a_large_realistic_tensor(dtype):
    t = torch.from_numpy(np.random.default_rng(3).normal(1e-4, 0.02, (256, 768))).to(dtype)
    out, note = make(spec_of(t))
    assert note == ""
    assert_moments_met(out, stats_of(t))
    # the body spreads like an activation, not piled on the bounds: most values well inside the range
    s = stats_of(t)
    inside = ((out.double() > s.min / 2) & (out.double() < s.max / 2)).double().mean()
    assert float(inside) > 0.9


def assert_met_for_every_key(t: torch.Tensor, keys=range(50)) -> None:
    """The guarantee for 50 fixed random streams: deterministic, and a miss on any stream is a miss."""
    misses = []
    for key in keys:
        out, note = make(spec_of(t), seed=key)
        try:
            assert_moments_met(out, stats_of(t))
        except AssertionError as e:
            misses.append(f"seed {key}: {str(e).splitlines()[0]} (note {note!r})")
    assert not misses, f"{len(misses)} of {len(keys)} streams miss: " + "; ".join(misses[:3])


# Feasible statistics whose values crowd the bounds (a two-valued tensor, a float mask, a sparse ReLU output, a
# small tensor with values close to Max and Min): the cases an affine rescale plus clip alone does not meet.


@pytest.mark.parametrize(
    "values, dtype",
    [
        pytest.param([0.0, 0.0, 1.0, 1.0], torch.float32, id="two-valued-n4"),  # norm 1.22 for 1.41
        pytest.param([0.0, 0.0, 0.0, 1.0, 1.0], torch.float16, id="two-valued-n5"),  # mean 0.46 for 0.40
        pytest.param([0.0, 0.0, 0.0, 0.5, -123.0, -124.0], torch.float16, id="near-bounds-n6"),
        pytest.param([0.0, 3.0, 6.0, 7.0, 8.0, -9.0, -10.0], torch.float32, id="distinct-n7"),  # mean 0.7117, 0.7143
    ],
)
def test_small_tensor_statistics_minimal_examples(values, dtype):
    assert_met_for_every_key(torch.tensor(values, dtype=dtype))


def test_float_attention_mask_statistics_are_met():
    # An additive attention mask as a float tensor: 0 where attended, -10000 where masked (10% here).
    t = torch.zeros(1000)
    t[:100] = -10000.0
    assert_met_for_every_key(t, keys=range(3))  # today: mean about -1989 for -1000 on every stream


def test_sparse_relu_output_statistics_are_met():
    # relu(normal(-2, 1)): 2% of the 2000 values positive, the rest on Min = 0. Mean up to 1.5% off.
    t = torch.from_numpy(np.maximum(np.random.default_rng(0).normal(-2.0, 1.0, 2000), 0.0)).float()
    assert_met_for_every_key(t, keys=range(10))


def test_small_bf16_norm_survives_rounding():
    t = torch.tensor(
        [0.1337890625, -0.138671875, -0.8125, -0.3046875, 0.2431640625, -0.95703125, 0.75, 0.70703125],
        dtype=torch.bfloat16,
    )
    assert_met_for_every_key(t.double())  # the float64 body is fine...
    assert_met_for_every_key(t)  # ...and so is the bf16 tensor once rounding's effect on the norm is repaired


@pytest.mark.parametrize(
    "values, dtype",
    [([0.1, 0.1, 0.1, 0.0], torch.float32), ([10.0] * 9 + [9.9375], torch.bfloat16)],
    ids=["fp32", "bf16"],
)
def test_no_infeasible_note_for_a_body_on_a_bound(values, dtype):
    t = torch.tensor(values, dtype=dtype)
    out, note = make(spec_of(t))
    assert_moments_met(out, stats_of(t))  # the tensor is right...
    assert note == ""  # ...but the Message says the dump's statistics are inconsistent


# Above LARGE elements the tensor is drawn and fitted at a linear cost (synth_large): the same guarantees.

_BIG = LARGE + 4099  # an odd size on the large path


def _big(kind: str, dtype: torch.dtype) -> torch.Tensor:
    rng = np.random.default_rng(5)
    raw = {
        "normal": lambda: rng.normal(0.01, 1.0, _BIG),
        "zero-mean": lambda: rng.uniform(-1.0, 1.0, _BIG),  # mean zero up to the dtype's noise
        "lognormal": lambda: rng.lognormal(0.0, 1.0, _BIG),
        "narrow": lambda: rng.normal(3.0, 1e-3, _BIG),  # the mean 3000 standard deviations from zero
        "sparse-relu": lambda: np.maximum(rng.normal(-2.0, 1.0, _BIG), 0.0) - 0.375,  # 2% above Min, 98% on it
        "float-mask": lambda: np.where(rng.random(_BIG) < 0.1, -10000.0, 0.0),  # two-valued
        "clamped": lambda: np.clip(rng.normal(0.3, 1.0, _BIG), -0.75, 1.0),  # hardtanh: 30% on the bounds
    }[kind]()
    return torch.from_numpy(raw).to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", ["normal", "zero-mean", "lognormal", "narrow", "sparse-relu", "float-mask", "clamped"])
def test_large_tensor_statistics_are_met(kind, dtype):
    t = _big(kind, dtype)
    for seed in range(3):
        out, note = make(spec_of(t), seed=seed)
        assert note == "" and out.dtype == dtype and out.shape == t.shape
        assert_moments_met(out, stats_of(t))
    if kind == "float-mask":  # still a mask: the recorded count of each value
        assert int((out == -10000).sum()) == int((t == -10000).sum())


@pytest.mark.parametrize("dtype", INTS)
def test_large_integer_tensor_statistics_are_met(dtype):
    t = torch.from_numpy(np.random.default_rng(6).integers(-7, 300, _BIG)).to(dtype)
    out, note = make(spec_of(t))
    got, want = stats_of(out), stats_of(t)
    assert note == "" and out.dtype == dtype
    assert (got.max, got.min) == (want.max, want.min)
    assert abs(got.mean - want.mean) <= 1e-3 * abs(want.mean) and abs(got.norm - want.norm) <= 1e-3 * want.norm


def test_a_large_tensor_is_rebuilt_within_three_float64_copies_of_memory(monkeypatch):
    # A 25.7M-element input took 8.5 float64 copies of itself (and 13 s of one core per 10M elements): a ResNet
    # step held GBs per worker. benchmarks/bench_synth.py measures it in a fresh process (peak resident set).
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from bench_synth import measure, recorded_stats

    shape = [2, 1024, 1024]
    stats = recorded_stats(tuple(shape), torch.bfloat16)
    r = measure("bfloat16", shape, stats)
    assert r["got"][:2] == stats[:2] and r["note"] == ""
    assert r["peak"] <= 3 * 8 * math.prod(shape), f"{r['peak'] / (8 * math.prod(shape)):.2f} float64 copies"


# ---------------------------------------------------------------------------------- 2. integers and bools


@SETTINGS
@given(
    st.sampled_from(INTS),
    shapes(2, 2000),
    st.integers(-(10**6), 10**6),
    st.integers(0, 10**6),
    st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_integers_are_whole_within_bounds_and_hit_both(dtype, shape, lo, width, seed, moments):
    x = torch.from_numpy(np.random.default_rng(seed).integers(lo, lo + width, size=shape, endpoint=True)).to(dtype)
    s = stats_of(x)
    if not moments:
        s = Stats(s.max, s.min, None, None)
    out, _ = make(spec(s, dtype, shape))
    assert out.dtype == dtype and tuple(out.shape) == tuple(shape)
    d = out.double()
    assert float(d.max()) == s.max and float(d.min()) == s.min
    assert bool(((d >= s.min) & (d <= s.max)).all())


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("moments", [(None, None), (150.0, 200.0)], ids=["no-moments", "moments"])
def test_ignore_index_sentinel_keeps_class_ids_valid(dtype, moments):
    s = spec(Stats(496.0, -100.0, *moments), dtype, (4000,))
    out, _ = make(s, int_floor=0)
    v = out.long()
    assert out.dtype == dtype
    assert bool(((v == -100) | ((v >= 0) & (v <= 496))).all()), v[(v != -100) & ((v < 0) | (v > 496))]
    assert int(v.max()) == 496 and int(v.min()) == -100
    assert int(((v >= 0) & (v <= 496)).sum()) > 3000  # the sentinel is the exception, not the rule


@pytest.mark.parametrize("n, mean", [(1, 1.0), (2, 0.5), (10, 0.3), (1000, 0.0625), (1000, 0.5), (999, 0.999)])
def test_bool_share_of_true_follows_mean(n, mean):
    any_true, any_false = mean > 0, mean < 1
    out, note = make(spec(Stats(float(any_true), float(not any_false), mean, None), torch.bool, (n,)))
    assert out.dtype == torch.bool and out.shape == (n,)
    assert abs(out.double().mean().item() - mean) <= 1.0 / n + 1e-12
    assert bool(out.any()) == any_true and bool((~out).any()) == any_false


@pytest.mark.parametrize("shape", [(2,), (3, 7), (4096,)])
def test_bool_with_max_true_and_min_false_holds_both(shape):
    out, _ = make(spec(Stats(1.0, 0.0, None, None), torch.bool, shape))
    assert out.dtype == torch.bool and tuple(out.shape) == shape
    assert bool(out.any()) and bool((~out).any())


@given(n=st.integers(2, 300), data=st.data())
def test_a_mask_without_a_recorded_share_gets_the_count_its_output_implies(n, data):
    count = data.draw(st.integers(1, n - 1))
    out, _ = synthesize(spec(Stats(1.0, 0.0, None, None), torch.bool, (n,)), rng_for(0, "x", "m"), true_count=count)
    assert int(out.sum()) == count


@pytest.mark.parametrize("max_, min_", [(0.0, 0.0), (1.0, 1.0)], ids=["all-false", "all-true"])
def test_bool_constant_from_max_min(max_, min_):
    out, _ = make(spec(Stats(max_, min_, None, None), torch.bool, (500,)))
    assert bool((out == bool(max_)).all())


@pytest.mark.parametrize(
    "api, mask_shape, out_shape",
    [
        ("Tensor.__getitem__", (6,), (4, 5)),  # x[mask]: one row of x per True
        ("Tensor.__getitem__", (6, 5), (11,)),
        ("Torch.masked_select", (6, 5), (13,)),
    ],
)
def test_statistics_masks_select_the_recorded_number_of_rows(write_dump, tmp_path, api, mask_shape, out_shape):
    # msprobe records a bool tensor's Max and Min only: the count of True comes from the output's length.
    x = tensor_rec("torch.float32", (6, 5), Max=2.0, Min=-2.0, Mean=0.1, Norm=5.0, requires_grad=True)
    mask = tensor_rec("torch.bool", mask_shape, Max=True, Min=False, Mean=None, Norm=None)
    out = tensor_rec("torch.float32", out_shape, Max=2.0, Min=-2.0, Mean=0.1, Norm=3.0)
    grad_out = tensor_rec("torch.float32", out_shape, Max=1.0, Min=-1.0, Mean=0.0, Norm=2.0)
    grad_x = tensor_rec("torch.float32", (6, 5), Max=1.0, Min=-1.0, Mean=0.0, Norm=2.0)
    path = write_dump(
        {
            f"{api}.0.forward": {"input_args": [x, mask], "input_kwargs": {}, "output": [out]},
            f"{api}.0.backward": {"input": [grad_out], "output": [grad_x]},
        },
        task="statistics",
    )
    summary = run_ut(path, tmp_path / "out", device="cpu", workers=1)
    result = summary.results[0]
    assert (result.forward, result.backward) == ("pass", "pass"), result.message


@pytest.mark.parametrize("max_, min_", [(False, False), (True, True)], ids=["all-false", "all-true"])
def test_bool_constant_mask_read_from_a_dump(write_dump, max_, min_):
    rec = tensor_rec("torch.bool", (4, 64), Max=max_, Min=min_, Mean=None, Norm=None)
    path = write_dump(
        {"Torch.logical_not.0.forward": {"input_args": [rec], "input_kwargs": {}, "output": [rec]}}, task="statistics"
    )
    s = load_dump(path).cases[0].args[0]
    out, _ = make(s)
    assert bool((out == max_).all()), f"{out.double().mean().item():.2f} True for a recorded all-{max_} mask"


# ------------------------------------------------------------------------------------------- 3. edge cases


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_empty_tensor_with_null_stats(dtype):
    out, note = make(spec(Stats(None, None, None, None), dtype, (0, 3)))
    assert out.shape == (0, 3) and out.dtype == dtype and note == ""


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32])
def test_one_element(dtype):
    out, note = make(spec(Stats(3.0, 3.0, 3.0, 3.0), dtype, (1, 1)))
    assert out.shape == (1, 1) and out.dtype == dtype and note == ""
    assert out.item() == 3.0


@pytest.mark.parametrize("dtype", FLOATS)
def test_max_equal_min_is_a_constant_tensor(dtype):
    n = 257
    out, note = make(spec(Stats(-0.75, -0.75, -0.75, 0.75 * math.sqrt(n)), dtype, (n,)))
    assert out.dtype == dtype and note == ""
    assert bool((out == -0.75).all())


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_two_elements_are_max_and_min(dtype):
    out, note = make(spec(Stats(3.0, -1.0, 1.0, math.sqrt(10.0)), dtype, (2,)))
    assert sorted(out.tolist()) == [-1.0, 3.0] and note == ""


def _check_few(count: int, n: int) -> None:
    assert 1 <= count and (count <= 3 or count < 0.01 * n), f"{count} of {n}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [3, 1000])
def test_inf_max_places_a_few_inf(dtype, n):
    out, note = make(spec(Stats(math.inf, -2.0, math.inf, math.inf), dtype, (n,)))
    assert out.dtype == dtype and out.shape == (n,)
    _check_few(int(torch.isposinf(out).sum()), n)
    assert not bool(torch.isnan(out).any()) and not bool(torch.isneginf(out).any())
    assert float(out[torch.isfinite(out)].double().min()) == -2.0  # the finite recorded Min is still exact
    assert "non-finite" in note


@pytest.mark.parametrize("n", [3, 1000])
def test_minus_inf_min_places_a_few_minus_inf(n):
    out, _ = make(spec(Stats(5.0, -math.inf, -math.inf, math.inf), torch.bfloat16, (n,)))
    _check_few(int(torch.isneginf(out).sum()), n)
    assert not bool(torch.isposinf(out).any()) and not bool(torch.isnan(out).any())
    assert float(out[torch.isfinite(out)].double().max()) == 5.0


def test_both_infinities():
    out, _ = make(spec(Stats(math.inf, -math.inf, math.nan, math.inf), torch.float32, (1000,)))
    _check_few(int(torch.isposinf(out).sum()), 1000)
    _check_few(int(torch.isneginf(out).sum()), 1000)
    assert int((~torch.isfinite(out)).sum()) <= 3


@pytest.mark.parametrize(
    "shape, stats",
    [
        pytest.param((), (math.nan,) * 4, id="0d-nan"),  # a scalar loss that went nan
        pytest.param((1,), (math.inf, math.inf, math.inf, math.inf), id="1-inf"),
        pytest.param((1,), (-math.inf, -math.inf, -math.inf, math.inf), id="1-minus-inf"),
        pytest.param((1,), (math.inf, -2.0, math.inf, math.inf), id="1-inf-max"),
        pytest.param((1,), (1.0, -1.0, math.nan, 2.0), id="1-nan-mean"),
        pytest.param((2,), (math.inf, -math.inf, math.nan, math.inf), id="2-both-inf"),
        pytest.param((3,), (math.inf, -math.inf, math.nan, math.inf), id="3-both-inf-and-nan"),
    ],
)
def test_non_finite_stats_filling_the_tensor(shape, stats):
    out, _ = make(spec(Stats(*stats), torch.float32, shape))
    assert tuple(out.shape) == shape and not bool(torch.isfinite(out).any())


def test_run_ut_survives_a_nan_scalar(write_dump, tmp_path):
    scalar = tensor_rec("torch.float32", [], Max="nan", Min="nan", Mean="nan", Norm="nan")
    ok = tensor_rec("torch.float32", [4])
    path = write_dump(
        {
            "Torch.tanh.0.forward": {"input_args": [ok], "input_kwargs": {}, "output": [ok]},
            "Torch.tanh.1.forward": {"input_args": [scalar], "input_kwargs": {}, "output": [scalar]},
        },
        task="statistics",
    )
    summary = run_ut(path, tmp_path / "out", device="cpu", workers=1)
    assert [r.name for r in summary.results] == ["Torch.tanh.0", "Torch.tanh.1"]


def test_inf_max_on_two_elements_keeps_min():
    out, _ = make(spec(Stats(math.inf, -2.0, math.inf, math.inf), torch.float32, (2,)))
    assert sorted(out.tolist()) == [-2.0, math.inf]


@pytest.mark.parametrize(
    "stats",
    [(math.nan,) * 4, (2.0, math.nan, math.nan, math.nan), (1.0, -1.0, math.nan, 3.0)],
    ids=["all-nan", "min-nan", "mean-nan"],
)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_nan_stats_hold_a_nan_and_a_finite_rest(stats, dtype):
    n = 500
    out, note = make(spec(Stats(*stats), dtype, (n,)))
    nan = torch.isnan(out)
    _check_few(int(nan.sum()), n)
    assert bool(torch.isfinite(out[~nan]).all())
    assert "non-finite" in note


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mean, norm", [(0.0, 10.0), (5.0, 60.0), (None, 3.0), (0.1, None)])
def test_missing_max_min_does_not_crash(dtype, mean, norm):
    out, note = make(spec(Stats(None, None, mean, norm), dtype, (10, 10)))
    assert out.shape == (10, 10) and out.dtype == dtype
    assert bool(torch.isfinite(out).all())
    assert note  # the guess is disclosed


def test_missing_max_min_bounds_are_guessed_from_mean_and_norm():
    s = Stats(None, None, 5.0, 60.0)  # n = 100: rms 6, standard deviation sqrt(11)
    out, note = make(spec(s, torch.float32, (100,)))
    got = stats_of(out)
    assert abs(got.mean - 5.0) <= 5e-3 and abs(got.norm - 60.0) <= 6e-2, (got, note)  # today: mean 0.98, norm 10


# ------------------------------------------------------------------------------ 4. infeasible statistics

INFEASIBLE = {
    "mean-above-max": Stats(1.0, -1.0, 5.0, 10.0),
    "mean-below-min": Stats(2.0, 1.0, 0.5, 15.0),
    "norm-too-large-for-range": Stats(1.0, -1.0, 0.0, 11.0),  # norm^2 121 > n * 1^2 = 100
    "norm-too-small-for-mean": Stats(1.0, 0.0, 0.5, 4.0),  # norm^2 16 < n * 0.5^2 = 25
    "norm-below-max-and-min": Stats(1.0, -1.0, 0.0, 0.5),  # Max and Min alone have norm sqrt(2)
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(INFEASIBLE))
def test_infeasible_statistics_fall_back_with_a_note(name, dtype):
    s = INFEASIBLE[name]
    out, note = make(spec(s, dtype, (100,)))
    d = out.double()
    assert float(d.max()) == s.max and float(d.min()) == s.min
    assert bool(((d >= s.min) & (d <= s.max)).all())
    assert "infeasible statistics" in note


def test_infeasible_note_reaches_the_builder_message(tmp_path):
    builder = InputBuilder(tmp_path, "Torch.mul.0", seed=3)
    builder.build((spec(INFEASIBLE["mean-above-max"]),), "input_args")
    assert builder.describe().startswith("inputs generated from statistics (seed 3); input_args[0]: infeasible")


# ------------------------------------------------------------------------------------------ 5. determinism

DET_SPECS = {
    "fp32": spec(Stats(0.5, -0.25, 0.01, 5.0), torch.float32, (50, 20)),
    "bf16": spec(Stats(0.5, -0.25, 0.01, 5.0), torch.bfloat16, (1000,)),
    "int64": spec(Stats(496.0, 1.0, None, None), torch.int64, (2, 16)),
    "bool": spec(Stats(1.0, 0.0, 0.3, None), torch.bool, (64,)),
    "nan": spec(Stats(math.nan, math.nan, math.nan, math.nan), torch.float16, (300,)),
}


@pytest.mark.parametrize("name", list(DET_SPECS))
def test_same_key_gives_bit_identical_tensors(name):
    s = DET_SPECS[name]
    a, note_a = make(s, 7, "Torch.addmm.3", "input_args[1]")
    b, note_b = make(s, 7, "Torch.addmm.3", "input_args[1]")
    assert torch.equal(bits(a), bits(b)) and note_a == note_b


@pytest.mark.parametrize("name", ["fp32", "bf16", "int64", "bool"])
@pytest.mark.parametrize(
    "other",
    [
        (8, "Torch.addmm.3", "input_args[1]"),
        (7, "Torch.addmm.4", "input_args[1]"),
        (7, "Torch.addmm.3", "input_args[2]"),
        (7, "Torch.addmm.3", "input_kwargs.x"),
    ],
    ids=["seed", "case", "where", "kwarg"],
)
def test_different_key_gives_different_tensors(name, other):
    s = DET_SPECS[name]
    a, _ = make(s, 7, "Torch.addmm.3", "input_args[1]")
    b, _ = make(s, *other)
    assert not torch.equal(bits(a), bits(b))


def test_key_parts_do_not_run_together():
    # ("1", "2x") and ("12", "x") must not share a stream: the parts are separated, not concatenated.
    a = rng_for(1, "2x", "w").random(4)
    b = rng_for(12, "x", "w").random(4)
    c = rng_for(1, "2", "xw").random(4)
    assert not np.array_equal(a, b) and not np.array_equal(a, c)


def _case_tree():
    return (
        spec(Stats(0.5, -0.25, 0.01, 5.0), torch.float32, (8, 8)),
        {"w": spec(Stats(2.0, -2.0, 0.0, 10.0), torch.bfloat16, (40,))},
    )


def test_one_api_stream_does_not_depend_on_other_apis(tmp_path):
    alone = InputBuilder(tmp_path, "Torch.B.0", seed=5).build(_case_tree(), "input_args")
    first = InputBuilder(tmp_path, "Torch.A.0", seed=5)
    first.build(_case_tree(), "input_args")
    first.build(_case_tree(), "input_kwargs")
    after = InputBuilder(tmp_path, "Torch.B.0", seed=5).build(_case_tree(), "input_args")
    assert torch.equal(bits(alone[0]), bits(after[0])) and torch.equal(bits(alone[1]["w"]), bits(after[1]["w"]))
    # ...and the first argument's draw does not shift the second's: B's w equals a w generated on its own
    w_only, _ = make(_case_tree()[1]["w"], 5, "Torch.B.0", "input_args[1].w")
    assert torch.equal(bits(alone[1]["w"]), bits(w_only))


# ------------------------------------------------------------------------------------------ 6. InputBuilder


def test_builder_generates_statistics_only_specs(tmp_path):
    tree = (
        spec(Stats(1.0, -1.0, 0.0, 5.0), torch.float32, (4, 5)),
        3,
        None,
        (spec(Stats(9.0, 0.0, None, None), torch.int64, (6,)), "x"),
        {"mask": spec(Stats(1.0, 0.0, None, None), torch.bool, (2, 2))},
    )
    builder = InputBuilder(tmp_path, "Torch.where.0", seed=11)
    assert builder.describe() == ""
    out = builder.build(tree, "input_args")
    assert builder.generated == 3
    assert out[1] == 3 and out[2] is None and out[3][1] == "x"
    assert out[0].shape == (4, 5) and out[0].dtype == torch.float32
    assert out[3][0].dtype == torch.int64 and out[4]["mask"].dtype == torch.bool
    # each tensor is the one its own (seed, case, place) stream gives
    expected, _ = make(tree[3][0], 11, "Torch.where.0", "input_args[3][0]")
    assert torch.equal(out[3][0], expected)
    kw = builder.build({"other": spec(Stats(1.0, -1.0, 0.0, 5.0), torch.float32, (4, 5))}, "input_kwargs")
    assert builder.generated == 4 and kw["other"].shape == (4, 5)
    assert "seed 11" in builder.describe() and builder.describe().startswith("inputs generated from statistics")


def test_builder_applies_int_floors_by_place(tmp_path):
    target = spec(Stats(496.0, -100.0, None, None), torch.int64, (2000,))
    builder = InputBuilder(tmp_path, "Functional.cross_entropy.0", int_floors={"input_kwargs.target": 0})
    out = builder.build({"target": target}, "input_kwargs")["target"]
    assert bool(((out == -100) | ((out >= 0) & (out <= 496))).all())
    unfloored = InputBuilder(tmp_path, "Functional.cross_entropy.0").build((target,), "input_args")[0]
    assert bool(((unfloored > -100) & (unfloored < 0)).any())  # the floor is what keeps those out


def test_force_random_generates_even_with_data_name(tmp_path):
    tree = (spec(Stats(1.0, -1.0, 0.0, 5.0), torch.float32, (4, 5), data_name="Torch.mul.0.forward.input.0.pt"),)
    builder = InputBuilder(tmp_path, "Torch.mul.0", seed=2, force_random=True)
    out = builder.build(tree, "input_args")  # tmp_path holds no files: must not try to load
    assert builder.generated == 1 and out[0].shape == (4, 5)
    assert "seed 2" in builder.describe()


def test_missing_file_raises_without_force_random(tmp_path):
    tree = (spec(Stats(1.0, -1.0, 0.0, 5.0), torch.float32, (4, 5), data_name="Torch.mul.0.forward.input.0.pt"),)
    builder = InputBuilder(tmp_path, "Torch.mul.0")
    with pytest.raises(InputError, match="Torch.mul.0.forward.input.0.pt"):
        builder.build(tree, "input_args")
    assert builder.generated == 0 and builder.describe() == ""


def test_saved_file_is_loaded_not_generated(tmp_path):
    saved = torch.arange(20, dtype=torch.float32).reshape(4, 5)
    torch.save(saved, tmp_path / "x.pt")
    builder = InputBuilder(tmp_path, "Torch.mul.0")
    out = builder.build((spec(Stats(1.0, -1.0, 0.0, 5.0), torch.float32, (4, 5), data_name="x.pt"),), "input_args")
    assert torch.equal(out[0], saved) and builder.generated == 0 and builder.describe() == ""


# ------------------------------------------------------------------------------------------- 7. end to end


def _rows(path: Path) -> list[str]:
    return path.read_bytes().decode("utf-8-sig").split("\r\n")


def _forward_names() -> list[str]:
    data = json.loads(GPT2_STATS.read_text())["data"]
    return [k.removesuffix(".forward") for k in data if k.endswith(".forward")]


@pytest.fixture(scope="module")
def serial_seed0(tmp_path_factory):
    return run_ut(GPT2_STATS, tmp_path_factory.mktemp("seed0"), device="cpu", workers=1)


def test_statistics_dump_is_graded_with_generated_inputs(serial_seed0):
    results = serial_seed0.results
    assert [r.name for r in results] == _forward_names()
    for r in results:
        assert r.forward in ("pass", "warning", "error"), (r.name, r.forward, r.message)
        assert SEED0 in r.message, (r.name, r.message)
    random_ops = [r for r in results if any(op in r.name for op in RANDOM_OPS)]
    assert len(random_ops) == 7 and len(results) == 47  # 5 dropouts and 2 attentions draw masks
    assert all(r.forward == "pass" and r.details[0].comparison.standard == "statistical" for r in random_ops)


def test_same_seed_gives_identical_csvs(serial_seed0, tmp_path):
    again = run_ut(GPT2_STATS, tmp_path, device="cpu", workers=1)
    assert again.details_path != serial_seed0.details_path  # two files, same bytes
    assert again.details_path.read_bytes() == serial_seed0.details_path.read_bytes()
    assert again.result_path.read_bytes() == serial_seed0.result_path.read_bytes()


def test_other_seed_changes_some_metric(serial_seed0, tmp_path):
    other = run_ut(GPT2_STATS, tmp_path, device="cpu", workers=1, options=CheckOptions(seed=1))
    rows0 = [r.split(",") for r in _rows(serial_seed0.details_path)[1:] if r]
    rows1 = [r.split(",") for r in _rows(other.details_path)[1:] if r]
    assert [r[0] for r in rows0] == [r[0] for r in rows1]
    changed = [a[0] for a, b in zip(rows0, rows1) if a[4:21] != b[4:21]]
    assert changed, "seed 1 gave the same metrics as seed 0 on every row"
    messages = [r.message for r in other.results if r.forward != "SKIP"]
    assert all("inputs generated from statistics (seed 1)" in m for m in messages)


def test_pool_gives_the_serial_rows(serial_seed0, tmp_path, monkeypatch):
    pooled = run_ut(GPT2_STATS, tmp_path, device="cpu", workers=2, backend="process")
    assert pooled.details_path.read_bytes() == serial_seed0.details_path.read_bytes()
    assert pooled.result_path.read_bytes() == serial_seed0.result_path.read_bytes()


def test_one_api_alone_gets_the_inputs_it_gets_in_the_full_run(serial_seed0, tmp_path):
    doc = json.loads(GPT2_STATS.read_text())
    keep = "Torch.addmm.3"
    doc["data"] = {k: v for k, v in doc["data"].items() if k.startswith(keep + ".")}
    assert len(doc["data"]) == 2
    alone_json = tmp_path / "dump.json"
    alone_json.write_text(json.dumps(doc))
    alone = run_ut(alone_json, tmp_path / "out", device="cpu", workers=1)
    full_rows = [r for r in _rows(serial_seed0.details_path) if r.startswith(keep + ".")]
    alone_rows = [r for r in _rows(alone.details_path) if r.startswith(keep + ".")]
    assert full_rows and alone_rows == full_rows


@pytest.mark.parametrize(
    ("dtype", "lowest"), [("torch.float32", -3.4028234663852886e38), ("torch.bfloat16", -3.3895313892515355e38)]
)
def test_a_masks_output_whose_mean_msprobe_summed_to_inf_is_graded_on_the_rest(write_dump, tmp_path, dtype, lowest):
    """msprobe sums in the tensor's dtype: a causal mask of the dtype's lowest value is recorded with Mean -inf and
    Norm inf beside Max 0 and a finite Min. --target recorded graded such an output an error ("a non-finite value
    the golden does not hold"); the golden's own values, summed as msprobe sums them, give the same infinities."""
    mask = tensor_rec(dtype, [1, 1, 8, 8], Max=0.0, Min=lowest, Mean=-math.inf, Norm=math.inf)
    path = write_dump({"Torch.clone.0.forward": forward_rec(mask, output=[mask])}, task="statistics")
    (row,) = run_ut(path, tmp_path / "out", device="cpu", workers=1, options=CheckOptions(target="recorded")).results
    assert row.forward == "pass", row.message
    assert "non-finite" not in row.message


# Statistics no tensor holds, and recorded outputs the call cannot make: (input, output) of Torch.tanh on 4 values.
_TANH = {"Max": 0.9, "Min": -0.5, "Mean": 0.2, "Norm": 1.1}
ODD_RECORDS = {
    "Torch.tanh.1": ({"Mean": math.inf}, {}, "input_args[0]: statistics no tensor holds (Mean inf beside a finite"),
    "Torch.tanh.2": ({"Norm": math.inf}, {}, "input_args[0]: statistics no tensor holds (Norm inf beside a finite"),
    "Torch.tanh.3": ({"Max": -0.5, "Min": 0.9}, {}, "(Max -0.5 below Min 0.9): Max and Min read swapped"),
    "Torch.tanh.4": ({}, {"Mean": math.inf}, "recorded output 0: Mean inf beside a finite Max and Min"),
    "Torch.tanh.5": ({}, {"Norm": math.inf}, "recorded output 0: Norm inf beside a finite Max and Min"),
    "Torch.tanh.6": ({}, {"Max": -0.5, "Min": 0.9}, "recorded output 0: Max -0.5 below Min 0.9"),
    "Torch.tanh.7": ({}, {"shape": [7]}, "recorded output 0: shape (7,), the call makes (4,)"),
}
# The call's own dtype is known where it runs (the golden's float64 and its casts of integers say nothing of it).
ODD_DTYPE = ({}, {"dtype": "torch.int64"}, "recorded output 0: dtype torch.int64, the call makes torch.float32")


@pytest.mark.parametrize("target", ["device", "recorded"])
def test_statistics_no_tensor_holds_and_outputs_the_call_cannot_make_are_said(write_dump, tmp_path, target):
    """An infinite Mean or Norm beside finite bounds, a Max below its Min, a recorded output of a shape (or, where
    the call runs, a dtype) the call cannot make: each is named in the row's Message. --target recorded grades an
    output on its recorded statistics, so one no tensor can have (Max below Min) is a SKIP row saying why; an odd
    Mean or Norm is left ungraded; a shape is said, not refused (a generated input may change a data-dependent
    shape such as argwhere's)."""

    def record(odd: dict) -> dict:
        fields = {**_TANH, **odd}
        return tensor_rec(fields.pop("dtype", "torch.float32"), fields.pop("shape", [4]), **fields)

    odd_records = {**ODD_RECORDS, "Torch.tanh.8": ODD_DTYPE} if target == "device" else ODD_RECORDS
    data = {"Torch.tanh.0.forward": forward_rec(record({}), output=[record({})])}
    for name, (inputs, outputs, _) in odd_records.items():
        data[f"{name}.forward"] = forward_rec(record(inputs), output=[record(outputs)])
    path = write_dump(data, task="statistics")
    options = CheckOptions(target=target)
    rows = {r.name: r for r in run_ut(path, tmp_path / "out", device="cpu", workers=1, options=options).results}
    assert "statistics no tensor holds" not in rows["Torch.tanh.0"].message
    assert "recorded output" not in rows["Torch.tanh.0"].message
    for name, (_, outputs, said) in odd_records.items():
        assert said in rows[name].message, (name, rows[name].message)
        assert (rows[name].forward == "SKIP") == (target == "recorded" and "Max" in outputs), (name, rows[name])


def test_a_mask_whose_sum_overflows_its_dtype_carries_no_note(write_dump, tmp_path):
    """A float16 mask of finfo.min summed by the recorder in float16 has Mean -inf and Norm inf beside Max 0 and
    Min -65504: what its dtype's range gives, not statistics no tensor holds. Its pass rows carried "Mean -inf
    beside a finite Max and Min" as their Message."""
    mask = tensor_rec("torch.float16", [64, 64], Max=0.0, Min=-65504.0, Mean=-math.inf, Norm=math.inf)
    out = tensor_rec("torch.float16", [64, 64], Max=0.0, Min=-65504.0, Mean=-math.inf, Norm=math.inf)
    path = write_dump({"Tensor.clone.0.forward": forward_rec(mask, output=[out])}, task="statistics")
    (row,) = run_ut(path, tmp_path / "out", device="cpu", workers=1).results
    assert "beside a finite Max and Min" not in row.message and "no tensor holds" not in row.message, row.message
