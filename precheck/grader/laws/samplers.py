"""Samplers (rand, randn, randint, randperm, normal, bernoulli, poisson, multinomial and the in-place
distributions): the law's range, moments and frequencies.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch

from api_registry.calls import arg
from precheck.core.older_python import zip_strict
from precheck.grader.laws.base import (
    MAX_FIXED_POINTS,
    MIN_EXPECTED,
    MIN_N,
    STANDARD_NORMAL,
    Finding,
    Law,
    NotCheckable,
    count_finding,
    deviation,
    eps_of,
    f64,
    integer_law,
    moment_findings,
    number_arg,
    output_tensor,
    range_finding,
    share_finding,
    sum_finding,
    tensor_arg,
    uniform_law,
)


def _draws(outputs: list, floating: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, its values flat in float64)."""
    out = output_tensor(outputs)
    if floating and not out.is_floating_point():
        raise NotCheckable(f"the output is not floating point ({out.dtype})")
    return out, f64(out).flatten()


def _finite(values: torch.Tensor) -> Finding:
    return count_finding("finite", ~torch.isfinite(values), values.numel(), "draws are finite", "draws are not finite")


def rand_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Uniform on [0, 1): the range, mean 1/2 and variance 1/12."""
    out, v = _draws(outputs, floating=True)
    return [range_finding(v, 0, 1, hi_open=True), *moment_findings(v, uniform_law(0, 1), eps_of(out.dtype))]


def randn_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Standard normal: finite, mean 0 and variance 1."""
    out, v = _draws(outputs, floating=True)
    return [_finite(v), *moment_findings(v, STANDARD_NORMAL, eps_of(out.dtype))]


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
    found = range_finding(v, low, high, integer=True)
    return [found, *moment_findings(v, integer_law(lo, hi), eps_of(out.dtype) * max(abs(lo), abs(hi)))]


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
    return number_arg(low, "low"), number_arg(high, "high")


def randint_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    out, v = _draws(outputs)
    return _integers(out, v, *_bounds(args, kwargs))


def randint_like_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    out, v = _draws(outputs)
    return _integers(out, v, *_bounds(args[1:], kwargs))


