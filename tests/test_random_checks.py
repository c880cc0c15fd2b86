"""Statistical checks of random ops: real draws from torch pass, wrong outputs fail, unreadable calls say why."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st

from precheck.grader.laws.base import MIN_N, Finding, NotCheckable
from precheck.grader.laws.checks import BACKWARD_CHECKS, CHECKS

EXAMPLES = settings(max_examples=25, deadline=None)
SEEDS = st.integers(0, 2**31 - 1)
FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


def check(name: str, args: tuple, kwargs: dict, outputs: list) -> dict[str, Finding]:
    """The findings of one call by name; every message is one non-empty line."""
    found = CHECKS[name](args, kwargs, list(outputs))
    assert found, f"{name} returned no finding"
    for finding in found:
        assert finding.message and "\n" not in finding.message
    return {finding.what: finding for finding in found}


def failed(found: dict[str, Finding]) -> set[str]:
    return {what for what, finding in found.items() if not finding.passed}


def assert_passes(found: dict[str, Finding]) -> None:
    assert not failed(found), [f.message for f in found.values() if not f.passed]


def api(name: str):
    prefix, short = name.split(".")
    return getattr(F if prefix == "Functional" else torch, short)


def data(shape: tuple, dtype: torch.dtype, seed: int, zeros: float = 0.1) -> torch.Tensor:
    """Normal values with a share of exact zeros, which dropout cannot tell kept from dropped."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen)
    x[torch.rand(shape, generator=gen) < zeros] = 0
    return x.to(dtype)


def test_tables_name_the_random_apis():
    dropouts = {
        "Functional.dropout",
        "Functional.dropout1d",
        "Functional.dropout2d",
        "Functional.dropout3d",
        "Functional.alpha_dropout",
        "Functional.feature_alpha_dropout",
        "Torch.dropout",
        "Torch.feature_dropout",
        "Torch.alpha_dropout",
        "Torch.feature_alpha_dropout",
    }
    assert set(BACKWARD_CHECKS) == dropouts
    assert dropouts | {
        "Functional.rrelu",
        "Functional.rrelu_",
        "Functional.gumbel_softmax",
        "Functional.fractional_max_pool2d",
        "Functional.fractional_max_pool3d",
        "Functional.scaled_dot_product_attention",
        "Torch.randperm",
        "Tensor.uniform_",
    } <= set(CHECKS)


# ---------------------------------------------------------------------------------------------------- dropout

# (dump name, input shape, how the call passes x and p)
DROPOUTS = [
    ("Functional.dropout", (40, 30), lambda x, p: ((x, p), {})),
    ("Functional.dropout", (1200,), lambda x, p: ((x,), {"p": p, "training": True})),
    ("Torch.dropout", (40, 30), lambda x, p: ((x, p, True), {})),
    ("Functional.dropout1d", (60, 7), lambda x, p: ((x, p), {})),
    ("Functional.dropout1d", (6, 10, 7), lambda x, p: ((x,), {"p": p})),
    ("Functional.dropout2d", (6, 10, 3, 3), lambda x, p: ((x, p, True), {})),
    ("Functional.dropout3d", (60, 2, 2, 2), lambda x, p: ((x, p), {})),
    ("Functional.dropout3d", (6, 10, 2, 2, 2), lambda x, p: ((x, p), {})),
    ("Torch.feature_dropout", (6, 10, 4), lambda x, p: ((x, p, True), {})),
    ("Functional.alpha_dropout", (40, 30), lambda x, p: ((x, p), {"training": True})),
    ("Functional.feature_alpha_dropout", (6, 10, 4), lambda x, p: ((x, p, True), {})),
    ("Torch.alpha_dropout", (1200,), lambda x, p: ((x, p, True), {})),
    ("Torch.feature_alpha_dropout", (6, 10, 4), lambda x, p: ((x,), {"p": p, "train": True})),
]
DROPOUT_IDS = [f"{name}-{len(shape)}d" for name, shape, _ in DROPOUTS]


def dropout_call(spec: tuple, dtype: torch.dtype, p: float, seed: int, grad: bool = False) -> tuple:
    name, shape, call = spec
    x = data(shape, dtype, seed).requires_grad_(grad)
    args, kwargs = call(x, p)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = api(name)(*args, **kwargs)
    return name, x, args, kwargs, out


@pytest.mark.parametrize("spec", DROPOUTS, ids=DROPOUT_IDS)
@EXAMPLES
@given(seed=SEEDS, p=st.sampled_from([0.05, 0.2, 0.5, 0.8]), dtype=st.sampled_from(FLOATS))
def test_dropout_draws_pass(spec, seed, p, dtype):
    name, _, args, kwargs, out = dropout_call(spec, dtype, p, seed)
    found = check(name, args, kwargs, [out])
    assert_passes(found)
    assert "survivors" in found and any(what.startswith("share") for what in found)


@pytest.mark.parametrize("spec", DROPOUTS, ids=DROPOUT_IDS)
@EXAMPLES
@given(seed=SEEDS, p=st.sampled_from([0.1, 0.5, 0.9]), dtype=st.sampled_from(FLOATS))
def test_dropout_gradients_pass(spec, seed, p, dtype):
    name, x, args, kwargs, out = dropout_call(spec, dtype, p, seed, grad=True)
    grad_out = torch.randn(out.shape).to(dtype)
    out.backward(grad_out)
    [finding] = BACKWARD_CHECKS[name](args, kwargs, [out.detach()], [grad_out], {0: x.grad})
    assert finding.passed, finding.message


