"""Random layers other than dropout: rrelu's slopes within [lower, upper], gumbel softmax's argmax law, fractional
max pooling's windows.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch

from api_registry.calls import arg
from precheck.core.older_python import zip_strict
from precheck.grader.laws.base import (
    MIN_N,
    Check,
    Finding,
    NotCheckable,
    aliased,
    count_finding,
    f64,
    float_tensor_arg,
    moment_findings,
    number_arg,
    output_tensor,
    range_finding,
    rtol_of,
    same_values,
    sum_finding,
    tensor_arg,
    tiny_of,
    uniform_law,
)


def rrelu_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Training: x >= 0 passes unchanged, a negative x is multiplied by a slope drawn uniformly from [lower, upper]:
    the slopes out/x lie in that range (up to the dtype's rounding) and follow the uniform law's mean and variance.
    Evaluation: the slope is (lower+upper)/2, no draw."""
    x = float_tensor_arg(arg(args, kwargs, 0, "input", None), "the input")
    out = output_tensor(outputs)
    lower = number_arg(arg(args, kwargs, 1, "lower", 1 / 8), "lower")
    upper = number_arg(arg(args, kwargs, 2, "upper", 1 / 3), "upper")
    training = bool(arg(args, kwargs, 3, "training", False))
    if out.shape != x.shape:
        raise NotCheckable(f"output shape {tuple(out.shape)} differs from the input's {tuple(x.shape)}")
    if not 0 <= lower <= upper:
        raise NotCheckable(f"slopes [{lower:g}, {upper:g}] are not an interval of non-negative numbers")
    if training and aliased(x, out):
        raise NotCheckable("rrelu ran in place: the input was overwritten, its slopes cannot be measured")
    x64, o64 = f64(x), f64(out)
    rtol, tiny = rtol_of(out.dtype), tiny_of(out.dtype)
    findings = [
        count_finding(
            "positive inputs",
            (x64 >= 0) & ~same_values(o64, x64),
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
            count_finding(
                "slope",
                bad,
                xs.numel(),
                f"negative inputs are scaled by {slope:g}",
                f"negative inputs are not scaled by (lower+upper)/2={slope:g}",
            )
        ]
    inside = (os >= xs * upper * (1 + rtol) - tiny) & (os <= xs * lower * (1 - rtol) + tiny)
    findings.append(
        count_finding(
            "slopes",
            ~inside,
            xs.numel(),
            f"slopes out/x of negative inputs in [{lower:g}, {upper:g}]",
            f"slopes out/x of negative inputs are outside [{lower:g}, {upper:g}]",
        )
    )
    precise = xs.abs() >= tiny / rtol  # below, the product is subnormal and its ratio to x imprecise
    law = uniform_law(lower, upper)
    law = replace(law, label="slopes, " + law.label)
    return findings + moment_findings(os[precise] / xs[precise], law, rtol * (upper + 1))


# ---------------------------------------------------------------------------------------------------- gumbel softmax


def gumbel_softmax_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Every row along dim is a probability vector (one-hot when hard). The argmax of a row is the argmax of
    logits + Gumbel noise whatever tau, so it follows softmax(logits): the summed probability of the chosen
    categories is checked against its mean sum(p^2) with Bernstein (terms in [0, 1]). That check runs for float32
    and float64 only: half-precision noise rounds (logits + noise) into ties that bias the argmax."""
    logits = float_tensor_arg(arg(args, kwargs, 0, "logits", None), "the logits")
    out = output_tensor(outputs)
    tau = number_arg(arg(args, kwargs, 1, "tau", 1.0), "tau")
    hard = bool(arg(args, kwargs, 2, "hard", False))
    dim = int(number_arg(arg(args, kwargs, 4, "dim", -1), "dim"))
    if out.shape != logits.shape or logits.dim() == 0:
        raise NotCheckable(f"output shape {tuple(out.shape)} differs from the logits' {tuple(logits.shape)}")
    if logits.isnan().any() or tau <= 0:
        raise NotCheckable("NaN logits or tau <= 0: no law to check against")
    k = out.shape[dim]
    y = f64(out).movedim(dim, -1).reshape(-1, k)
    tol = rtol_of(out.dtype) * max(1.0, math.log2(k))  # each value rounded, plus the normalising sum's rounding
    sums = count_finding(
        "sums",
        (y.sum(-1) - 1).abs() > tol,
        y.shape[0],
        f"rows sum to 1 within {tol:.3g}",
        f"rows do not sum to 1 within {tol:.3g}",
    )
    findings = [range_finding(y, 0, 1 + tol), sums]
    if hard:
        ones = ((y - 1).abs() <= tol).sum(-1)
        zeros = (y.abs() <= tol).sum(-1)
        findings.append(
            count_finding(
                "one-hot", (ones != 1) | (zeros != k - 1), y.shape[0], "rows are one-hot", "rows are not one-hot"
            )
        )
    if out.dtype in (torch.float32, torch.float64) and y.shape[0] >= MIN_N:
        findings.append(_argmax_law(y, torch.softmax(f64(logits).movedim(dim, -1).reshape(-1, k), -1)))
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
    return sum_finding(
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
        return tuple(int(d if s is None else s) for s, d in zip_strict(sizes, dims))
    if output_ratio is None:
        raise NotCheckable("neither output_size nor output_ratio is given")
    return tuple(int(d * float(r)) for r, d in zip_strict(_per_dim(output_ratio, spatial, "output_ratio"), dims))


def _per_dim(value: Any, spatial: int, name: str) -> tuple:
    """A pooling parameter given once for all spatial dims or once per dim."""
    values = (value,) * spatial if isinstance(value, (int, float)) else tuple(value)
    if len(values) != spatial:
        raise NotCheckable(f"{name} has {len(values)} entries for {spatial} spatial dims")
    return values


def fractional_max_pool_law(spatial: int) -> Check:
    """The output has the size asked for, every output value is an element of its input plane (each is the
    maximum of a window), and the indices, when returned, point at the input elements equal to the output."""

    def check(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
        x = tensor_arg(arg(args, kwargs, 0, "input", None), "the input")
        out = output_tensor(outputs)
        if x.dim() not in (spatial + 1, spatial + 2):
            raise NotCheckable(f"expected a {spatial + 1}-D or {spatial + 2}-D input, got {x.dim()}-D")
        size = _pool_size(
            x, spatial, arg(args, kwargs, 2, "output_size", None), arg(args, kwargs, 3, "output_ratio", None)
        )
        want = tuple(x.shape[:-spatial]) + size
        ok = tuple(out.shape) == want
        findings = [Finding("shape", ok, f"shape: output {tuple(out.shape)} {'is' if ok else 'is not'} {want}")]
        if not ok:
            return findings
        planes = f64(x).reshape(-1, math.prod(x.shape[-spatial:]))
        pooled = f64(out).reshape(planes.shape[0], -1)
        findings.append(_members(planes, pooled))
        if arg(args, kwargs, 4, "return_indices", False):
            findings.append(_pool_indices(planes, pooled, output_tensor(outputs, 1)))
        return findings

    return check


def _members(planes: torch.Tensor, pooled: torch.Tensor) -> Finding:
    """Whether each pooled value occurs in its input plane (binary search in the sorted plane; NaN matches NaN)."""
    ordered = planes.sort(-1).values
    pos = torch.searchsorted(ordered, pooled).clamp(max=ordered.shape[1] - 1)
    found = (ordered.gather(1, pos) == pooled) | (pooled.isnan() & planes.isnan().any(1, keepdim=True))
    return count_finding(
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
    return count_finding(
        "indices",
        ~(inside & same_values(gathered, pooled)),
        pooled.numel(),
        "indices point at input elements equal to the output",
        "indices are out of the plane or point at an element that differs from the output",
    )