def randperm_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Exactly a permutation of 0..n-1; and shuffled: a uniform permutation has MAX_FIXED_POINTS + 1 or more fixed
    points with probability at most 1/10! < 3e-7, whatever n (an identity or barely moved output fails)."""
    n = int(number_arg(arg(args, kwargs, 0, "n", None), "n"))
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
            return f64(tensor_arg(value, name)).broadcast_to(shape)
        except RuntimeError as err:
            raise NotCheckable(
                f"{name} of shape {tuple(value.shape)} does not broadcast to the output's {tuple(shape)}"
            ) from err
    return torch.full(shape, number_arg(value, name), dtype=torch.float64)


def _normal_findings(out: torch.Tensor, mean: Any, std: Any) -> list[Finding]:
    """(out - mean)/std is standard normal where std > 0, and out equals mean where std = 0.

    A draw rounded to the output dtype moves by up to eps*|draw|, which averages below eps*(|mean| + std): that
    shift, in std units, widens the moments' bounds. When it reaches a quarter std the dtype cannot resolve the
    law and the call is not checked."""
    o = f64(out)
    mu, sigma = _law_parameter(mean, o.shape, "mean"), _law_parameter(std, o.shape, "std")
    if not (torch.isfinite(mu).all() and torch.isfinite(sigma).all() and (sigma >= 0).all()):
        raise NotCheckable("mean or std is not finite, or std is negative")
    fixed = sigma == 0
    findings = [_finite(o.flatten())]
    if fixed.any():
        at = mu[fixed].to(out.dtype).double()
        findings.append(
            count_finding(
                "zero std",
                o[fixed] != at,
                int(fixed.sum()),
                "draws with std 0 equal the mean",
                "draws with std 0 differ from the mean",
            )
        )
    spread = sigma[~fixed]
    if spread.numel():
        shift = (eps_of(out.dtype) * (mu[~fixed].abs() + spread) / spread).square().mean().sqrt().item()
        if shift > 0.25:
            raise NotCheckable(f"std is below the resolution of {out.dtype} at that mean")
        findings += moment_findings(((o[~fixed] - mu[~fixed]) / spread).flatten(), STANDARD_NORMAL, shift)
    return findings


def normal_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """torch.normal in all its forms: tensor and/or float mean and std, or floats with a size."""
    mean = arg(args, kwargs, 0, "mean", None)
    if mean is None:
        raise NotCheckable("torch.normal without a mean")
    return _normal_findings(_draws(outputs, floating=True)[0], mean, arg(args, kwargs, 1, "std", 1.0))


def normal_inplace_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    out = _draws(outputs, floating=True)[0]
    return _normal_findings(out, arg(args, kwargs, 1, "mean", 0.0), arg(args, kwargs, 2, "std", 1.0))


def log_normal_inplace_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Draws are positive and their log is normal(mean, std). Rounding moves a log by at most eps; when mean ± 7 std
    of the log leaves the dtype's range the draws overflow or underflow and the call is not checked."""
    out, v = _draws(outputs, floating=True)
    mean = number_arg(arg(args, kwargs, 1, "mean", 1.0), "mean")
    std = number_arg(arg(args, kwargs, 2, "std", 2.0), "std")
    if std <= 0:
        raise NotCheckable(f"std={std:g} is not positive")
    info = torch.finfo(out.dtype)
    if mean - 7 * std < math.log(info.tiny) or mean + 7 * std > math.log(info.max):
        raise NotCheckable(f"log-normal draws with mean={mean:g}, std={std:g} leave the range of {out.dtype}")
    law = replace(STANDARD_NORMAL, label="(log(out) - mean) / std, standard normal")
    return [
        count_finding(
            "positive",
            ~((v > 0) & torch.isfinite(v)),
            v.numel(),
            "draws are positive and finite",
            "draws are not positive and finite",
        ),
        *moment_findings((v.clamp_min(info.tiny).log() - mean) / std, law, eps_of(out.dtype) / std),
    ]