def test_dropout_that_drops_another_share_fails():
    x = data((200, 100), torch.float32, 1)
    keep = torch.rand(x.shape, generator=torch.Generator().manual_seed(2)) >= 0.5
    found = check("Functional.dropout", (x, 0.3), {}, [torch.where(keep, x / 0.7, 0)])
    assert failed(found) == {"share of zeros"}
    assert "outside 30%" in found["share of zeros"].message and "nonzero inputs" in found["share of zeros"].message


def test_dropout_run_with_another_p_fails():
    x = data((200, 100), torch.float32, 3)
    assert "survivors" in failed(check("Functional.dropout", (x, 0.3), {}, [F.dropout(x, 0.5)]))


@pytest.mark.parametrize("dtype, factor", [(torch.float32, 1.0001), (torch.bfloat16, 1.03), (torch.float16, 1.004)])
def test_survivors_scaled_wrongly_fail(dtype, factor):
    x = data((50, 40), dtype, 4)
    out = (F.dropout(x, 0.4).double() * factor).to(dtype)
    assert failed(check("Functional.dropout", (x, 0.4), {}, [out])) == {"survivors"}


def test_feature_dropout_that_drops_single_elements_fails():
    x = data((8, 16, 5, 5), torch.float32, 5, zeros=0)
    found = check("Functional.dropout2d", (x, 0.5), {}, [F.dropout(x, 0.5)])
    assert "whole channels" in failed(found)


def test_alpha_dropout_with_another_dropped_value_fails():
    x, p = data((60, 50), torch.float32, 6), 0.2
    a = ((1 - p) * (1 + p * 1.7580993408473766**2)) ** -0.5
    keep = torch.rand(x.shape) >= p
    wrong = torch.where(keep, a * x - a * 1.7580993408473766 * p, -1.7580993408473766 * a * (1 + p))
    assert "survivors" in failed(check("Functional.alpha_dropout", (x, p, True), {}, [wrong]))


def test_calls_that_do_not_draw_are_checked_exactly():
    x = data((30, 30), torch.float32, 7)
    assert_passes(check("Functional.dropout", (x, 0.5, False), {}, [F.dropout(x, 0.5, False)]))
    assert_passes(check("Functional.alpha_dropout", (x, 0.5), {}, [x.clone()]))  # training defaults to False
    assert_passes(check("Torch.dropout", (x, 0.0, True), {}, [x.clone()]))
    assert failed(check("Functional.dropout", (x, 0.5, False), {}, [x * 1.0001])) == {"identity"}
    assert_passes(check("Functional.dropout", (x, 1.0), {}, [F.dropout(x, 1.0)]))
    assert_passes(check("Torch.alpha_dropout", (x, 1.0, True), {}, [torch.alpha_dropout(x, 1.0, True)]))
    assert failed(check("Functional.dropout", (x, 1.0), {}, [x])) == {"zeros"}


def test_dropout_gradients_that_ignore_the_mask_fail():
    x = data((40, 30), torch.float32, 8).requires_grad_()
    out = F.dropout(x, 0.4)
    grad_out = torch.randn(out.shape)
    mask = (out != 0).float()
    backward = BACKWARD_CHECKS["Functional.dropout"]
    for wrong in (grad_out * mask * 0.6, grad_out / 0.6, grad_out * (1 - mask) / 0.6):
        [finding] = backward((x, 0.4), {}, [out.detach()], [grad_out], {0: wrong})
        assert not finding.passed, finding.message
    [finding] = backward((x, 0.4, False), {}, [x.detach()], [grad_out], {0: grad_out * 2})
    assert not finding.passed


def test_dropout_calls_that_cannot_be_checked():
    x = torch.randn(10, 10)
    inplace = x.clone()
    with pytest.raises(NotCheckable, match="in place"):
        CHECKS["Functional.dropout"]((inplace,), {"p": 0.5, "inplace": True}, [F.dropout(inplace, 0.5, inplace=True)])
    with pytest.raises(NotCheckable, match="empty output"):
        CHECKS["Functional.dropout"]((torch.empty(0, 3), 0.5), {}, [torch.empty(0, 3)])
    with pytest.raises(NotCheckable, match="p is not a number"):
        CHECKS["Functional.dropout"]((x, "half"), {}, [x])
    with pytest.raises(NotCheckable, match="not floating point"):
        CHECKS["Functional.dropout"]((torch.ones(3, dtype=torch.int64),), {}, [torch.ones(3)])
    with pytest.raises(NotCheckable, match="2 dimensions"):
        CHECKS["Torch.feature_dropout"]((torch.randn(5), 0.5, True), {}, [torch.randn(5)])
    with pytest.raises(NotCheckable, match="gradient"):
        BACKWARD_CHECKS["Functional.dropout"]((x, 0.5), {}, [F.dropout(x, 0.5)], [torch.ones(10, 10)], {})


# ---------------------------------------------------------------------------------------------------- rrelu


