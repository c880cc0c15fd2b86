"""Run one case on one side: rebuild its call, run forward, then backward with the recorded gradients.

Gradients are fed into every output that the backward record holds one for (not only output 0), and the
gradients of every input tensor that required grad during recording are collected, positional and keyword
alike. ``i`` of ``<API>.backward.output.<i>`` counts every tensor of the positional arguments (depth first,
whether or not it needs a gradient), as msprobe numbers them, and continues through the keyword arguments,
which msprobe never compares.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from api_registry import ApiEntry
from precheck.dump import DeviceArg, TensorSpec
from precheck.targets import CompileError, Side


@dataclass
class SideRun:
    """What one side produced: flat forward outputs, input gradients (None where no gradient flowed), or the
    one-line error the call raised."""

    outputs: list[Any]
    grads: dict[int, torch.Tensor | None] | None = None  # tensor-argument index -> gradient
    error: str | None = None
    compile_failed: bool = False  # the error is the compiler's, not the API's


def flatten(value: Any) -> list[Any]:
    """Output leaves in order; torch.Size and other non-container values are single leaves."""
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        return [leaf for v in value for leaf in flatten(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in flatten(v)]
    return [value]


def one_line(e: BaseException) -> str:
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first[:300]}" if first else type(e).__name__


class _Leaves:
    """Numbers the tensor arguments as they are built and keeps those that need a gradient."""

    def __init__(self, grad: bool) -> None:
        self.count = 0
        self.grad = grad  # False for an out= call: autograd refuses those, and msprobe saw no backward
        self.needing_grad: dict[int, torch.Tensor] = {}


def _build(tree: Any, loaded: Any, side: Side, leaves: _Leaves, inplace: bool) -> Any:
    """This side's argument tree, built depth first so tensor arguments are numbered in argument order."""
    if isinstance(tree, TensorSpec):
        t = side.tensor(loaded)
        index = leaves.count
        leaves.count += 1
        if leaves.grad and tree.requires_grad and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_(True)
            leaves.needing_grad[index] = t
            # An in-place API may not modify a leaf that requires grad; it modifies a copy the graph tracks.
            return t.clone() if inplace else t
        return t
    if isinstance(tree, tuple):
        return tuple(_build(v, value, side, leaves, inplace) for v, value in zip(tree, loaded, strict=False))
    if isinstance(tree, dict):
        return {k: _build(v, loaded[k], side, leaves, inplace) for k, v in tree.items()}
    if isinstance(tree, torch.dtype):
        return side.dtype(tree)
    if isinstance(tree, DeviceArg):
        return side.device_arg(tree)
    return tree


def run_side(
    entry: ApiEntry,
    args: tuple,
    kwargs: dict,
    loaded_args: tuple,
    loaded_kwargs: dict,
    grad_outputs: tuple | None,
    side: Side,
    func: Callable[..., Any] | None = None,
) -> SideRun:
    """Forward (and backward where recorded) of one call on one side; exceptions become ``SideRun.error``.
    ``func`` replaces the API's callable (a compiled one)."""
    leaves = _Leaves(grad=kwargs.get("out") is None)
    try:
        call_args = _build(args, loaded_args, side, leaves, entry.inplace)
        call_kwargs = _build(kwargs, loaded_kwargs, side, leaves, entry.inplace)
        # The golden side runs the API's float64 reference where it has one; the honest side only where the API
        # itself cannot run on the CPU (NPU fused ops), since a down-cast's own rounding is what it must measure.
        reference = entry.golden if side.golden or side.honest and entry.needs_device else None
        func = func or reference or entry.func
        with torch.set_grad_enabled(bool(leaves.needing_grad)):
            result = func(*call_args, **call_kwargs)
        if result is None and entry.inplace and call_args:
            result = call_args[0]  # __setitem__ and friends return None; the mutated tensor is the output
        outputs = flatten(result)
        grads = (
            _backward(outputs, leaves.needing_grad, grad_outputs, side)
            if grad_outputs is not None and leaves.needing_grad
            else None
        )
        side.synchronize()
        if entry.canonical:
            outputs = entry.canonical(call_args, call_kwargs, [_detach(o) for o in outputs])
    except CompileError as e:
        return SideRun(outputs=[], error=str(e), compile_failed=True)
    except Exception as e:  # the API's own failure is this case's result, never the run's
        return SideRun(outputs=[], error=one_line(e))
    return SideRun(outputs=[_detach(o) for o in outputs], grads=grads)


def _backward(
    outputs: list[Any], leaves: dict[int, torch.Tensor], grad_outputs: tuple, side: Side
) -> dict[int, torch.Tensor | None]:
    pairs = [
        (out, side.tensor(g))
        for out, g in zip(outputs, flatten(grad_outputs), strict=False)
        if isinstance(out, torch.Tensor) and out.requires_grad and isinstance(g, torch.Tensor)
    ]
    if not pairs:
        return dict.fromkeys(leaves)
    for i, (out, g) in enumerate(pairs):
        if out.shape != g.shape:
            raise ValueError(f"recorded gradient {i} has shape {tuple(g.shape)}, the output {tuple(out.shape)}")
    outs, grads = zip(*pairs, strict=False)
    result = _autograd(outs, grads, tuple(leaves.values()))
    return {i: None if g is None else g.detach() for i, g in zip(leaves, result, strict=False)}


def _autograd(outs: tuple, grads: tuple, inputs: tuple) -> tuple:
    """torch.autograd.grad without its per-call shape check, whose first use imports sympy (about 0.45 s, a
    quarter of a small run). Shapes were checked above; torch.autograd.grad is the fallback."""
    engine = getattr(torch.autograd.Variable, "_execution_engine", None)
    try:
        return engine.run_backward(outs, grads, False, False, inputs, True, False)
    except (AttributeError, TypeError):
        return torch.autograd.grad(outs, inputs, grads, allow_unused=True)


def _detach(value: Any) -> Any:
    return value.detach() if isinstance(value, torch.Tensor) else value