def exponential_inplace_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Non-negative draws with mean 1/lambd (Exp(1) terms meet Bernstein's condition with scale 1, computed)."""
    out, v = _draws(outputs, floating=True)
    rate = number_arg(arg(args, kwargs, 1, "lambd", 1.0), "lambd")
    if rate <= 0:
        raise NotCheckable(f"lambd={rate:g} is not positive")
    law = Law(f"exponential, lambd={rate:g}", 1 / rate, 1 / rate**2, 1 / rate)
    return [range_finding(v, 0, math.inf), *moment_findings(v, law, eps_of(out.dtype) * 2 / rate)]


def geometric_inplace_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Integers >= 1 with mean 1/p. The draws' tail decays like exp(-x * -ln(1-p)): their Bernstein scale is below
    1/-ln(1-p) + 1 (computed for p from 0.01 to 0.99)."""
    out, v = _draws(outputs)
    p = number_arg(arg(args, kwargs, 1, "p", None), "p")
    if not 0 < p <= 1:
        raise NotCheckable(f"p={p:g} is not a probability above 0")
    scale = 1 / -math.log1p(-p) + 1 if p < 1 else 1.0
    law = Law(f"geometric, p={p:g}", 1 / p, (1 - p) / p**2, scale)
    return [
        range_finding(v, 1, math.inf, integer=True),
        *moment_findings(v, law, eps_of(out.dtype) * (1 / p + math.sqrt(law.var))),
    ]


def cauchy_inplace_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """No moments: half the draws lie below the median and half within median ± sigma (atan(1) * 2/pi), each share
    checked with the binomial bound. Draws equal to a boundary count half; rounding to the dtype moves a draw by
    eps*(|median| + sigma) near the boundaries, where the density is at most 1/(pi sigma)."""
    out, v = _draws(outputs, floating=True)
    median = number_arg(arg(args, kwargs, 1, "median", 0.0), "median")
    sigma = number_arg(arg(args, kwargs, 2, "sigma", 1.0), "sigma")
    if sigma <= 0:
        raise NotCheckable(f"sigma={sigma:g} is not positive")
    findings = [count_finding("not NaN", v.isnan(), v.numel(), "draws are numbers", "draws are NaN")]
    n = v.numel()
    if n < MIN_N:
        return findings
    slack = 2 * eps_of(out.dtype) * (abs(median) + sigma) / (math.pi * sigma)
    below = ((v < median).sum() + 0.5 * (v == median).sum()).item()
    near = (((v - median).abs() < sigma).sum() + 0.5 * ((v - median).abs() == sigma).sum()).item()
    context = f"median={median:g}, sigma={sigma:g}, n={n}"
    return findings + [
        share_finding("share below median", below, n, 0.5, context, slack),
        share_finding("share within median ± sigma", near, n, 0.5, context, slack),
    ]


def uniform_inplace_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Uniform on [from, to): range (closed: a draw just below `to` may round up to it in a low precision dtype),
    mean and variance; rounding moves a draw by up to eps*max(|from|, |to|)."""
    out, v = _draws(outputs, floating=True)
    lo = number_arg(arg(args, kwargs, 1, "from", 0.0), "from")
    hi = number_arg(arg(args, kwargs, 2, "to", 1.0), "to")
    if hi < lo:
        raise NotCheckable(f"from={lo:g} is above to={hi:g}")
    return [
        range_finding(v, lo, hi),
        *moment_findings(v, uniform_law(lo, hi), eps_of(out.dtype) * max(abs(lo), abs(hi))),
    ]


def _dtype_top(dtype: torch.dtype) -> float:
    """The largest draw of random_ without `to`: 2^digits for floats (every integer below is representable),
    the dtype's maximum for integers."""
    if dtype == torch.bool:
        return 1.0
    if dtype.is_floating_point:
        return 2.0 ** (1 - math.log2(torch.finfo(dtype).eps))
    return float(torch.iinfo(dtype).max)


def random_inplace_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Integers in [from, to) (overloads random_(from, to), random_(to), random_()). With both bounds known the
    draws are also checked against the discrete uniform law; without `to` only the range is."""
    out, v = _draws(outputs)
    rest = args[1:]
    if "from" in kwargs or len(rest) >= 2 or (rest and "to" in kwargs):
        lo, hi = kwargs.get("from", rest[0] if rest else 0), kwargs.get("to", rest[1] if len(rest) > 1 else None)
    else:
        lo, hi = 0, kwargs.get("to", rest[0] if rest else None)
    lo = number_arg(lo, "from")
    if hi is None:
        return [range_finding(v, lo, _dtype_top(out.dtype), integer=True)]
    return _integers(out, v, lo, number_arg(hi, "to"))


def _probabilities(value: Any, shape: torch.Size) -> torch.Tensor:
    probs = _law_parameter(value, shape, "p")
    if not ((probs >= 0) & (probs <= 1)).all():
        raise NotCheckable("probabilities outside [0, 1]")
    return probs


def _bernoulli_findings(out: torch.Tensor, probs: Any) -> list[Finding]:
    """Draws are 0 or 1, certain where p is 0 or 1, and their sum is within the Bernstein bound of sum(p) with
    variance sum(p(1-p))."""
    v = f64(out)
    p = _probabilities(probs, v.shape)
    certain = (p == 0) | (p == 1)
    findings = [
        range_finding(v.flatten(), 0, 1, integer=True, what="values"),
        count_finding(
            "certain draws",
            certain & (v != p),
            int(certain.sum()),
            "draws with p of 0 or 1 equal p",
            "draws with p of 0 or 1 differ from p",
        ),
    ]
    if v.numel() >= MIN_N:
        findings.append(
            sum_finding("sum", v.sum().item(), p.sum().item(), (p * (1 - p)).sum().item(), f"sum of p, n={v.numel()}")
        )
    return findings


def bernoulli_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """torch.bernoulli / Tensor.bernoulli: the input holds the probabilities, unless a float p is given."""
    x = tensor_arg(arg(args, kwargs, 0, "input", None), "the input")
    p = arg(args, kwargs, 1, "p", None)
    return _bernoulli_findings(output_tensor(outputs), x if p is None else p)


def bernoulli_inplace_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    return _bernoulli_findings(output_tensor(outputs), arg(args, kwargs, 1, "p", 0.5))


def poisson_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Non-negative integers, 0 where the rate is 0, and the sum is Poisson(sum of rates): Bennett's bound with
    variance sum(rates) and scale 1/3. Rounding a count to a float dtype moves it by up to eps times the count."""
    rates = f64(tensor_arg(arg(args, kwargs, 0, "input", None), "the rates"))
    out = output_tensor(outputs)
    v = f64(out)
    if rates.shape != v.shape or not (torch.isfinite(rates) & (rates >= 0)).all():
        raise NotCheckable("rates are not finite non-negative numbers of the output's shape")
    idle = rates == 0
    findings = [
        range_finding(v.flatten(), 0, math.inf, integer=True, what="values"),
        count_finding(
            "zero rates", idle & (v != 0), int(idle.sum()), "draws with rate 0 are 0", "draws with rate 0 are not 0"
        ),
    ]
    if v.numel() >= MIN_N:
        total = rates.sum().item()
        findings.append(
            sum_finding("sum", v.sum().item(), total, total, f"sum of rates, n={v.numel()}", eps_of(out.dtype) * total)
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
    for row_counts, row_expected in zip_strict(counts, expected):
        s, d, v = _pearson_row(row_counts, row_expected)
        stat, df, variance = stat + s, df + d, variance + v
    if df == 0:
        return None
    bound = df + deviation(variance, 2.0)
    passed = stat <= bound
    return Finding(
        "frequencies",
        passed,
        f"frequencies: Pearson chi-square {stat:.5g} {'below' if passed else 'above'}"
        f" {bound:.5g} (df={df}, {idx.shape[0]} rows of {idx.shape[1]} draws)",
    )


def multinomial_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Indices are categories of the row, never of weight 0; without replacement no row repeats a category, with
    replacement the category counts follow the weights (when enough draws fall in each cell)."""
    weights = f64(tensor_arg(arg(args, kwargs, 0, "input", None), "the weights"))
    replacement = bool(arg(args, kwargs, 2, "replacement", False))
    out = output_tensor(outputs)
    if weights.dim() not in (1, 2) or not (torch.isfinite(weights) & (weights >= 0)).all():
        raise NotCheckable("weights are not a 1-D or 2-D tensor of finite non-negative numbers")
    weights = weights.reshape(-1, weights.shape[-1])
    if (weights.sum(1) <= 0).any() or out.numel() % weights.shape[0]:
        raise NotCheckable("a row of weights sums to 0, or the output does not have a row per row of weights")
    k = weights.shape[1]
    draws = f64(out).reshape(weights.shape[0], -1)
    found = range_finding(draws.flatten(), 0, k - 1, integer=True, what="categories")
    if not found.passed:
        return [found]
    idx = draws.long()
    picked = weights.gather(1, idx)
    findings = [
        found,
        count_finding(
            "zero weights", picked == 0, idx.numel(), "draws have a nonzero weight", "draws are categories of weight 0"
        ),
    ]
    if not replacement:
        ordered = idx.sort(1).values
        return findings + [
            count_finding(
                "repeats",
                (ordered[:, 1:] == ordered[:, :-1]).any(1),
                idx.shape[0],
                "rows draw each category at most once",
                "rows repeat a category without replacement",
            )
        ]
    frequencies = _frequencies(idx, weights / weights.sum(1, keepdim=True))
    return findings + ([frequencies] if frequencies else [])