@EXAMPLES
@given(
    seed=SEEDS,
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float64]),
    bounds=st.sampled_from([(1 / 8, 1 / 3), (0.0, 0.5), (0.25, 0.25)]),
    inplace=st.booleans(),
)
def test_rrelu_draws_pass(seed, dtype, bounds, inplace):
    x = data((3000,), dtype, seed)
    torch.manual_seed(seed)
    out = F.rrelu_(x.clone(), *bounds, training=True) if inplace else F.rrelu(x, *bounds, True)
    found = check("Functional.rrelu_" if inplace else "Functional.rrelu", (x, *bounds), {"training": True}, [out])
    assert_passes(found)
    assert {"positive inputs", "slopes", "mean"} <= set(found)


def test_rrelu_in_evaluation_uses_the_mean_slope():
    x = data((500,), torch.float32, 9)
    assert_passes(check("Functional.rrelu", (x,), {}, [F.rrelu(x)]))
    assert failed(check("Functional.rrelu", (x,), {}, [F.leaky_relu(x, 0.2)])) == {"slope"}


def test_rrelu_with_wrong_slopes_fails():
    x = data((3000,), torch.float32, 10)
    assert {"mean", "variance"} <= failed(check("Functional.rrelu", (x,), {"training": True}, [F.leaky_relu(x, 0.2)]))
    wide = F.rrelu(x, 0.05, 0.5, True)
    assert "slopes" in failed(check("Functional.rrelu", (x,), {"training": True}, [wide]))
    shifted = F.rrelu(x, training=True) + (x > 0) * 1e-3
    assert "positive inputs" in failed(check("Functional.rrelu", (x,), {"training": True}, [shifted]))


def test_rrelu_in_place_cannot_be_checked():
    x = torch.randn(100)
    with pytest.raises(NotCheckable, match="in place"):
        CHECKS["Functional.rrelu_"]((x,), {"training": True}, [F.rrelu_(x, training=True)])


# ---------------------------------------------------------------------------------------------------- gumbel softmax


@EXAMPLES
@given(
    seed=SEEDS,
    tau=st.sampled_from([0.1, 1.0, 5.0]),
    hard=st.booleans(),
    dim=st.sampled_from([-1, 0]),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
)
def test_gumbel_softmax_draws_pass(seed, tau, hard, dim, dtype):
    logits = (data((400, 6), torch.float32, seed, zeros=0) * 2).to(dtype)
    logits = logits if dim == -1 else logits.T.contiguous()
    torch.manual_seed(seed)
    found = check(
        "Functional.gumbel_softmax", (logits, tau, hard), {"dim": dim}, [F.gumbel_softmax(logits, tau, hard, dim=dim)]
    )
    assert_passes(found)
    assert ("one-hot" in found) == hard
    assert ("argmax law" in found) == (dtype != torch.bfloat16)


def test_gumbel_softmax_that_is_no_draw_fails():
    logits = torch.randn(400, 6) * 3
    soft = F.gumbel_softmax(logits)
    assert "sums" in failed(check("Functional.gumbel_softmax", (logits,), {}, [soft * 1.1]))
    two = F.gumbel_softmax(logits, hard=True)
    two[0, :2] = 1
    assert failed(check("Functional.gumbel_softmax", (logits,), {"hard": True}, [two])) == {"one-hot", "sums"}
    uniform = F.one_hot(torch.randint(0, 6, (400,)), 6).float()  # ignores the logits
    assert failed(check("Functional.gumbel_softmax", (logits,), {"hard": True}, [uniform])) == {"argmax law"}


def test_gumbel_softmax_with_nan_logits_cannot_be_checked():
    with pytest.raises(NotCheckable, match="NaN"):
        CHECKS["Functional.gumbel_softmax"]((torch.full((3, 4), math.nan),), {}, [torch.full((3, 4), math.nan)])


# ---------------------------------------------------------------------------------------------- fractional max pooling

POOLS = [
    ("Functional.fractional_max_pool2d", (2, 3, 13, 11), {"output_size": (6, 5)}),
    ("Functional.fractional_max_pool2d", (3, 12, 12), {"output_ratio": (0.5, 0.5)}),
    ("Functional.fractional_max_pool3d", (2, 2, 9, 8, 7), {"output_size": 4}),
    ("Functional.fractional_max_pool3d", (2, 9, 8, 8), {"output_ratio": (0.6, 0.5, 0.5)}),
]


@pytest.mark.parametrize("name, shape, size", POOLS)
@EXAMPLES
@given(seed=SEEDS, dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float64]), indices=st.booleans())
def test_fractional_max_pool_draws_pass(name, shape, size, seed, dtype, indices):
    x = data(shape, dtype, seed)
    torch.manual_seed(seed)
    out = api(name)(x, 2, **size, return_indices=indices)
    found = check(name, (x, 2), {**size, "return_indices": indices}, list(out) if indices else [out])
    assert_passes(found)
    assert ("indices" in found) == indices


def test_fractional_max_pool_with_foreign_values_fails():
    x = torch.randn(2, 3, 12, 12)
    out, idx = F.fractional_max_pool2d(x, 2, output_size=6, return_indices=True)
    kwargs = {"output_size": 6, "return_indices": True}
    assert failed(check("Functional.fractional_max_pool2d", (x, 2), kwargs, [out + 1e-3, idx])) == {"values", "indices"}
    assert failed(check("Functional.fractional_max_pool2d", (x, 2), kwargs, [out, idx.roll(1, -1)])) == {"indices"}
    assert failed(check("Functional.fractional_max_pool2d", (x, 2), {"output_size": 5}, [out])) == {"shape"}


