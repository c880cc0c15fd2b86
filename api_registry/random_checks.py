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
from dataclasses import dataclass, replace
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


# ---------------------------------------------------------------------------------------------------- arguments


def _arg(args: tuple, kwargs: dict, pos: int, name: str, default: Any) -> Any:
    """A parameter passed by name or by position, else the API's default."""
    if name in kwargs:
        return kwargs[name]
    return args[pos] if len(args) > pos else default


def _number(value: Any, name: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        return float(value.item())
    if isinstance(value, (bool, int, float)):
        return float(value)
    raise NotCheckable(f"{name} is not a number ({type(value).__name__})")


def _tensor(value: Any, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise NotCheckable(f"{name} is not a tensor ({type(value).__name__})")
    if value.is_complex():
        raise NotCheckable(f"{name} is complex: only real laws are checked")
    if value.is_nested or value.is_sparse:
        raise NotCheckable(f"{name} is a nested or sparse tensor")
    return value


def _float_tensor(value: Any, name: str) -> torch.Tensor:
    tensor = _tensor(value, name)
    if not tensor.is_floating_point():
        raise NotCheckable(f"{name} is not floating point ({tensor.dtype})")
    return tensor


def _output(outputs: list, index: int = 0) -> torch.Tensor:
    if len(outputs) <= index:
        raise NotCheckable(f"expected at least {index + 1} output tensor(s), got {len(outputs)}")
    out = _tensor(outputs[index], "the output")
    if out.numel() == 0:
        raise NotCheckable("empty output")
    return out


def _aliased(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether b was written over a (an in-place call): the input the output should be measured against is gone."""
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _f64(tensor: torch.Tensor) -> torch.Tensor:
    """The values in float64 on the CPU: exact for every real dtype torch draws in (integers up to 2^53)."""
    return tensor.detach().to("cpu", torch.float64)


# ---------------------------------------------------------------------------------------------------- tolerances


def _rtol(dtype: torch.dtype) -> float:
    """Relative error allowed where the target rounds a value to ``dtype``.

    Half types get two unit roundoffs (bfloat16 2^-7, float16 2^-10): CPU dropout rounds its scale 1/(1-p) to the
    dtype before rounding the product, and errors of 1.3 roundoffs are measured there. float32 (1e-6) and float64
    (1e-12) get dozens of roundoffs, still far below any scale or slope error worth reporting."""
    return {torch.float32: 1e-6, torch.float64: 1e-12}.get(dtype, torch.finfo(dtype).eps)


def _eps(dtype: torch.dtype) -> float:
    """Relative spacing of the dtype's values: how far rounding a draw to it may move the draw (0 for integers)."""
    return torch.finfo(dtype).eps if dtype.is_floating_point else 0.0


def _tiny(dtype: torch.dtype) -> float:
    """Absolute slack for values that round into the subnormal range, where the relative bound does not hold."""
    return torch.finfo(dtype).tiny if dtype.is_floating_point else 0.0


def _deviation(variance: float, scale: float) -> float:
    """Deviation of a sum of independent terms from its mean exceeded with probability at most DELTA (Bernstein,
    see the module docstring): ``variance`` is the sum's, ``scale`` the terms' moment scale c."""
    return scale * _L + math.sqrt((scale * _L) ** 2 + 2 * variance * _L)


# ---------------------------------------------------------------------------------------------------- findings


def _word(passed: bool) -> str:
    return "within" if passed else "outside"


def _pc(x: float) -> str:
    return f"{100 * x:.3g}%"


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise equality where NaN equals NaN."""
    return (a == b) | (a.isnan() & b.isnan())


def _count(what: str, bad: torch.Tensor, n: int, ok: str, wrong: str) -> Finding:
    """An exact property: passes when no element is ``bad``; ``ok``/``wrong`` finish the message."""
    k = int(bad.sum())
    return Finding(what, k == 0, f"{what}: all {n} {ok}" if k == 0 else f"{what}: {k} of {n} {wrong}")


def _range(
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


def _share(what: str, hits: int, n: int, p: float, context: str, slack: float = 0.0) -> Finding:
    """The share of n independent units that hit, each with probability p: Bernstein with terms in [0, 1]."""
    share = hits / n
    bound = _deviation(n * p * (1 - p), 1 / 3) / n + slack
    passed = abs(share - p) <= bound
    return Finding(what, passed, f"{what} {_pc(share)} {_word(passed)} {_pc(p)} ± {_pc(bound)} ({context})")


def _sum(what: str, total: float, expected: float, variance: float, context: str, slack: float = 0.0) -> Finding:
    """A sum of independent draws in [0, 1] or Poisson counts (Bennett: moment scale 1/3 for both)."""
    bound = _deviation(variance, 1 / 3) + slack
    passed = abs(total - expected) <= bound
    return Finding(what, passed, f"{what} {total:.6g} {_word(passed)} {expected:.6g} ± {bound:.4g} ({context})")


@dataclass(frozen=True)
class _Law:
    """Moments of a law and the Bernstein moment scales of the terms of its sample mean and variance.

    ``mu4`` is None for laws with exponential tails: their squared deviations meet no Bernstein condition, and
    the mean alone pins the law's single parameter."""

    label: str
    mean: float
    var: float
    mean_scale: float
    mu4: float | None = None
    var_scale: float = 0.0


def _uniform_law(lo: float, hi: float) -> _Law:
    w = hi - lo
    return _Law(f"uniform on [{lo:g}, {hi:g})", (lo + hi) / 2, w * w / 12, w / 6, w**4 / 80, w * w / 18)


def _integer_law(lo: float, hi: float) -> _Law:
    """The discrete uniform law on lo .. hi-1 (m values; 4th central moment (m^2-1)(3m^2-7)/240)."""
    m = hi - lo
    return _Law(
        f"integers uniform on [{lo:g}, {hi:g})",
        (lo + hi - 1) / 2,
        (m * m - 1) / 12,
        (m - 1) / 6,
        (m * m - 1) * (3 * m * m - 7) / 240,
        (m - 1) ** 2 / 12,
    )


# Squared standard normal draws (chi-square, 1 degree): Bernstein scale 1.92, computed numerically, taken as 2.
_STANDARD_NORMAL = _Law("(out - mean) / std, standard normal", 0.0, 1.0, 0.0, 3.0, 2.0)


def _moments(values: torch.Tensor, law: _Law, quantum: float) -> list[Finding]:
    """Sample mean, and sample variance about the law's mean, of float64 draws against the law.

    ``quantum`` bounds how far rounding to the output dtype moves a draw on average: it widens the mean's bound by
    itself and the variance's by 2 quantum std + quantum^2. Fewer than MIN_N draws: no finding."""
    n = values.numel()
    if n < MIN_N:
        return []
    mean = values.mean().item()
    bound = _deviation(n * law.var, law.mean_scale) / n + quantum
    passed = abs(mean - law.mean) <= bound
    findings = [
        Finding("mean", passed, f"mean {mean:.6g} {_word(passed)} {law.mean:.6g} ± {bound:.3g} ({law.label}, n={n})")
    ]
    if law.mu4 is not None:
        var = ((values - law.mean) ** 2).mean().item()
        bound = _deviation(n * (law.mu4 - law.var**2), law.var_scale) / n + quantum * (2 * math.sqrt(law.var) + quantum)
        passed = abs(var - law.var) <= bound
        findings.append(
            Finding(
                "variance",
                passed,
                f"variance {var:.6g} {_word(passed)} {law.var:.6g} ± {bound:.3g} ({law.label}, n={n})",
            )
        )
    return findings


# ---------------------------------------------------------------------------------------------------- dropout


@dataclass(frozen=True)
class _DropoutCall:
    """One dropout call as the checks need it: values in float64, the dtype that sets the tolerance, the mode."""

    x: torch.Tensor  # the input, float64
    out: torch.Tensor  # the output, float64
    dtype: torch.dtype
    p: float
    training: bool
    alpha: bool
    lead: int  # leading dims that name one dropout unit: 0 = every element, 1 or 2 = a channel

    @property
    def identity(self) -> bool:
        """Nothing is drawn and nothing dropped: torch returns the input itself."""
        return not self.training or self.p == 0

    @property
    def zeros(self) -> bool:
        """Nothing is drawn and everything dropped: torch multiplies by 0, even alpha dropout."""
        return self.training and self.p == 1


def _elementwise(x: torch.Tensor) -> int:
    return 0


def _channels(x: torch.Tensor) -> int:
    return 2


def _channels_1d(x: torch.Tensor) -> int:
    """dropout1d takes (C, L) unbatched, where a channel is a row, or (N, C, L)."""
    return 1 if x.dim() == 2 else 2


def _channels_3d(x: torch.Tensor) -> int:
    """dropout3d takes (C, D, H, W) unbatched or (N, C, D, H, W); other ranks reach feature dropout as they are."""
    return 1 if x.dim() == 4 else 2


def _dropout_call(
    args: tuple,
    kwargs: dict,
    outputs: list,
    train_name: str,
    train_default: bool,
    alpha: bool,
    lead: Callable[[torch.Tensor], int],
) -> _DropoutCall:
    x = _float_tensor(_arg(args, kwargs, 0, "input", None), "the input")
    out = _output(outputs)
    p = _number(_arg(args, kwargs, 1, "p", 0.5), "p")
    training = bool(_arg(args, kwargs, 2, train_name, train_default))
    if out.shape != x.shape:
        raise NotCheckable(f"output shape {tuple(out.shape)} differs from the input's {tuple(x.shape)}")
    if not 0 <= p <= 1:
        raise NotCheckable(f"p={p:g} is not a probability")
    if training and 0 < p < 1 and _aliased(x, out):
        raise NotCheckable("dropout ran in place: the input was overwritten, survivors cannot be compared with it")
    units = lead(x)
    if x.dim() < units:
        raise NotCheckable(f"feature dropout needs at least {units} dimensions, the input has {x.dim()}")
    return _DropoutCall(_f64(x), _f64(out), out.dtype, p, training, alpha, units)


def _dropout_model(call: _DropoutCall) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """(value of a kept element, value of a dropped one, tolerance, gradient scale of a kept element).

    Dropout keeps x/(1-p) and drops to 0. Alpha dropout keeps a*x + b and drops to a*alpha' + b, with
    a = ((1-p)(1 + p alpha'^2))^-1/2 and b = -a alpha' p (torch's Dropout.cpp); its four roundings (a, the product,
    b, the sum) get twice the tolerance, relative to the terms summed."""
    rtol, x, p = _rtol(call.dtype), call.x, call.p
    if not call.alpha:
        kept = x / (1 - p)
        return kept, torch.zeros_like(x), _tiny(call.dtype) + rtol * kept.abs(), 1 / (1 - p)
    a = ((1 - p) * (1 + p * SELU_ALPHA**2)) ** -0.5
    b = -a * SELU_ALPHA * p
    dropped = a * SELU_ALPHA + b
    tol = _tiny(call.dtype) + 2 * rtol * (a * x.abs() + abs(b) + abs(dropped))
    return a * x + b, torch.full_like(x, dropped), tol, a


def _dropout_classes(call: _DropoutCall) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per element: (finite input, output is the dropped value, output is one of the two values, informative).

    An element is informative where its kept and dropped values differ beyond the tolerance: a nonzero input for
    dropout (a zero input stays zero either way), an input away from alpha' for alpha dropout."""
    kept, dropped_value, tol, _ = _dropout_model(call)
    finite = torch.isfinite(call.x)
    dropped = finite & ((call.out - dropped_value).abs() <= tol)
    fits = dropped | ((call.out - kept).abs() <= tol)
    informative = finite & ((kept - dropped_value).abs() > 2 * tol)
    return finite, dropped, fits, informative


def _dropout_units(call: _DropoutCall, informative: torch.Tensor, dropped: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per unit (an element, or a channel for feature dropout), among units with an informative element:
    (all dropped, all kept, mixed). A mixed channel was not dropped as a whole."""
    told = informative.reshape(_unit_shape(call))
    drop = (dropped & informative).reshape(told.shape)
    seen = told.any(1)
    all_dropped = (drop | ~told).all(1) & seen
    all_kept = (~drop).all(1) & seen
    return all_dropped, all_kept, seen & ~all_dropped & ~all_kept


def _unit_shape(call: _DropoutCall) -> tuple[int, int]:
    """(units, elements per unit) of the input."""
    units = math.prod(call.x.shape[: call.lead]) if call.lead else call.x.numel()
    return units, call.x.numel() // units


def _per_element(call: _DropoutCall, per_unit: torch.Tensor) -> torch.Tensor:
    units, size = _unit_shape(call)
    return per_unit[:, None].expand(units, size).reshape(call.x.shape)


def _survivors(call: _DropoutCall, finite: torch.Tensor, fits: torch.Tensor) -> Finding:
    bad = finite & ~fits
    n, k = int(finite.sum()), int(bad.sum())
    values = "a*alpha'+b or a*x+b" if call.alpha else "0 or x/(1-p)"
    text = f"{values} within rel. {_rtol(call.dtype):.3g} (p={call.p:g})"
    if k == 0:
        return Finding("survivors", True, f"survivors: all {n} outputs with a finite input are {text}")
    first = int(bad.flatten().nonzero()[0])
    out, x = call.out.flatten()[first].item(), call.x.flatten()[first].item()
    kept = _dropout_model(call)[0].flatten()[first].item()
    return Finding(
        "survivors",
        False,
        f"survivors: {k} of {n} outputs are not {text}; first: {out:.6g} for x={x:.6g}, kept value {kept:.6g}",
    )


def _share_names(call: _DropoutCall, n: int) -> tuple[str, str]:
    """(what, description of the n units counted) of the dropped-share finding."""
    if call.alpha:
        return ("share of dropped channels", f"{n} channels") if call.lead else ("share of dropped", f"{n} inputs")
    if call.lead:
        return "share of zeroed channels", f"{n} channels with a nonzero input"
    return "share of zeros", f"{n} nonzero inputs"


def _dropout_findings(call: _DropoutCall) -> list[Finding]:
    """Identity when nothing is dropped, zeros for p=1; otherwise every output is a kept or a dropped value,
    feature dropout drops whole channels, and the dropped share of informative units is within the binomial bound
    of p (units with no informative element are not counted: they cannot tell)."""
    if call.identity:
        return [
            _count(
                "identity",
                ~_same(call.out, call.x),
                call.out.numel(),
                "outputs equal the input (no draw)",
                "outputs differ from the input although nothing is dropped",
            )
        ]
    if call.zeros:
        finite = torch.isfinite(call.x)
        return [
            _count(
                "zeros",
                finite & (call.out != 0),
                int(finite.sum()),
                "outputs are 0 (p=1)",
                "outputs are not 0 although p=1",
            )
        ]
    finite, dropped, fits, informative = _dropout_classes(call)
    findings = [_survivors(call, finite, fits)]
    all_dropped, all_kept, mixed = _dropout_units(call, informative, dropped)
    if call.lead:
        findings.append(
            _count(
                "whole channels",
                mixed,
                int((all_dropped | all_kept | mixed).sum()),
                "channels are dropped or kept as a whole",
                "channels are partly dropped",
            )
        )
    n = int((all_dropped | all_kept).sum())
    if n >= MIN_N:
        what, units = _share_names(call, n)
        findings.append(_share(what, int(all_dropped.sum()), n, call.p, f"p={call.p:g}, n={units}"))
    return findings


def _gradient(grad_outputs: list, grads: dict, shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    """(gradient fed into the output, gradient of the input), float64."""
    if not grad_outputs or not isinstance(grad_outputs[0], torch.Tensor):
        raise NotCheckable("no gradient was fed into the output")
    if not isinstance(grads.get(0), torch.Tensor):
        raise NotCheckable("no gradient of the input")
    if grad_outputs[0].shape != shape or grads[0].shape != shape:
        raise NotCheckable("the gradients do not have the input's shape")
    return _f64(grad_outputs[0]), _f64(grads[0])


def _dropout_gradient(call: _DropoutCall, grad_outputs: list, grads: dict) -> list[Finding]:
    """The input gradient is grad_output times the forward's mask times the kept scale (1/(1-p), or a for alpha
    dropout). The mask is read off the forward output; where it cannot be (a zero input outside a channel known to
    be kept or dropped, a non-finite input) either value is accepted."""
    g, gx = _gradient(grad_outputs, grads, call.x.shape)
    rtol, tiny = _rtol(call.dtype), _tiny(call.dtype)
    if call.identity or call.zeros:
        scale = 0.0 if call.zeros else 1.0
        bad = (gx - g * scale).abs() > tiny + rtol * (g * scale).abs()
        return [
            _count(
                "gradient",
                bad,
                gx.numel(),
                f"input gradients equal grad_output*{scale:g}",
                f"input gradients differ from grad_output*{scale:g}",
            )
        ]
    scale = _dropout_model(call)[3]
    _, dropped, _, informative = _dropout_classes(call)
    all_dropped, all_kept, _ = _dropout_units(call, informative, dropped)
    known_dropped, known_kept = _per_element(call, all_dropped), _per_element(call, all_kept)
    as_kept = (gx - g * scale).abs() <= tiny + rtol * (g * scale).abs()
    as_dropped = gx.abs() <= tiny
    bad = known_kept & ~as_kept | known_dropped & ~as_dropped | ~(known_kept | known_dropped | as_kept | as_dropped)
    return [
        _count(
            "gradient",
            bad,
            gx.numel(),
            f"input gradients equal grad_output*mask*{scale:.6g}",
            f"input gradients differ from grad_output*mask*{scale:.6g} (mask read off the output)",
        )
    ]


def _dropout(
    train_name: str, train_default: bool, alpha: bool = False, lead: Callable[[torch.Tensor], int] = _elementwise
) -> tuple[Check, BackwardCheck]:
    """Forward and backward checks of one dropout API: its training parameter's name and default, its kind."""

    def forward(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
        return _dropout_findings(_dropout_call(args, kwargs, outputs, train_name, train_default, alpha, lead))

    def backward(args: tuple, kwargs: dict, outputs: list, grad_outputs: list, grads: dict) -> list[Finding]:
        call = _dropout_call(args, kwargs, outputs, train_name, train_default, alpha, lead)
        return _dropout_gradient(call, grad_outputs, grads)

    return forward, backward


# ---------------------------------------------------------------------------------------------------- rrelu


def _rrelu(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Training: x >= 0 passes unchanged, a negative x is multiplied by a slope drawn uniformly from [lower, upper]:
    the slopes out/x lie in that range (up to the dtype's rounding) and follow the uniform law's mean and variance.
    Evaluation: the slope is (lower+upper)/2, no draw."""
    x = _float_tensor(_arg(args, kwargs, 0, "input", None), "the input")
    out = _output(outputs)
    lower = _number(_arg(args, kwargs, 1, "lower", 1 / 8), "lower")
    upper = _number(_arg(args, kwargs, 2, "upper", 1 / 3), "upper")
    training = bool(_arg(args, kwargs, 3, "training", False))
    if out.shape != x.shape:
        raise NotCheckable(f"output shape {tuple(out.shape)} differs from the input's {tuple(x.shape)}")
    if not 0 <= lower <= upper:
        raise NotCheckable(f"slopes [{lower:g}, {upper:g}] are not an interval of non-negative numbers")
    if training and _aliased(x, out):
        raise NotCheckable("rrelu ran in place: the input was overwritten, its slopes cannot be measured")
    x64, o64 = _f64(x), _f64(out)
    rtol, tiny = _rtol(out.dtype), _tiny(out.dtype)
    findings = [
        _count(
            "positive inputs",
            (x64 >= 0) & ~_same(o64, x64),
            int((x64 >= 0).sum()),
            "outputs of inputs >= 0 equal the input",
            "outputs of inputs >= 0 differ from the input",
        )
    ]
    neg = (x64 < 0) & torch.isfinite(x64)
    xs, os = x64[neg], o64[neg]
    if not training:
        slope = (lower + upper) / 2
        bad = (os - xs * slope).abs() > tiny + rtol * (xs * slope).abs()
        return findings + [
            _count(
                "slope",
                bad,
                xs.numel(),
                f"negative inputs are scaled by {slope:g}",
                f"negative inputs are not scaled by (lower+upper)/2={slope:g}",
            )
        ]
    inside = (os >= xs * upper * (1 + rtol) - tiny) & (os <= xs * lower * (1 - rtol) + tiny)
    findings.append(
        _count(
            "slopes",
            ~inside,
            xs.numel(),
            f"slopes out/x of negative inputs in [{lower:g}, {upper:g}]",
            f"slopes out/x of negative inputs are outside [{lower:g}, {upper:g}]",
        )
    )
    precise = xs.abs() >= tiny / rtol  # below, the product is subnormal and its ratio to x imprecise
    law = _uniform_law(lower, upper)
    law = replace(law, label="slopes, " + law.label)
    return findings + _moments(os[precise] / xs[precise], law, rtol * (upper + 1))


# ---------------------------------------------------------------------------------------------------- gumbel softmax


def _gumbel_softmax(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Every row along dim is a probability vector (one-hot when hard). The argmax of a row is the argmax of
    logits + Gumbel noise whatever tau, so it follows softmax(logits): the summed probability of the chosen
    categories is checked against its mean sum(p^2) with Bernstein (terms in [0, 1]). That check runs for float32
    and float64 only: half-precision noise rounds (logits + noise) into ties that bias the argmax."""
    logits = _float_tensor(_arg(args, kwargs, 0, "logits", None), "the logits")
    out = _output(outputs)
    tau = _number(_arg(args, kwargs, 1, "tau", 1.0), "tau")
    hard = bool(_arg(args, kwargs, 2, "hard", False))
    dim = int(_number(_arg(args, kwargs, 4, "dim", -1), "dim"))
    if out.shape != logits.shape or logits.dim() == 0:
        raise NotCheckable(f"output shape {tuple(out.shape)} differs from the logits' {tuple(logits.shape)}")
    if logits.isnan().any() or tau <= 0:
        raise NotCheckable("NaN logits or tau <= 0: no law to check against")
    k = out.shape[dim]
    y = _f64(out).movedim(dim, -1).reshape(-1, k)
    tol = _rtol(out.dtype) * max(1.0, math.log2(k))  # each value rounded, plus the normalising sum's rounding
    sums = _count(
        "sums",
        (y.sum(-1) - 1).abs() > tol,
        y.shape[0],
        f"rows sum to 1 within {tol:.3g}",
        f"rows do not sum to 1 within {tol:.3g}",
    )
    findings = [_range(y, 0, 1 + tol), sums]
    if hard:
        ones = ((y - 1).abs() <= tol).sum(-1)
        zeros = (y.abs() <= tol).sum(-1)
        findings.append(
            _count("one-hot", (ones != 1) | (zeros != k - 1), y.shape[0], "rows are one-hot", "rows are not one-hot")
        )
    if out.dtype in (torch.float32, torch.float64) and y.shape[0] >= MIN_N:
        findings.append(_argmax_law(y, torch.softmax(_f64(logits).movedim(dim, -1).reshape(-1, k), -1)))
    return findings


def _argmax_law(y: torch.Tensor, probs: torch.Tensor) -> Finding:
    """Sum over rows of the probability of the category each row picked, against its mean sum(p^2). A row whose
    maximum is tied picked its first tied category, not a draw: each such row widens the bound by one, the most its
    term (in [0, 1]) can be off."""
    top = y.max(-1, keepdim=True).values
    ties = int(((y == top).sum(-1) > 1).sum())
    chosen = probs.gather(1, y.argmax(-1, keepdim=True)).squeeze(1)
    second = (probs**2).sum(-1)
    variance = ((probs**3).sum(-1) - second**2).sum().item()
    return _sum(
        "argmax law",
        chosen.sum().item(),
        second.sum().item(),
        variance,
        f"summed probability of the picked categories, {y.shape[0]} rows, {ties} tied",
        slack=ties,
    )


# ---------------------------------------------------------------------------------------------- fractional max pooling


def _pool_size(x: torch.Tensor, spatial: int, output_size: Any, output_ratio: Any) -> tuple[int, ...]:
    """The spatial output size asked for: output_size (an int or a tuple, None entries keep the input's size) or
    int(input size * output_ratio), as torch.nn.functional computes it."""
    dims = x.shape[-spatial:]
    if output_size is not None:
        sizes = _per_dim(output_size, spatial, "output_size")
        return tuple(int(d if s is None else s) for s, d in zip(sizes, dims, strict=True))
    if output_ratio is None:
        raise NotCheckable("neither output_size nor output_ratio is given")
    return tuple(int(d * float(r)) for r, d in zip(_per_dim(output_ratio, spatial, "output_ratio"), dims, strict=True))


def _per_dim(value: Any, spatial: int, name: str) -> tuple:
    """A pooling parameter given once for all spatial dims or once per dim."""
    values = (value,) * spatial if isinstance(value, (int, float)) else tuple(value)
    if len(values) != spatial:
        raise NotCheckable(f"{name} has {len(values)} entries for {spatial} spatial dims")
    return values


def _fractional_max_pool(spatial: int) -> Check:
    """The output has the size asked for, every output value is an element of its input plane (each is the
    maximum of a window), and the indices, when returned, point at the input elements equal to the output."""

    def check(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
        x = _tensor(_arg(args, kwargs, 0, "input", None), "the input")
        out = _output(outputs)
        if x.dim() not in (spatial + 1, spatial + 2):
            raise NotCheckable(f"expected a {spatial + 1}-D or {spatial + 2}-D input, got {x.dim()}-D")
        size = _pool_size(
            x, spatial, _arg(args, kwargs, 2, "output_size", None), _arg(args, kwargs, 3, "output_ratio", None)
        )
        want = tuple(x.shape[:-spatial]) + size
        ok = tuple(out.shape) == want
        findings = [Finding("shape", ok, f"shape: output {tuple(out.shape)} {'is' if ok else 'is not'} {want}")]
        if not ok:
            return findings
        planes = _f64(x).reshape(-1, math.prod(x.shape[-spatial:]))
        pooled = _f64(out).reshape(planes.shape[0], -1)
        findings.append(_members(planes, pooled))
        if _arg(args, kwargs, 4, "return_indices", False):
            findings.append(_pool_indices(planes, pooled, _output(outputs, 1)))
        return findings

    return check


def _members(planes: torch.Tensor, pooled: torch.Tensor) -> Finding:
    """Whether each pooled value occurs in its input plane (binary search in the sorted plane; NaN matches NaN)."""
    ordered = planes.sort(-1).values
    pos = torch.searchsorted(ordered, pooled).clamp(max=ordered.shape[1] - 1)
    found = (ordered.gather(1, pos) == pooled) | (pooled.isnan() & planes.isnan().any(1, keepdim=True))
    return _count(
        "values",
        ~found,
        pooled.numel(),
        "output values are elements of their input plane",
        "output values are not elements of their input plane",
    )


def _pool_indices(planes: torch.Tensor, pooled: torch.Tensor, indices: torch.Tensor) -> Finding:
    if indices.dtype.is_floating_point or indices.numel() != pooled.numel():
        raise NotCheckable("the second output is not an index tensor of the pooled output's size")
    idx = indices.detach().cpu().reshape(pooled.shape).long()
    inside = (idx >= 0) & (idx < planes.shape[1])
    gathered = planes.gather(1, idx.clamp(0, planes.shape[1] - 1))
    return _count(
        "indices",
        ~(inside & _same(gathered, pooled)),
        pooled.numel(),
        "indices point at input elements equal to the output",
        "indices are out of the plane or point at an element that differs from the output",
    )


# ---------------------------------------------------------------------------------------------------- samplers


def _draws(outputs: list, floating: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, its values flat in float64)."""
    out = _output(outputs)
    if floating and not out.is_floating_point():
        raise NotCheckable(f"the output is not floating point ({out.dtype})")
    return out, _f64(out).flatten()


def _finite(values: torch.Tensor) -> Finding:
    return _count("finite", ~torch.isfinite(values), values.numel(), "draws are finite", "draws are not finite")


def _rand(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Uniform on [0, 1): the range, mean 1/2 and variance 1/12."""
    out, v = _draws(outputs, floating=True)
    return [_range(v, 0, 1, hi_open=True), *_moments(v, _uniform_law(0, 1), _eps(out.dtype))]


def _randn(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Standard normal: finite, mean 0 and variance 1."""
    out, v = _draws(outputs, floating=True)
    return [_finite(v), *_moments(v, _STANDARD_NORMAL, _eps(out.dtype))]


def _integers(out: torch.Tensor, v: torch.Tensor, lo: float, hi: float) -> list[Finding]:
    """Integers uniform on lo .. hi-1. The bounds are rounded to the output dtype as the draws are (randint into
    bfloat16 beyond 256 rounds), and rounding widens the moments' bounds by one spacing at the range's edge."""
    if hi <= lo:
        raise NotCheckable(f"empty range [{lo:g}, {hi:g})")
    low, high = (
        torch.tensor([lo, hi - 1], dtype=torch.float64).to(out.dtype).double().tolist()
        if out.is_floating_point()
        else (lo, hi - 1)
    )
    found = _range(v, low, high, integer=True)
    return [found, *_moments(v, _integer_law(lo, hi), _eps(out.dtype) * max(abs(lo), abs(hi)))]


def _bounds(rest: tuple, kwargs: dict) -> tuple[float, float]:
    """(low, high) of randint / randint_like from the positional numbers before the size: one number is high, two
    are low and high; with high given by keyword a positional number is low."""
    numbers = []
    for value in rest:
        if isinstance(value, (list, tuple, torch.Size)):
            break
        numbers.append(value)
    if "high" in kwargs:
        low, high = kwargs.get("low", numbers[0] if numbers else 0), kwargs["high"]
    elif len(numbers) == 1:
        low, high = kwargs.get("low", 0), numbers[0]
    elif len(numbers) == 2:
        low, high = numbers
    else:
        raise NotCheckable("randint without a readable high bound")
    return _number(low, "low"), _number(high, "high")


def _randint(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    out, v = _draws(outputs)
    return _integers(out, v, *_bounds(args, kwargs))


def _randint_like(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    out, v = _draws(outputs)
    return _integers(out, v, *_bounds(args[1:], kwargs))


def _randperm(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Exactly a permutation of 0..n-1; and shuffled: a uniform permutation has MAX_FIXED_POINTS + 1 or more fixed
    points with probability at most 1/10! < 3e-7, whatever n (an identity or barely moved output fails)."""
    n = int(_number(_arg(args, kwargs, 0, "n", None), "n"))
    _, v = _draws(outputs)
    ok = v.numel() == n and bool((v.sort().values == torch.arange(n, dtype=torch.float64)).all())
    findings = [
        Finding(
            "permutation",
            ok,
            f"permutation: the output {'is' if ok else 'is not'} a permutation of 0..{n - 1} ({v.numel()} values)",
        )
    ]
    if ok and n >= MIN_N:
        fixed = int((v == torch.arange(n, dtype=torch.float64)).sum())
        passed = fixed <= MAX_FIXED_POINTS
        findings.append(
            Finding(
                "fixed points",
                passed,
                f"fixed points: {fixed} {'at most' if passed else 'above'} {MAX_FIXED_POINTS} (n={n})",
            )
        )
    return findings


def _law_parameter(value: Any, shape: torch.Size, name: str) -> torch.Tensor:
    """A law's parameter (a number or a tensor) broadcast to the output's shape, float64."""
    if isinstance(value, torch.Tensor) and value.numel() != 1:
        try:
            return _f64(_tensor(value, name)).broadcast_to(shape)
        except RuntimeError as err:
            raise NotCheckable(
                f"{name} of shape {tuple(value.shape)} does not broadcast to the output's {tuple(shape)}"
            ) from err
    return torch.full(shape, _number(value, name), dtype=torch.float64)


def _normal_findings(out: torch.Tensor, mean: Any, std: Any) -> list[Finding]:
    """(out - mean)/std is standard normal where std > 0, and out equals mean where std = 0.

    A draw rounded to the output dtype moves by up to eps*|draw|, which averages below eps*(|mean| + std): that
    shift, in std units, widens the moments' bounds. When it reaches a quarter std the dtype cannot resolve the
    law and the call is not checked."""
    o = _f64(out)
    mu, sigma = _law_parameter(mean, o.shape, "mean"), _law_parameter(std, o.shape, "std")
    if not (torch.isfinite(mu).all() and torch.isfinite(sigma).all() and (sigma >= 0).all()):
        raise NotCheckable("mean or std is not finite, or std is negative")
    fixed = sigma == 0
    findings = [_finite(o.flatten())]
    if fixed.any():
        at = mu[fixed].to(out.dtype).double()
        findings.append(
            _count(
                "zero std",
                o[fixed] != at,
                int(fixed.sum()),
                "draws with std 0 equal the mean",
                "draws with std 0 differ from the mean",
            )
        )
    spread = sigma[~fixed]
    if spread.numel():
        shift = (_eps(out.dtype) * (mu[~fixed].abs() + spread) / spread).square().mean().sqrt().item()
        if shift > 0.25:
            raise NotCheckable(f"std is below the resolution of {out.dtype} at that mean")
        findings += _moments(((o[~fixed] - mu[~fixed]) / spread).flatten(), _STANDARD_NORMAL, shift)
    return findings


def _normal(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """torch.normal in all its forms: tensor and/or float mean and std, or floats with a size."""
    mean = _arg(args, kwargs, 0, "mean", None)
    if mean is None:
        raise NotCheckable("torch.normal without a mean")
    return _normal_findings(_draws(outputs, floating=True)[0], mean, _arg(args, kwargs, 1, "std", 1.0))


def _normal_(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    out = _draws(outputs, floating=True)[0]
    return _normal_findings(out, _arg(args, kwargs, 1, "mean", 0.0), _arg(args, kwargs, 2, "std", 1.0))


def _log_normal_(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Draws are positive and their log is normal(mean, std). Rounding moves a log by at most eps; when mean ± 7 std
    of the log leaves the dtype's range the draws overflow or underflow and the call is not checked."""
    out, v = _draws(outputs, floating=True)
    mean = _number(_arg(args, kwargs, 1, "mean", 1.0), "mean")
    std = _number(_arg(args, kwargs, 2, "std", 2.0), "std")
    if std <= 0:
        raise NotCheckable(f"std={std:g} is not positive")
    info = torch.finfo(out.dtype)
    if mean - 7 * std < math.log(info.tiny) or mean + 7 * std > math.log(info.max):
        raise NotCheckable(f"log-normal draws with mean={mean:g}, std={std:g} leave the range of {out.dtype}")
    law = replace(_STANDARD_NORMAL, label="(log(out) - mean) / std, standard normal")
    return [
        _count(
            "positive",
            ~((v > 0) & torch.isfinite(v)),
            v.numel(),
            "draws are positive and finite",
            "draws are not positive and finite",
        ),
        *_moments((v.clamp_min(info.tiny).log() - mean) / std, law, _eps(out.dtype) / std),
    ]


def _exponential_(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Non-negative draws with mean 1/lambd (Exp(1) terms meet Bernstein's condition with scale 1, computed)."""
    out, v = _draws(outputs, floating=True)
    rate = _number(_arg(args, kwargs, 1, "lambd", 1.0), "lambd")
    if rate <= 0:
        raise NotCheckable(f"lambd={rate:g} is not positive")
    law = _Law(f"exponential, lambd={rate:g}", 1 / rate, 1 / rate**2, 1 / rate)
    return [_range(v, 0, math.inf), *_moments(v, law, _eps(out.dtype) * 2 / rate)]


def _geometric_(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Integers >= 1 with mean 1/p. The draws' tail decays like exp(-x * -ln(1-p)): their Bernstein scale is below
    1/-ln(1-p) + 1 (computed for p from 0.01 to 0.99)."""
    out, v = _draws(outputs)
    p = _number(_arg(args, kwargs, 1, "p", None), "p")
    if not 0 < p <= 1:
        raise NotCheckable(f"p={p:g} is not a probability above 0")
    scale = 1 / -math.log1p(-p) + 1 if p < 1 else 1.0
    law = _Law(f"geometric, p={p:g}", 1 / p, (1 - p) / p**2, scale)
    return [_range(v, 1, math.inf, integer=True), *_moments(v, law, _eps(out.dtype) * (1 / p + math.sqrt(law.var)))]


def _cauchy_(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """No moments: half the draws lie below the median and half within median ± sigma (atan(1) * 2/pi), each share
    checked with the binomial bound. Draws equal to a boundary count half; rounding to the dtype moves a draw by
    eps*(|median| + sigma) near the boundaries, where the density is at most 1/(pi sigma)."""
    out, v = _draws(outputs, floating=True)
    median = _number(_arg(args, kwargs, 1, "median", 0.0), "median")
    sigma = _number(_arg(args, kwargs, 2, "sigma", 1.0), "sigma")
    if sigma <= 0:
        raise NotCheckable(f"sigma={sigma:g} is not positive")
    findings = [_count("not NaN", v.isnan(), v.numel(), "draws are numbers", "draws are NaN")]
    n = v.numel()
    if n < MIN_N:
        return findings
    slack = 2 * _eps(out.dtype) * (abs(median) + sigma) / (math.pi * sigma)
    below = ((v < median).sum() + 0.5 * (v == median).sum()).item()
    near = (((v - median).abs() < sigma).sum() + 0.5 * ((v - median).abs() == sigma).sum()).item()
    context = f"median={median:g}, sigma={sigma:g}, n={n}"
    return findings + [
        _share("share below median", below, n, 0.5, context, slack),
        _share("share within median ± sigma", near, n, 0.5, context, slack),
    ]


def _uniform_(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Uniform on [from, to): range (closed: a draw just below `to` may round up to it in a low precision dtype),
    mean and variance; rounding moves a draw by up to eps*max(|from|, |to|)."""
    out, v = _draws(outputs, floating=True)
    lo = _number(_arg(args, kwargs, 1, "from", 0.0), "from")
    hi = _number(_arg(args, kwargs, 2, "to", 1.0), "to")
    if hi < lo:
        raise NotCheckable(f"from={lo:g} is above to={hi:g}")
    return [_range(v, lo, hi), *_moments(v, _uniform_law(lo, hi), _eps(out.dtype) * max(abs(lo), abs(hi)))]


def _dtype_top(dtype: torch.dtype) -> float:
    """The largest draw of random_ without `to`: 2^digits for floats (every integer below is representable),
    the dtype's maximum for integers."""
    if dtype == torch.bool:
        return 1.0
    if dtype.is_floating_point:
        return 2.0 ** (1 - math.log2(torch.finfo(dtype).eps))
    return float(torch.iinfo(dtype).max)


def _random_(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Integers in [from, to) (overloads random_(from, to), random_(to), random_()). With both bounds known the
    draws are also checked against the discrete uniform law; without `to` only the range is."""
    out, v = _draws(outputs)
    rest = args[1:]
    if "from" in kwargs or len(rest) >= 2 or (rest and "to" in kwargs):
        lo, hi = kwargs.get("from", rest[0] if rest else 0), kwargs.get("to", rest[1] if len(rest) > 1 else None)
    else:
        lo, hi = 0, kwargs.get("to", rest[0] if rest else None)
    lo = _number(lo, "from")
    if hi is None:
        return [_range(v, lo, _dtype_top(out.dtype), integer=True)]
    return _integers(out, v, lo, _number(hi, "to"))


def _probabilities(value: Any, shape: torch.Size) -> torch.Tensor:
    probs = _law_parameter(value, shape, "p")
    if not ((probs >= 0) & (probs <= 1)).all():
        raise NotCheckable("probabilities outside [0, 1]")
    return probs


def _bernoulli_findings(out: torch.Tensor, probs: Any) -> list[Finding]:
    """Draws are 0 or 1, certain where p is 0 or 1, and their sum is within the Bernstein bound of sum(p) with
    variance sum(p(1-p))."""
    v = _f64(out)
    p = _probabilities(probs, v.shape)
    certain = (p == 0) | (p == 1)
    findings = [
        _range(v.flatten(), 0, 1, integer=True, what="values"),
        _count(
            "certain draws",
            certain & (v != p),
            int(certain.sum()),
            "draws with p of 0 or 1 equal p",
            "draws with p of 0 or 1 differ from p",
        ),
    ]
    if v.numel() >= MIN_N:
        findings.append(
            _sum("sum", v.sum().item(), p.sum().item(), (p * (1 - p)).sum().item(), f"sum of p, n={v.numel()}")
        )
    return findings


def _bernoulli(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """torch.bernoulli / Tensor.bernoulli: the input holds the probabilities, unless a float p is given."""
    x = _tensor(_arg(args, kwargs, 0, "input", None), "the input")
    p = _arg(args, kwargs, 1, "p", None)
    return _bernoulli_findings(_output(outputs), x if p is None else p)


def _bernoulli_(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    return _bernoulli_findings(_output(outputs), _arg(args, kwargs, 1, "p", 0.5))


def _poisson(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Non-negative integers, 0 where the rate is 0, and the sum is Poisson(sum of rates): Bennett's bound with
    variance sum(rates) and scale 1/3. Rounding a count to a float dtype moves it by up to eps times the count."""
    rates = _f64(_tensor(_arg(args, kwargs, 0, "input", None), "the rates"))
    out = _output(outputs)
    v = _f64(out)
    if rates.shape != v.shape or not (torch.isfinite(rates) & (rates >= 0)).all():
        raise NotCheckable("rates are not finite non-negative numbers of the output's shape")
    idle = rates == 0
    findings = [
        _range(v.flatten(), 0, math.inf, integer=True, what="values"),
        _count(
            "zero rates", idle & (v != 0), int(idle.sum()), "draws with rate 0 are 0", "draws with rate 0 are not 0"
        ),
    ]
    if v.numel() >= MIN_N:
        total = rates.sum().item()
        findings.append(
            _sum("sum", v.sum().item(), total, total, f"sum of rates, n={v.numel()}", _eps(out.dtype) * total)
        )
    return findings


# ---------------------------------------------------------------------------------------------------- multinomial


def _pearson_row(counts: torch.Tensor, expected: torch.Tensor) -> tuple[float, int, float]:
    """Pearson's statistic of one row of draws, its degrees of freedom and its exact variance under the null,
    2(k-1) + (sum 1/pi - k^2 - 2k + 2)/n for k cells of probabilities pi. Cells expected to hold fewer than
    MIN_EXPECTED draws are pooled, into the smallest large cell when the pool itself is small, so that the
    statistic keeps close to its chi-square law."""
    big = expected >= MIN_EXPECTED
    o, e = counts[big], expected[big]
    rest_o, rest_e = counts[~big].sum(), expected[~big].sum()
    if rest_e >= MIN_EXPECTED:
        o, e = torch.cat([o, rest_o[None]]), torch.cat([e, rest_e[None]])
    elif rest_e > 0 and e.numel():
        smallest = e.argmin()
        o[smallest] += rest_o
        e[smallest] += rest_e
    k = e.numel()
    if k < 2:
        return 0.0, 0, 0.0
    n = e.sum()
    variance = 2 * (k - 1) + ((n / e).sum() - k * k - 2 * k + 2) / n
    return ((o - e) ** 2 / e).sum().item(), k - 1, variance.item()


def _frequencies(idx: torch.Tensor, probs: torch.Tensor) -> Finding | None:
    """Category counts per row against num_samples * p, Pearson's statistic summed over rows, bounded with
    Bernstein at its exact variance (scale 2, the chi-square's); None when no row has two cells large enough."""
    counts = torch.zeros_like(probs).scatter_add_(1, idx, torch.ones_like(idx, dtype=torch.float64))
    expected = probs * idx.shape[1]
    stat, df, variance = 0.0, 0, 0.0
    for row_counts, row_expected in zip(counts, expected, strict=True):
        s, d, v = _pearson_row(row_counts, row_expected)
        stat, df, variance = stat + s, df + d, variance + v
    if df == 0:
        return None
    bound = df + _deviation(variance, 2.0)
    passed = stat <= bound
    return Finding(
        "frequencies",
        passed,
        f"frequencies: Pearson chi-square {stat:.5g} {'below' if passed else 'above'}"
        f" {bound:.5g} (df={df}, {idx.shape[0]} rows of {idx.shape[1]} draws)",
    )


def _multinomial(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Indices are categories of the row, never of weight 0; without replacement no row repeats a category, with
    replacement the category counts follow the weights (when enough draws fall in each cell)."""
    weights = _f64(_tensor(_arg(args, kwargs, 0, "input", None), "the weights"))
    replacement = bool(_arg(args, kwargs, 2, "replacement", False))
    out = _output(outputs)
    if weights.dim() not in (1, 2) or not (torch.isfinite(weights) & (weights >= 0)).all():
        raise NotCheckable("weights are not a 1-D or 2-D tensor of finite non-negative numbers")
    weights = weights.reshape(-1, weights.shape[-1])
    if (weights.sum(1) <= 0).any() or out.numel() % weights.shape[0]:
        raise NotCheckable("a row of weights sums to 0, or the output does not have a row per row of weights")
    k = weights.shape[1]
    draws = _f64(out).reshape(weights.shape[0], -1)
    found = _range(draws.flatten(), 0, k - 1, integer=True, what="categories")
    if not found.passed:
        return [found]
    idx = draws.long()
    picked = weights.gather(1, idx)
    findings = [
        found,
        _count(
            "zero weights", picked == 0, idx.numel(), "draws have a nonzero weight", "draws are categories of weight 0"
        ),
    ]
    if not replacement:
        ordered = idx.sort(1).values
        return findings + [
            _count(
                "repeats",
                (ordered[:, 1:] == ordered[:, :-1]).any(1),
                idx.shape[0],
                "rows draw each category at most once",
                "rows repeat a category without replacement",
            )
        ]
    frequencies = _frequencies(idx, weights / weights.sum(1, keepdim=True))
    return findings + ([frequencies] if frequencies else [])


# ---------------------------------------------------------------------------------------------------- attention


@dataclass(frozen=True)
class _Attention:
    """Attention with dropout, one row per batch entry and head: out = (weights * mask / (1-p)) @ values, each
    output value within `error` of it for the true mask."""

    weights: torch.Tensor  # softmax(q k^T * scale + mask), (B, L, S), float64
    values: torch.Tensor  # V, (B, S, Ev)
    out: torch.Tensor  # the output, (B, L, Ev)
    error: torch.Tensor  # bound on the output's distance from the exact attention with the true mask, (B, L, Ev)
    rows: torch.Tensor  # rows that have weights (not fully masked) and a finite output, (B, L)
    p: float

    @property
    def kept(self) -> torch.Tensor:
        """The weight of each position if it is kept, P / (1-p)."""
        return self.weights / (1 - self.p) if self.p < 1 else torch.zeros_like(self.weights)


def _accumulation(dtype: torch.dtype) -> float:
    """Rounding of one term of a sum the target accumulates: CPU kernels accumulate half types in float32."""
    return 2.0**-53 if dtype == torch.float64 else 2.0**-24


def _probability(value: Any) -> float:
    p = _number(value, "dropout_p")
    if not 0 <= p <= 1:
        raise NotCheckable(f"dropout_p={p:g} is not a probability")
    return p


def _heads(t: torch.Tensor, q: torch.Tensor, gqa: bool) -> torch.Tensor:
    """Key or value with its heads repeated to the query's (grouped-query attention)."""
    if t.dim() < 3 or q.dim() < 3 or t.shape[-3] in (1, q.shape[-3]):
        return t
    if not gqa or q.shape[-3] % t.shape[-3]:
        raise NotCheckable(f"{q.shape[-3]} query heads cannot share {t.shape[-3]} key/value heads")
    return t.repeat_interleave(q.shape[-3] // t.shape[-3], dim=-3)


def _broadcast(*shapes: torch.Size) -> torch.Size:
    """torch.broadcast_shapes without its first-use import of sympy (0.2 s of a run): empty tensors broadcast."""
    return torch.broadcast_tensors(*(torch.empty((*shape, 0)) for shape in shapes))[0].shape[:-1]


def _attention(args: tuple, kwargs: dict, outputs: list) -> _Attention:
    """The call's attention weights in float64, with batch dims broadcast and flattened.

    The output's rounding error bound per row is 2 rtol of its dtype (the weights rounded before P @ V, the output
    rounded) plus the float32 error of the logits, about 4 u |q||k| scale, which the softmax turns into a relative
    error of the weights."""
    q = _float_tensor(_arg(args, kwargs, 0, "query", None), "query")
    gqa = bool(_arg(args, kwargs, 7, "enable_gqa", False))
    k = _heads(_float_tensor(_arg(args, kwargs, 1, "key", None), "key"), q, gqa)
    v = _heads(_float_tensor(_arg(args, kwargs, 2, "value", None), "value"), q, gqa)
    mask, out = _arg(args, kwargs, 3, "attn_mask", None), _output(outputs)
    p = _probability(_arg(args, kwargs, 4, "dropout_p", 0.0))
    scale = _arg(args, kwargs, 6, "scale", None)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else _number(scale, "scale")
    q64, k64 = _f64(q), _f64(k).transpose(-2, -1)
    logits = q64 @ k64 * scale
    if _arg(args, kwargs, 5, "is_causal", False):
        logits = logits.masked_fill(~torch.ones(logits.shape[-2:], dtype=torch.bool).tril(), -math.inf)
    if isinstance(mask, torch.Tensor):
        mask = mask.detach().cpu()
        logits = logits.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else logits + mask.double()
    weights = torch.softmax(logits, -1)
    spread = (q64.abs() @ k64.abs() * scale).amax(-1, keepdim=True)
    rtol = 2 * _rtol(out.dtype) + 4 * _accumulation(q.dtype) * spread
    batch = _broadcast(weights.shape[:-2], v.shape[:-2])
    want = (*batch, weights.shape[-2], v.shape[-1])
    if tuple(out.shape) != want:
        raise NotCheckable(f"output shape {tuple(out.shape)} is not the attention's {want}")
    weights = weights.expand(*batch, *weights.shape[-2:]).reshape(-1, *weights.shape[-2:]).nan_to_num(0.0)
    values = _f64(v).expand(*batch, *v.shape[-2:]).reshape(-1, *v.shape[-2:])
    o = _f64(out).reshape(-1, *out.shape[-2:])
    rtol = rtol.expand(*batch, *rtol.shape[-2:]).reshape(-1, rtol.shape[-2], 1)
    rows = (weights.sum(-1) > 0) & torch.isfinite(o).all(-1)
    kept = weights / (1 - p) if p < 1 else torch.zeros_like(weights)
    return _Attention(weights, values, o, _tiny(out.dtype) + rtol * (kept @ values.abs()), rows, p)


def _recomputed(att: _Attention, keep: torch.Tensor, loose: torch.Tensor) -> Finding:
    """The output re-computed in float64 with the dropout mask `keep` against the target's, within the rounding
    bound of each row plus the weight of positions whose mask could not be told (`loose`)."""
    kept = att.kept
    recomputed = (kept * keep) @ att.values
    slack = att.error + (kept * loose) @ att.values.abs()
    bad = ((att.out - recomputed).abs() > slack) & att.rows[..., None]
    n = int(att.rows.sum()) * att.out.shape[-1]
    return _count(
        "recomputed output",
        bad,
        n,
        "output values match softmax(q k^T) * mask/(1-p) @ V with the recovered mask",
        "output values differ from softmax(q k^T) * mask/(1-p) @ V with the recovered mask",
    )


def _snap(w: torch.Tensor, kept: torch.Tensor, noise: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(keep, tellable): each measured weight w snapped to 0 or P/(1-p), whichever is nearer; told apart only where
    P/(1-p) exceeds four times the bound on the measurement's error, so that a wrong snap is impossible."""
    return (w - kept).abs() < w.abs(), (kept > 4 * noise) & rows[..., None]


def _recovered(att: _Attention) -> tuple[torch.Tensor, torch.Tensor]:
    """(keep, tellable) recovered from the output: out_row = w @ V with w_j = P_j * mask_j / (1-p).

    When the nonzero rows of V are independent (at most E_v of them) w is the least-squares solution in float64,
    its error at most the output's error bound times the norm of column j of pinv(V). A zero row of V (the zero
    attention of multi-head attention) leaves no trace of its weight: never told. With p 0 or 1 nothing is drawn:
    the mask is known."""
    everything = torch.ones_like(att.weights, dtype=torch.bool)
    if att.p in (0.0, 1.0):
        return everything, everything & att.rows[..., None]
    live = att.values.ne(0).any(-1)
    length, width = int(live.sum(-1).max()), att.values.shape[-1]
    if length > width:
        raise NotCheckable(
            f"dropout inside attention: the mask cannot be recovered when L_k > E_v ({length} > {width})"
        )
    singular = torch.linalg.svdvals(att.values)
    if ((singular > singular[:, :1] * width * 1e-12).sum(-1) < live.sum(-1)).any():
        raise NotCheckable(
            "dropout inside attention: the rows of V are linearly dependent, the mask cannot be recovered"
        )
    pinv = torch.linalg.pinv(att.values)
    noise = att.error.norm(dim=-1, keepdim=True) * pinv.norm(dim=-2, keepdim=True)
    keep, tellable = _snap(att.out @ pinv, att.kept, noise, att.rows)
    return keep, tellable & live[:, None, :]


def _attention_findings(att: _Attention, keep: torch.Tensor, tellable: torch.Tensor) -> list[Finding]:
    """The output re-computed with the mask must match the target's; the share dropped among the weights whose
    mask could be told is binomial in p (when something is drawn)."""
    n = int(tellable.sum())
    if n == 0:
        raise NotCheckable("dropout inside attention: no attention weight stands out of the rounding noise")
    findings = [_recomputed(att, keep, ~tellable)]
    if 0 < att.p < 1 and n >= MIN_N:
        findings.append(
            _share(
                "share of dropped weights",
                int((tellable & ~keep).sum()),
                n,
                att.p,
                f"p={att.p:g}, n={n} attention weights large enough to tell",
            )
        )
    return findings


def _sdpa(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Dropout inside attention, the mask recovered from the output (see _recovered)."""
    att = _attention(args, kwargs, outputs)
    return _attention_findings(att, *_recovered(att))


# ------------------------------------------------------------------------------------------ multi-head attention


@dataclass(frozen=True)
class _Bounded:
    """A value the target computes, recomputed in float64, and a bound on the distance of the target's copy."""

    value: torch.Tensor
    error: torch.Tensor

    @property
    def top(self) -> torch.Tensor:
        """Bound on the magnitude of the target's copy."""
        return self.value.abs() + self.error

    def cat(self, extra: torch.Tensor, dim: int) -> _Bounded:
        """Rows the target appends exactly (bias_k/bias_v, zero attention)."""
        return _Bounded(torch.cat([self.value, extra], dim), torch.cat([self.error, torch.zeros_like(extra)], dim))

    def split_heads(self, heads: int) -> _Bounded:
        """(S, N, E) -> (N*heads, S, E/heads), torch's view(S, N*heads, head_dim).transpose(0, 1)."""
        return _Bounded(
            *(t.reshape(t.shape[0], t.shape[1] * heads, -1).transpose(0, 1) for t in (self.value, self.error))
        )


def _rounding(dtype: torch.dtype, n: int) -> float:
    """Relative error, against the sum of the terms' magnitudes, of x @ W^T + b over n features in the dtype: the
    product and the bias rounded to the dtype (one rtol covers both) and n+1 terms accumulated."""
    return _rtol(dtype) + (n + 1) * _accumulation(dtype)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> _Bounded:
    """An input projection in float64 and the bound on the target's rounding of it."""
    x64, w64 = _f64(x), _f64(_float_tensor(weight, "a projection weight"))
    b64 = torch.zeros(w64.shape[0], dtype=torch.float64) if bias is None else _f64(bias)
    if x64.shape[-1] != w64.shape[1] or b64.shape != w64.shape[:1]:
        raise NotCheckable(
            f"projection weight {tuple(w64.shape)} or bias {tuple(b64.shape)} does not fit inputs "
            f"of {x64.shape[-1]} features"
        )
    size = x64.abs() @ w64.abs().T + b64.abs()
    return _Bounded(x64 @ w64.T + b64, _rounding(dtype, w64.shape[1]) * size + _tiny(dtype))


def _mha_projections(
    args: tuple, kwargs: dict, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dtype: torch.dtype
) -> tuple[_Bounded, _Bounded, _Bounded]:
    """The in-projected q, k, v, (L or S, N, E), from the packed in_proj_weight or the three separate weights."""
    bias = _arg(args, kwargs, 6, "in_proj_bias", None)
    biases = (None,) * 3 if bias is None else _f64(_float_tensor(bias, "in_proj_bias")).chunk(3)
    if _arg(args, kwargs, 17, "use_separate_proj_weight", False):
        weights = tuple(_arg(args, kwargs, 18 + i, f"{x}_proj_weight", None) for i, x in enumerate("qkv"))
    else:
        weights = _f64(_float_tensor(_arg(args, kwargs, 5, "in_proj_weight", None), "in_proj_weight")).chunk(3)
    return tuple(_linear(x, w, b, dtype) for x, w, b in zip((query, key, value), weights, biases, strict=True))


def _additive(mask: Any, name: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A mask as torch adds it to the logits (a bool True is -inf) and the magnitude of its finite values."""
    if mask is None:
        return None
    mask = _tensor(mask, name).detach().cpu()
    if mask.dtype == torch.bool:
        zeros = torch.zeros(mask.shape, dtype=torch.float64)
        return zeros.masked_fill(mask, -math.inf), zeros
    if not mask.is_floating_point():
        raise NotCheckable(f"{name} is neither bool nor floating point ({mask.dtype})")
    mask = _f64(mask)
    return mask, mask.abs().nan_to_num(0.0, 0.0, 0.0)


def _mha_mask(
    args: tuple, kwargs: dict, batch: int, heads: int, shape: tuple[int, int], pad: int, need_weights: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The merged attn_mask + key_padding_mask, (N*H or 1, L, S), padded with allowed columns for bias_k and the
    zero attention, and the magnitude of its finite terms. torch turns is_causal into SDPA's causal mask (and
    ignores attn_mask) only without key_padding_mask and without weights."""
    kpm = _additive(_arg(args, kwargs, 14, "key_padding_mask", None), "key_padding_mask")
    attn = _additive(_arg(args, kwargs, 16, "attn_mask", None), "attn_mask")
    total = [torch.zeros(1, *shape, dtype=torch.float64)] * 2
    if _arg(args, kwargs, 24, "is_causal", False) and kpm is None and not need_weights:
        return total[0].masked_fill(~torch.ones(shape, dtype=torch.bool).tril(), -math.inf), total[1]
    if attn is not None:
        attn = [torch.nn.functional.pad(t, (0, pad)).reshape(-1, *t.shape[-2:-1], shape[1]) for t in attn]
        if attn[0].shape[-2:] != shape or attn[0].shape[0] not in (1, batch * heads):
            raise NotCheckable(
                f"attn_mask of shape {tuple(attn[0].shape)} does not fit {batch * heads} heads of "
                f"{shape[0]} queries and {shape[1]} keys"
            )
        total = [a + b for a, b in zip(total, attn, strict=True)]
    if kpm is not None:
        kpm = [torch.nn.functional.pad(t.reshape(-1, t.shape[-1]), (0, pad)) for t in kpm]
        if kpm[0].shape != (batch, shape[1]):
            raise NotCheckable(
                f"key_padding_mask of shape {tuple(kpm[0].shape)} does not fit {batch} batch entries of {shape[1]} keys"
            )
        total = [a + b.repeat_interleave(heads, 0)[:, None] for a, b in zip(total, kpm, strict=True)]
    return total[0], total[1]


def _undo_out_proj(
    args: tuple, kwargs: dict, out: torch.Tensor, size: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The heads' outputs (N*H, L, hd) that the target fed to out_proj, recovered from attn_output (L, N, E_out) as
    (attn_output - b) @ pinv(W^T), and the bound on their error: out_proj's rounding, bounded with `size` (a bound
    on the heads' outputs), carried through |pinv(W^T)|, plus the float64 solve's cond(W) roundoffs."""
    weight = _f64(_float_tensor(_arg(args, kwargs, 11, "out_proj_weight", None), "out_proj_weight"))
    bias = _arg(args, kwargs, 12, "out_proj_bias", None)
    bias = torch.zeros(out.shape[-1], dtype=torch.float64) if bias is None else _f64(_float_tensor(bias, "bias"))
    length, batch, width = size.shape[1], out.shape[1], size.shape[0] * size.shape[2] // out.shape[1]
    if weight.shape != (out.shape[-1], width) or bias.shape != weight.shape[:1] or out.shape[0] != length:
        raise NotCheckable(
            f"attn_output {tuple(out.shape)} does not fit out_proj_weight {tuple(weight.shape)} and {length} queries"
        )
    singular = torch.linalg.svdvals(weight)
    if weight.shape[0] < width or singular[-1] <= singular[0] * width * 1e-12:
        raise NotCheckable("out_proj_weight has rank below embed_dim: the heads' outputs cannot be recovered")
    inverse = torch.linalg.pinv(weight.T)
    centred = out - bias
    heads = size.transpose(0, 1).reshape(length, batch, width)
    error = _rounding(dtype, width) * (heads @ weight.abs().T + bias.abs()) + _tiny(dtype)
    solve = width * 2.0**-52 * (singular[0] / singular[-1]).item() * (centred.abs() @ inverse.abs())
    return tuple(
        t.reshape(length, size.shape[0], -1).transpose(0, 1) for t in (centred @ inverse, error @ inverse.abs() + solve)
    )


@dataclass(frozen=True)
class _MultiHead:
    """A multi-head attention call as its check needs it: the attention per batch entry and head, the relative
    error bound of each attention weight per row, and the returned weights, averaged over `group` heads."""

    attention: _Attention
    rel: torch.Tensor  # (N*H, L, 1)
    returned: torch.Tensor | None  # (N*H / group, L, S), float64
    group: int
    dtype: torch.dtype


def _mha_call(args: tuple, kwargs: dict, outputs: list) -> _MultiHead:
    """torch's multi_head_attention_forward re-traced in float64 up to the attention, the heads' outputs recovered
    from attn_output, every step with a bound on the target's rounding.

    Rounding the in-projected q and k moves each logit by at most (|q|+dq)(|k|+dk) - |q||k| (scaled), and the
    scaling, logit, and mask roundings by 2 rtol of the magnitudes; logits moved by at most d change a softmax
    weight by a factor within exp(+-2d). The softmax, the dropout scale and product add 2 rtol, the sums their
    accumulation."""
    query, key, value = (
        _float_tensor(_arg(args, kwargs, i, name, None), name) for i, name in enumerate(("query", "key", "value"))
    )
    out = _output(outputs)
    dtype, r, acc = out.dtype, _rtol(out.dtype), _accumulation(out.dtype)
    if _arg(args, kwargs, 21, "static_k", None) is not None or _arg(args, kwargs, 22, "static_v", None) is not None:
        raise NotCheckable("static_k/static_v stand in for the projected keys and values: not reproduced")
    if query.dim() not in (2, 3) or key.dim() != query.dim() or value.dim() != query.dim():
        raise NotCheckable("query, key and value are neither all 2-D (unbatched) nor all 3-D (batched)")
    if query.dim() == 2:
        query, key, value, out = (t.unsqueeze(1) for t in (query, key, value, out))
    heads = int(_number(_arg(args, kwargs, 4, "num_heads", None), "num_heads"))
    training = bool(_arg(args, kwargs, 13, "training", True))
    p = _probability(_arg(args, kwargs, 10, "dropout_p", None)) if training else 0.0
    need_weights = bool(_arg(args, kwargs, 15, "need_weights", True))
    length, batch, embed = query.shape
    if heads <= 0 or embed % heads:
        raise NotCheckable(f"embed_dim {embed} is not divisible by num_heads {heads}")
    q, k, v = _mha_projections(args, kwargs, query, key, value, dtype)
    pad = 0
    bias_k, bias_v = _arg(args, kwargs, 7, "bias_k", None), _arg(args, kwargs, 8, "bias_v", None)
    if bias_k is not None or bias_v is not None:
        k, v = (
            t.cat(_f64(_float_tensor(b, name)).reshape(1, 1, embed).expand(1, batch, embed), 0)
            for t, b, name in ((k, bias_k, "bias_k"), (v, bias_v, "bias_v"))
        )
        pad += 1
    q, k, v = (t.split_heads(heads) for t in (q, k, v))
    if _arg(args, kwargs, 9, "add_zero_attn", False):
        k, v = (t.cat(torch.zeros(batch * heads, 1, embed // heads, dtype=torch.float64), 1) for t in (k, v))
        pad += 1
    keys = k.value.shape[1]
    mask, mask_size = _mha_mask(args, kwargs, batch, heads, (length, keys), pad, need_weights)
    scale = (embed // heads) ** -0.5
    logits = q.value @ k.value.transpose(1, 2) * scale + mask
    top = q.top @ k.top.transpose(1, 2) * scale
    shift = top - q.value.abs() @ k.value.abs().transpose(1, 2) * scale
    shift = (shift + (2 * r + embed // heads * acc) * top + 2 * r * mask_size).masked_fill(logits == -math.inf, 0)
    rel = torch.expm1(2 * shift.amax(-1, keepdim=True)) + 2 * r + (keys + 1) * acc
    weights = torch.softmax(logits, -1).nan_to_num(0.0)
    kept = weights / (1 - p) if p < 1 else torch.zeros_like(weights)
    error = (rel + ((keys + 1) * acc + r) * (1 + rel)) * (kept @ v.top) + kept @ v.error + _tiny(dtype)
    heads_out, heads_error = _undo_out_proj(args, kwargs, _f64(out), kept @ v.top + error, dtype)
    rows = (weights.sum(-1) > 0) & torch.isfinite(heads_out).all(-1)
    attention = _Attention(weights, v.value, heads_out, error + heads_error, rows, p)
    group = heads if _arg(args, kwargs, 23, "average_attn_weights", True) else 1
    returned = outputs[1] if need_weights and len(outputs) > 1 else None
    if returned is not None:
        returned = _f64(_tensor(returned, "attn_output_weights"))
        if returned.numel() != batch * heads // group * length * keys:
            raise NotCheckable(
                f"attn_output_weights {tuple(returned.shape)} does not fit {batch} batch entries, "
                f"{heads // group} heads, {length} queries and {keys} keys"
            )
        returned = returned.reshape(-1, length, keys)
    return _MultiHead(attention, rel, returned, group, dtype)


def _mha_weights(call: _MultiHead, keep: torch.Tensor, loose: torch.Tensor) -> Finding:
    """The returned attention weights against softmax(q k^T) * mask/(1-p) with the mask found, averaged over heads
    where torch averages them (its mean accumulated and rounded to the dtype); weights whose mask could not be
    told may lie anywhere between 0 and P/(1-p)."""
    att, tiny = call.attention, _tiny(call.dtype)
    size = att.kept * (1 + call.rel) + tiny
    model, slack, valid = att.kept * keep, call.rel * att.kept + tiny + loose * size, att.rows[..., None] & (size > 0)
    if call.group > 1:
        model, slack, size = (t.reshape(-1, call.group, *t.shape[-2:]).mean(1) for t in (model, slack, size))
        slack = slack + (2 * _rtol(call.dtype) + call.group * _accumulation(call.dtype)) * size + tiny
        valid = valid.reshape(-1, call.group, *valid.shape[-2:]).all(1)
    bad = valid & ~((call.returned - model).abs() <= slack)
    which = "head-averaged weights" if call.group > 1 else "weights"
    return _count(
        "attention weights",
        bad,
        int(valid.sum()),
        f"returned {which} match softmax(q k^T) * mask/(1-p)",
        f"returned {which} differ from softmax(q k^T) * mask/(1-p)",
    )


def _mha(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Dropout inside multi-head attention: per head, the mask is read off the returned per-head weights (P/(1-p)
    or 0) where torch returns them, else recovered from the heads' outputs as for scaled_dot_product_attention;
    then the same findings, plus the returned weights against the mask."""
    call = _mha_call(args, kwargs, outputs)
    att = call.attention
    if call.returned is not None and call.group == 1 and 0 < att.p < 1:
        keep, tellable = _snap(call.returned, att.kept, call.rel * att.kept + _tiny(call.dtype), att.rows)
    else:
        keep, tellable = _recovered(att)
    findings = _attention_findings(att, keep, tellable)
    return findings if call.returned is None else [*findings, _mha_weights(call, keep, ~tellable)]


# ---------------------------------------------------------------------------------------------------- tables

_DROPOUTS = {
    "Functional.dropout": _dropout("training", True),
    "Functional.dropout1d": _dropout("training", True, lead=_channels_1d),
    "Functional.dropout2d": _dropout("training", True, lead=_channels),
    "Functional.dropout3d": _dropout("training", True, lead=_channels_3d),
    "Functional.alpha_dropout": _dropout("training", False, alpha=True),
    "Functional.feature_alpha_dropout": _dropout("training", False, alpha=True, lead=_channels),
    "Torch.dropout": _dropout("train", True),
    "Torch.feature_dropout": _dropout("train", True, lead=_channels),
    "Torch.alpha_dropout": _dropout("train", True, alpha=True),
    "Torch.feature_alpha_dropout": _dropout("train", True, alpha=True, lead=_channels),
}

CHECKS: dict[str, Check] = {
    **{name: forward for name, (forward, _) in _DROPOUTS.items()},
    "Functional.rrelu": _rrelu,
    "Functional.rrelu_": _rrelu,
    "Functional.gumbel_softmax": _gumbel_softmax,
    "Functional.fractional_max_pool2d": _fractional_max_pool(2),
    "Functional.fractional_max_pool3d": _fractional_max_pool(3),
    "Functional.scaled_dot_product_attention": _sdpa,
    "Functional.multi_head_attention_forward": _mha,
    "Torch.rand": _rand,
    "Torch.rand_like": _rand,
    "Torch.randn": _randn,
    "Torch.randn_like": _randn,
    "Torch.randint": _randint,
    "Torch.randint_like": _randint_like,
    "Torch.randperm": _randperm,
    "Torch.normal": _normal,
    "Torch.bernoulli": _bernoulli,
    "Tensor.bernoulli": _bernoulli,
    "Tensor.bernoulli_": _bernoulli_,
    "Torch.poisson": _poisson,
    "Torch.multinomial": _multinomial,
    "Tensor.multinomial": _multinomial,
    "Tensor.uniform_": _uniform_,
    "Tensor.normal_": _normal_,
    "Tensor.exponential_": _exponential_,
    "Tensor.random_": _random_,
    "Tensor.cauchy_": _cauchy_,
    "Tensor.log_normal_": _log_normal_,
    "Tensor.geometric_": _geometric_,
}

BACKWARD_CHECKS: dict[str, BackwardCheck] = {name: backward for name, (_, backward) in _DROPOUTS.items()}
