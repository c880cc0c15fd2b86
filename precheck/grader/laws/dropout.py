"""The dropout family's law: a share p of the units dropped (within binomial bounds), survivors scaled by
1/(1-p) (alpha dropout: an affine map), and gradients that follow the same mask.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from api_registry.calls import arg
from precheck.grader.laws.base import (
    MIN_N,
    SELU_ALPHA,
    BackwardCheck,
    Check,
    Finding,
    NotCheckable,
    aliased,
    count_finding,
    f64,
    float_tensor_arg,
    number_arg,
    output_tensor,
    rtol_of,
    same_values,
    share_finding,
    tiny_of,
)


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


def per_element_unit(x: torch.Tensor) -> int:
    return 0


def per_channel(x: torch.Tensor) -> int:
    return 2


def per_channel_1d(x: torch.Tensor) -> int:
    """dropout1d takes (C, L) unbatched, where a channel is a row, or (N, C, L)."""
    return 1 if x.dim() == 2 else 2


def per_channel_3d(x: torch.Tensor) -> int:
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
    x = float_tensor_arg(arg(args, kwargs, 0, "input", None), "the input")
    out = output_tensor(outputs)
    p = number_arg(arg(args, kwargs, 1, "p", 0.5), "p")
    training = bool(arg(args, kwargs, 2, train_name, train_default))
    if out.shape != x.shape:
        raise NotCheckable(f"output shape {tuple(out.shape)} differs from the input's {tuple(x.shape)}")
    if not 0 <= p <= 1:
        raise NotCheckable(f"p={p:g} is not a probability")
    if training and 0 < p < 1 and aliased(x, out):
        raise NotCheckable("dropout ran in place: the input was overwritten, survivors cannot be compared with it")
    units = lead(x)
    if x.dim() < units:
        raise NotCheckable(f"feature dropout needs at least {units} dimensions, the input has {x.dim()}")
    return _DropoutCall(f64(x), f64(out), out.dtype, p, training, alpha, units)


def _dropout_model(call: _DropoutCall) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """(value of a kept element, value of a dropped one, tolerance, gradient scale of a kept element).

    Dropout keeps x/(1-p) and drops to 0. Alpha dropout keeps a*x + b and drops to a*alpha' + b, with
    a = ((1-p)(1 + p alpha'^2))^-1/2 and b = -a alpha' p (torch's Dropout.cpp); its four roundings (a, the product,
    b, the sum) get twice the tolerance, relative to the terms summed."""
    rtol, x, p = rtol_of(call.dtype), call.x, call.p
    if not call.alpha:
        kept = x / (1 - p)
        return kept, torch.zeros_like(x), tiny_of(call.dtype) + rtol * kept.abs(), 1 / (1 - p)
    a = ((1 - p) * (1 + p * SELU_ALPHA**2)) ** -0.5
    b = -a * SELU_ALPHA * p
    dropped = a * SELU_ALPHA + b
    tol = tiny_of(call.dtype) + 2 * rtol * (a * x.abs() + abs(b) + abs(dropped))
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
    text = f"{values} within rel. {rtol_of(call.dtype):.3g} (p={call.p:g})"
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
            count_finding(
                "identity",
                ~same_values(call.out, call.x),
                call.out.numel(),
                "outputs equal the input (no draw)",
                "outputs differ from the input although nothing is dropped",
            )
        ]
    if call.zeros:
        finite = torch.isfinite(call.x)
        return [
            count_finding(
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
            count_finding(
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
        findings.append(share_finding(what, int(all_dropped.sum()), n, call.p, f"p={call.p:g}, n={units}"))
    return findings


def _gradient(grad_outputs: list, grads: dict, shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    """(gradient fed into the output, gradient of the input), float64."""
    if not grad_outputs or not isinstance(grad_outputs[0], torch.Tensor):
        raise NotCheckable("no gradient was fed into the output")
    if not isinstance(grads.get(0), torch.Tensor):
        raise NotCheckable("no gradient of the input")
    if grad_outputs[0].shape != shape or grads[0].shape != shape:
        raise NotCheckable("the gradients do not have the input's shape")
    return f64(grad_outputs[0]), f64(grads[0])


def _dropout_gradient(call: _DropoutCall, grad_outputs: list, grads: dict) -> list[Finding]:
    """The input gradient is grad_output times the forward's mask times the kept scale (1/(1-p), or a for alpha
    dropout). The mask is read off the forward output; where it cannot be (a zero input outside a channel known to
    be kept or dropped, a non-finite input) either value is accepted."""
    g, gx = _gradient(grad_outputs, grads, call.x.shape)
    rtol, tiny = rtol_of(call.dtype), tiny_of(call.dtype)
    if call.identity or call.zeros:
        scale = 0.0 if call.zeros else 1.0
        bad = (gx - g * scale).abs() > tiny + rtol * (g * scale).abs()
        return [
            count_finding(
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
        count_finding(
            "gradient",
            bad,
            gx.numel(),
            f"input gradients equal grad_output*mask*{scale:.6g}",
            f"input gradients differ from grad_output*mask*{scale:.6g} (mask read off the output)",
        )
    ]


def dropout_checks(
    train_name: str, train_default: bool, alpha: bool = False, lead: Callable[[torch.Tensor], int] = per_element_unit
) -> tuple[Check, BackwardCheck]:
    """Forward and backward checks of one dropout API: its training parameter's name and default, its kind."""

    def forward(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
        return _dropout_findings(_dropout_call(args, kwargs, outputs, train_name, train_default, alpha, lead))

    def backward(args: tuple, kwargs: dict, outputs: list, grad_outputs: list, grads: dict) -> list[Finding]:
        call = _dropout_call(args, kwargs, outputs, train_name, train_default, alpha, lead)
        return _dropout_gradient(call, grad_outputs, grads)

    return forward, backward