def test_fractional_max_pool_without_a_size_cannot_be_checked():
    with pytest.raises(NotCheckable, match="neither"):
        CHECKS["Functional.fractional_max_pool2d"]((torch.randn(1, 4, 4), 2), {}, [torch.randn(1, 2, 2)])


# ---------------------------------------------------------------------------------------------------- samplers


def _fill(method: str, *params: float):
    """A Tensor in-place sampler call: args (self, *params) with self the filled tensor, as a dump records it."""

    def make(dtype: torch.dtype, n: int) -> tuple:
        t = torch.empty(n, dtype=dtype)
        return (t, *params), {}, getattr(t, method)(*params)

    return make


def _weights(n: int) -> torch.Tensor:
    return torch.tensor([[0.5, 0.2, 0.2, 0.1, 0.0], [1.0, 3.0, 0.0, 2.0, 4.0]])


# dump name -> make(dtype, n) -> (args, kwargs, output) with the global generator seeded
SAMPLERS = {
    "Torch.rand": lambda dt, n: (((n,),), {"dtype": dt}, torch.rand(n, dtype=dt)),
    "Torch.rand_like": lambda dt, n: ((torch.zeros(n, dtype=dt),), {}, torch.rand_like(torch.zeros(n, dtype=dt))),
    "Torch.randn": lambda dt, n: ((n,), {"dtype": dt}, torch.randn(n, dtype=dt)),
    "Torch.randn_like": lambda dt, n: ((torch.zeros(n, dtype=dt),), {}, torch.randn_like(torch.zeros(n, dtype=dt))),
    "Torch.randint": lambda dt, n: ((3, 17, (n,)), {"dtype": dt}, torch.randint(3, 17, (n,), dtype=dt)),
    "Torch.randint_like": lambda dt, n: (
        (torch.zeros(n, dtype=dt), 9),
        {},
        torch.randint_like(torch.zeros(n, dtype=dt), 9),
    ),
    "Torch.randperm": lambda dt, n: ((n,), {}, torch.randperm(n)),
    "Torch.normal": lambda dt, n: (
        (torch.linspace(-3, 3, n, dtype=dt), torch.linspace(0.5, 2, n, dtype=dt)),
        {},
        torch.normal(torch.linspace(-3, 3, n, dtype=dt), torch.linspace(0.5, 2, n, dtype=dt)),
    ),
    "Torch.bernoulli": lambda dt, n: (
        (torch.linspace(0, 1, n, dtype=dt),),
        {},
        torch.bernoulli(torch.linspace(0, 1, n, dtype=dt)),
    ),
    "Tensor.bernoulli": lambda dt, n: ((torch.zeros(n, dtype=dt), 0.3), {}, torch.zeros(n, dtype=dt).bernoulli(0.3)),
    "Tensor.bernoulli_": _fill("bernoulli_", 0.7),
    "Torch.poisson": lambda dt, n: ((torch.linspace(0, 6, n),), {}, torch.poisson(torch.linspace(0, 6, n))),
    "Torch.multinomial": lambda dt, n: ((_weights(n), n, True), {}, torch.multinomial(_weights(n), n, True)),
    "Tensor.multinomial": lambda dt, n: (
        (_weights(n), n),
        {"replacement": True},
        _weights(n).multinomial(n, replacement=True),
    ),
    "Tensor.uniform_": _fill("uniform_", -2.0, 5.0),
    "Tensor.normal_": _fill("normal_", 3.0, 0.5),
    "Tensor.exponential_": _fill("exponential_", 4.0),
    "Tensor.random_": _fill("random_", -4, 9),
    "Tensor.cauchy_": _fill("cauchy_", 1.0, 2.0),
    "Tensor.log_normal_": _fill("log_normal_", 0.5, 0.8),
    "Tensor.geometric_": _fill("geometric_", 0.2),
}
HALF_OK = {
    "Torch.rand",
    "Torch.rand_like",
    "Torch.randn",
    "Torch.randn_like",
    "Torch.randint",
    "Torch.randint_like",
    "Tensor.bernoulli_",
    "Tensor.uniform_",
    "Tensor.normal_",
    "Tensor.exponential_",
    "Tensor.random_",
    "Tensor.cauchy_",
    "Tensor.log_normal_",
    "Tensor.geometric_",
    "Torch.normal",
    "Torch.bernoulli",
}
MOMENTS = {"mean", "variance", "sum", "frequencies", "fixed points", "share below median"}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
@EXAMPLES
@given(seed=SEEDS, dtype=st.sampled_from(FLOATS), n=st.sampled_from([7, 60, 4000]))
def test_sampler_draws_pass(name, seed, dtype, n):
    dtype = dtype if name in HALF_OK else torch.float32
    torch.manual_seed(seed)
    args, kwargs, out = SAMPLERS[name](dtype, n)
    found = check(name, args, kwargs, [out])
    assert_passes(found)
    assert bool(MOMENTS & set(found)) == (n >= MIN_N)  # few draws: exact and range findings only


def test_randn_with_another_law_fails():
    torch.manual_seed(0)
    assert failed(check("Torch.randn", (4000,), {}, [torch.randn(4000) * 2])) == {"variance"}
    assert "mean" in failed(check("Torch.randn", (4000,), {}, [torch.randn(4000) + 0.5]))  # variance about 0 too
    assert failed(check("Torch.randn", (4000,), {}, [torch.rand(4000)])) == {"mean", "variance"}


def test_rand_outside_the_unit_interval_fails():
    torch.manual_seed(1)
    out = torch.rand(1000)
    out[3] = 1.0
    assert failed(check("Torch.rand", (1000,), {}, [out])) == {"range"}
    assert "range" in failed(check("Torch.rand", (1000,), {}, [torch.rand(1000) - 0.05]))
    assert "mean" in failed(check("Torch.rand", (4000,), {}, [torch.rand(4000) ** 1.1]))


def test_integer_samplers_out_of_range_fail():
    torch.manual_seed(2)
    assert "range" in failed(check("Torch.randint", (10, (500,)), {}, [torch.randint(0, 11, (500,))]))
    # 0..4 has the same mean square deviation about 4.5 as 0..9 (8.25): only the mean tells
    assert failed(check("Torch.randint", (0, 10, (4000,)), {}, [torch.randint(0, 5, (4000,))])) == {"mean"}
    t = torch.empty(500).random_(0, 10)
    assert "range" in failed(check("Tensor.random_", (t, 5), {}, [t]))
    assert "range" in failed(check("Tensor.random_", (t,), {}, [t - 0.5]))


def test_random_overloads_read_their_bounds():
    torch.manual_seed(3)
    for args, kwargs in (
        ((5,), {}),
        ((), {"to": 5}),
        ((2, 5), {}),
        ((2,), {"to": 5}),
        ((), {"from": 2, "to": 5}),
        ((), {}),
        ((7, None), {}),
    ):
        t = torch.empty(300, dtype=torch.bfloat16)
        t.random_(*args, **kwargs)
        assert_passes(check("Tensor.random_", (t, *args), kwargs, [t]))


def test_randperm_that_is_no_shuffle_fails():
    out = torch.randperm(100)
    out[5] = out[6]
    assert failed(check("Torch.randperm", (100,), {}, [out])) == {"permutation"}
    assert failed(check("Torch.randperm", (100,), {}, [torch.arange(100)])) == {"fixed points"}
    assert failed(check("Torch.randperm", (100,), {}, [torch.randperm(99)])) == {"permutation"}


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((torch.zeros(3000), torch.ones(3000)), {}),
        ((torch.full((3000,), 2.0),), {"std": 0.5}),
        ((1.0, torch.full((3000,), 3.0)), {}),
        ((-1.0, 2.0, (3000,)), {}),
        ((), {"mean": 4.0, "std": 0.1, "size": (50, 60)}),
    ],
)
def test_normal_overloads_pass_and_another_law_fails(args, kwargs):
    torch.manual_seed(4)
    out = torch.normal(*args, **kwargs)
    assert_passes(check("Torch.normal", args, kwargs, [out]))
    assert "variance" in failed(check("Torch.normal", args, kwargs, [out * 1.5 - out.mean() * 0.5]))


def test_normal_with_zero_std_is_exact():
    mean, std = torch.tensor([1.5, -2.0] * 50), torch.tensor([0.0, 1.0] * 50)
    out = torch.normal(mean, std)
    assert_passes(check("Torch.normal", (mean, std), {}, [out]))
    out[0] += 0.25
    assert "zero std" in failed(check("Torch.normal", (mean, std), {}, [out]))


def test_bernoulli_with_another_p_fails():
    torch.manual_seed(5)
    probs = torch.full((4000,), 0.4)
    assert failed(check("Torch.bernoulli", (probs,), {}, [torch.bernoulli(torch.full((4000,), 0.5))])) == {"sum"}
    x = torch.zeros(4000)
    assert failed(check("Tensor.bernoulli", (x,), {"p": 0.3}, [x.bernoulli(0.4)])) == {"sum"}
    t = torch.empty(4000).bernoulli_(0.6)
    assert failed(check("Tensor.bernoulli_", (t, probs), {}, [t])) == {"sum"}
    certain = torch.tensor([0.0, 1.0] * 20)
    assert failed(check("Torch.bernoulli", (certain,), {}, [1 - certain])) == {"certain draws"}
    assert "values" in failed(check("Torch.bernoulli", (probs,), {}, [torch.full((4000,), 0.4)]))


def test_poisson_with_other_rates_fails():
    torch.manual_seed(6)
    rates = torch.linspace(0, 5, 3000)
    assert failed(check("Torch.poisson", (rates,), {}, [torch.poisson(rates * 1.2)])) == {"sum"}
    assert "values" in failed(check("Torch.poisson", (rates,), {}, [torch.poisson(rates) + 0.5]))
    busy = torch.poisson(rates)
    busy[0] = 1
    assert failed(check("Torch.poisson", (rates,), {}, [busy])) == {"zero rates"}


def test_multinomial_without_replacement():
    torch.manual_seed(7)
    weights = torch.rand(50, 8)
    weights[:, 3] = 0
    out = torch.multinomial(weights, 5)
    assert_passes(check("Torch.multinomial", (weights, 5), {}, [out]))
    repeated = out.clone()
    repeated[0, 1] = repeated[0, 0]
    assert failed(check("Torch.multinomial", (weights, 5), {}, [repeated])) == {"repeats"}
    zero = out.clone()
    zero[2, 0] = 3
    assert "zero weights" in failed(check("Tensor.multinomial", (weights, 5), {}, [zero]))
    assert failed(check("Torch.multinomial", (weights, 5), {}, [out + 8])) == {"categories"}


def test_multinomial_with_replacement_follows_the_weights():
    torch.manual_seed(8)
    weights = torch.tensor([[0.6, 0.25, 0.1, 0.05], [0.1, 0.1, 0.1, 0.7]])
    uniform = torch.randint(0, 4, (2, 2000))
    assert failed(check("Torch.multinomial", (weights, 2000, True), {}, [uniform])) == {"frequencies"}
    few = torch.multinomial(weights, 5, True)  # too few draws per category for Pearson's statistic
    assert set(check("Torch.multinomial", (weights, 5, True), {}, [few])) == {"categories", "zero weights"}


@pytest.mark.parametrize(
    "name, params, wrong",
    [
        ("Tensor.uniform_", (-2.0, 5.0), lambda t: t.uniform_(-2.0, 5.5)),
        ("Tensor.normal_", (3.0, 0.5), lambda t: t.normal_(3.0, 0.6)),
        ("Tensor.exponential_", (4.0,), lambda t: t.exponential_(3.5)),
        ("Tensor.geometric_", (0.2,), lambda t: t.geometric_(0.22)),
        ("Tensor.cauchy_", (1.0, 2.0), lambda t: t.cauchy_(1.3, 2.0)),
        ("Tensor.log_normal_", (0.5, 0.8), lambda t: t.log_normal_(0.5, 0.9)),
        ("Tensor.random_", (-4, 9), lambda t: t.random_(-4, 8)),
        ("Tensor.bernoulli_", (0.7,), lambda t: t.bernoulli_(0.65)),
    ],
)
def test_in_place_samplers_with_other_parameters_fail(name, params, wrong):
    torch.manual_seed(9)
    t = wrong(torch.empty(20000))
    assert failed(check(name, (t, *params), {}, [t])), name


def test_sampler_calls_that_cannot_be_checked():
    cases = [
        ("Torch.randn", ((0,), {}, [torch.randn(0)]), "empty output"),
        ("Torch.randn", ((3,), {}, [torch.randn(3, dtype=torch.complex64)]), "complex"),
        ("Torch.normal", ((torch.zeros(3), -torch.ones(3)), {}, [torch.zeros(3)]), "negative"),
        ("Tensor.geometric_", ((torch.ones(3), 0.0), {}, [torch.ones(3)]), "probability"),
        ("Torch.multinomial", ((-torch.ones(4), 2), {}, [torch.zeros(2, dtype=torch.long)]), "non-negative"),
        ("Torch.randint", (((3,),), {}, [torch.zeros(3)]), "high bound"),
        (
            "Tensor.log_normal_",
            ((torch.ones(3, dtype=torch.half), 20.0, 1.0), {}, [torch.ones(3, dtype=torch.half)]),
            "range",
        ),
        ("Torch.bernoulli", ((torch.full((3,), 1.5),), {}, [torch.ones(3)]), "probabilities"),
    ]
    for name, (args, kwargs, outputs), reason in cases:
        with pytest.raises(NotCheckable, match=reason):
            CHECKS[name](args, kwargs, outputs)


# ---------------------------------------------------------------------------------------------------- attention


def attention_inputs(seed: int, dtype: torch.dtype, kv_heads: int = 4, length: int = 8, width: int = 16) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, 6, 16, generator=gen).to(dtype)
    k = torch.randn(2, kv_heads, length, 16, generator=gen).to(dtype)
    v = torch.randn(2, kv_heads, length, width, generator=gen).to(dtype)
    return q, k, v


ATTENTION_MODES = {
    "plain": lambda gen, dt: {},
    "bool mask": lambda gen, dt: {"attn_mask": torch.rand(6, 8, generator=gen) > 0.3},
    "float mask": lambda gen, dt: {"attn_mask": torch.randn(6, 8, generator=gen).to(dt)},
    "causal": lambda gen, dt: {"is_causal": True},
    "scale": lambda gen, dt: {"scale": 0.4},
}


@pytest.mark.parametrize("mode", sorted(ATTENTION_MODES))
@EXAMPLES
@given(seed=SEEDS, dtype=st.sampled_from(FLOATS), p=st.sampled_from([0.1, 0.4, 0.7]), kv_heads=st.sampled_from([4, 2]))
def test_attention_dropout_draws_pass(mode, seed, dtype, p, kv_heads):
    q, k, v = attention_inputs(seed, dtype, kv_heads)
    kwargs = {
        "dropout_p": p,
        "enable_gqa": kv_heads != 4,
        **ATTENTION_MODES[mode](torch.Generator().manual_seed(seed), dtype),
    }
    torch.manual_seed(seed)
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    found = check("Functional.scaled_dot_product_attention", (q, k, v), kwargs, [out])
    assert_passes(found)
    assert "recomputed output" in found


def test_attention_without_dropout_or_with_all_dropped():
    q, k, v = attention_inputs(1, torch.float32)
    out = F.scaled_dot_product_attention(q, k, v)
    assert_passes(check("Functional.scaled_dot_product_attention", (q, k, v), {}, [out]))
    assert failed(check("Functional.scaled_dot_product_attention", (q, k, v), {}, [out * 1.01])) == {
        "recomputed output"
    }
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    assert_passes(check("Functional.scaled_dot_product_attention", (q, k, v, None, 1.0), {}, [out]))


def test_attention_made_with_another_p_or_mask_fails():
    q, k, v = attention_inputs(2, torch.float32)
    torch.manual_seed(2)
    other_p = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    assert "recomputed output" in failed(
        check("Functional.scaled_dot_product_attention", (q, k, v), {"dropout_p": 0.6}, [other_p])
    )
    causal = F.scaled_dot_product_attention(q, k, v, dropout_p=0.4, is_causal=True)
    assert "recomputed output" in failed(
        check("Functional.scaled_dot_product_attention", (q, k, v), {"dropout_p": 0.4}, [causal])
    )


def test_attention_that_drops_another_share_fails():
    q, k, v = attention_inputs(3, torch.float32)
    weights = torch.softmax(q.double() @ k.double().transpose(-2, -1) / 4, -1)
    keep = torch.rand(weights.shape, generator=torch.Generator().manual_seed(3)) > 0.8  # drops 80%
    out = ((weights * keep / 0.7) @ v.double()).float()
    found = check("Functional.scaled_dot_product_attention", (q, k, v), {"dropout_p": 0.3}, [out])
    assert failed(found) == {"share of dropped weights"}


def test_attention_masks_that_cannot_be_recovered():
    q, k, v = attention_inputs(4, torch.float32, length=20)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    with pytest.raises(NotCheckable, match="L_k > E_v"):
        CHECKS["Functional.scaled_dot_product_attention"]((q, k, v, None, 0.5), {}, [out])
    q, k, v = attention_inputs(5, torch.float32)
    v[:, :, 1] = v[:, :, 0]
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    with pytest.raises(NotCheckable, match="linearly dependent"):
        CHECKS["Functional.scaled_dot_product_attention"]((q, k, v), {"dropout_p": 0.5}, [out])
    with pytest.raises(NotCheckable, match="query heads"):
        CHECKS["Functional.scaled_dot_product_attention"]((q, k[:, :3], v[:, :3]), {"dropout_p": 0.5}, [out])


# ------------------------------------------------------------------------------------------ multi-head attention

MHA = "Functional.multi_head_attention_forward"


def mha_inputs(seed: int, dtype: torch.dtype, batched: bool = True, length: int = 6) -> tuple[tuple, dict]:
    """Arguments (query .. in_proj_bias by position, the rest by name) of a 2-head attention of embed_dim 16
    (head_dim 8) over 5 queries, with biases; inputs small enough that bfloat16 logits keep a few bits."""
    gen = torch.Generator().manual_seed(seed)

    def r(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(shape, generator=gen) * scale).to(dtype)

    seq = (lambda n: (n, 2, 16)) if batched else (lambda n: (n, 16))
    args = (r(*seq(5), scale=0.5), r(*seq(length)), r(*seq(length)), 16, 2, r(48, 16, scale=0.25), r(48, scale=0.1))
    return args, {
        "bias_k": None,
        "bias_v": None,
        "add_zero_attn": False,
        "dropout_p": 0.5,
        "out_proj_weight": r(16, 16, scale=0.25),
        "out_proj_bias": r(16, scale=0.1),
    }


def _padding(gen: torch.Generator, batched: bool) -> torch.Tensor:
    mask = torch.rand((2, 6) if batched else (6,), generator=gen) < 0.3
    mask[..., 0] = False
    return mask


MHA_MODES = {
    "plain": lambda args, gen, batched: {},
    "bool mask": lambda args, gen, batched: {"attn_mask": torch.rand(5, 6, generator=gen) < 0.3},
    "float masks": lambda args, gen, batched: {
        "attn_mask": torch.randn(5, 6, generator=gen).to(args[0].dtype),
        "key_padding_mask": torch.zeros(_padding(gen, batched).shape, dtype=args[0].dtype).masked_fill(
            _padding(gen, batched), -math.inf
        ),
    },
    "padding": lambda args, gen, batched: {"key_padding_mask": _padding(gen, batched)},
    "bias_kv, zero attn": lambda args, gen, batched: {
        "bias_k": args[6][None, None, :16],
        "add_zero_attn": True,
        "bias_v": args[6][None, None, 16:32],
    },
    "separate weights": lambda args, gen, batched: {
        "use_separate_proj_weight": True,
        **dict(zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), args[5].chunk(3))),
    },
    "causal": lambda args, gen, batched: {"attn_mask": ~torch.ones(5, 6, dtype=torch.bool).tril(), "is_causal": True},
}
MHA_WEIGHTS = {"no weights": {"need_weights": False}, "averaged": {}, "per head": {"average_attn_weights": False}}


def mha_call(
    seed: int,
    dtype: torch.dtype,
    p: float,
    mode: str = "plain",
    weights: str = "no weights",
    batched: bool = True,
    **kwargs,
) -> tuple[tuple, dict, list]:
    """A recorded call (args, kwargs, outputs), its dropout drawn from the seed."""
    args, base = mha_inputs(seed, dtype, batched, kwargs.pop("length", 6))
    gen = torch.Generator().manual_seed(seed)
    kwargs = {**base, "dropout_p": p, **MHA_MODES[mode](args, gen, batched), **MHA_WEIGHTS[weights], **kwargs}
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return args, kwargs, list(F.multi_head_attention_forward(*args, **kwargs))


@pytest.mark.parametrize("mode", sorted(MHA_MODES))
@EXAMPLES
@given(
    seed=SEEDS,
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float64]),
    p=st.sampled_from([0.1, 0.5]),
    weights=st.sampled_from(sorted(MHA_WEIGHTS)),
    batched=st.booleans(),
)
@example(seed=207302839, dtype=torch.float32, p=0.1, weights="averaged", batched=True)
def test_mha_dropout_draws_pass(mode, seed, dtype, p, weights, batched):
    args, kwargs, outputs = mha_call(seed, dtype, p, mode, weights, batched)
    try:
        found = check(MHA, args, kwargs, outputs)
    except NotCheckable as e:  # bfloat16 leaves too few bits to recover a mask from the output; so does float32
        # when the heads' outputs are solved through a near-singular out_proj (seed 207302839: cond 4.6e5)
        singular = torch.linalg.svdvals(kwargs["out_proj_weight"].double())
        uncertain = dtype == torch.float32 and weights != "per head" and singular[0] > 1e4 * singular[-1]
        assert (dtype == torch.bfloat16 or uncertain) and "rounding noise" in str(e), e
        return
    assert_passes(found)
    assert "recomputed output" in found and ("attention weights" in found) == (weights != "no weights")


def test_mha_reads_the_mask_from_per_head_weights():
    """Per-head weights give the mask directly: no need for L_k <= head_dim, and bfloat16 gets checked."""
    args, kwargs, outputs = mha_call(1, torch.float32, 0.5, weights="per head", length=12)
    assert {"recomputed output", "share of dropped weights", "attention weights"} <= set(
        check(MHA, args, kwargs, outputs)
    )
    assert_passes(check(MHA, *mha_call(2, torch.bfloat16, 0.5, weights="per head")))
    assert_passes(check(MHA, *mha_call(3, torch.float32, 0.0, weights="averaged")))


def mha_by_hand(args: tuple, kwargs: dict, keep: torch.Tensor, factor: float) -> torch.Tensor:
    """attn_output of a batched call without masks computed with the dropout mask `keep` (N*H, L, S) and
    survivors scaled by `factor`."""
    query, key, value, _, _, weight, bias = args
    q, k, v = (
        F.linear(x, w, b).reshape(x.shape[0], -1, 8).transpose(0, 1)
        for x, w, b in zip((query, key, value), weight.chunk(3), bias.chunk(3))
    )
    attention = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(8), -1) * keep * factor @ v
    return F.linear(attention.transpose(0, 1).reshape(query.shape), kwargs["out_proj_weight"], kwargs["out_proj_bias"])


def test_mha_made_with_another_p_or_scale_fails():
    args, kwargs, _ = mha_call(4, torch.float32, 0.6)
    assert "recomputed output" in failed(check(MHA, args, kwargs, mha_call(4, torch.float32, 0.3)[2]))
    keep = torch.rand(4, 5, 6, generator=torch.Generator().manual_seed(4)) >= 0.6
    assert failed(check(MHA, args, kwargs, [mha_by_hand(args, kwargs, keep, 1.0), None]))  # survivors not scaled
    undropped = mha_call(4, torch.float32, 0.6, training=False)[2]
    assert "share of dropped weights" in failed(check(MHA, args, kwargs, undropped))
    args, kwargs, _ = mha_call(4, torch.float32, 0.6, weights="per head")
    undropped = mha_call(4, torch.float32, 0.6, weights="per head", training=False)[2]
    assert {"attention weights", "share of dropped weights"} <= failed(check(MHA, args, kwargs, undropped))


def test_mha_that_drops_another_share_fails():
    args, kwargs, _ = mha_call(5, torch.float32, 0.3)
    keep = torch.rand(4, 5, 6, generator=torch.Generator().manual_seed(5)) > 0.8  # drops 80%
    assert failed(check(MHA, args, kwargs, [mha_by_hand(args, kwargs, keep, 1 / 0.7), None])) == {
        "share of dropped weights"
    }


def test_mha_calls_that_cannot_be_checked():
    args, kwargs, outputs = mha_call(6, torch.float32, 0.5, length=12)
    with pytest.raises(NotCheckable, match="L_k > E_v"):
        CHECKS[MHA](args, kwargs, outputs)
    args, kwargs, outputs = mha_call(6, torch.float32, 0.5)
    with pytest.raises(NotCheckable, match="static_k/static_v"):
        CHECKS[MHA](args, {**kwargs, "static_k": torch.zeros(4, 6, 8)}, outputs)
    singular = kwargs["out_proj_weight"].clone()
    singular[:, 3] = 0
    with pytest.raises(NotCheckable, match="out_proj_weight has rank below embed_dim"):
        CHECKS[MHA](args, {**kwargs, "out_proj_weight": singular}, outputs)
    repeated = list(args)
    repeated[2] = args[2].clone()
    repeated[2][1] = repeated[2][0]
    with pytest.raises(NotCheckable, match="linearly dependent"):
        CHECKS[MHA](tuple(repeated), kwargs, outputs)
    with pytest.raises(NotCheckable, match="not divisible by num_heads 3"):
        CHECKS[MHA](args[:4] + (3,) + args[5:], kwargs, outputs)
    with pytest.raises(NotCheckable, match="neither all 2-D"):
        CHECKS[MHA]((args[0][None],) + args[1:], kwargs, outputs)
    with pytest.raises(NotCheckable, match="not a probability"):
        CHECKS[MHA](args, {**kwargs, "dropout_p": 1.5}, outputs)
