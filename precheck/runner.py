"""Run one case on one side: rebuild its call, run forward, then backward with the recorded gradients.

Gradients are fed into every output that the backward record holds one for (not only output 0), and the
gradients of every input tensor that required grad during recording are collected, positional and keyword
alike, in argument order: that order is the ``i`` of ``<API>.backward.output.<i>``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from api_registry import ApiEntry
from precheck.dump import DeviceArg, TensorSpec
from precheck.targets import Side


@dataclass
class SideRun:
    """What one side produced: flat forward outputs, input gradients (None where no gradient flowed), or the
    one-line error the call raised."""

    outputs: list[Any]
    grads: list[torch.Tensor | None] | None = None
    error: str | None = None


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


def _build(tree: Any, loaded: Any, side: Side, leaves: list[torch.Tensor], inplace: bool) -> Any:
    """This side's argument tree; leaves that need a gradient are created and collected in argument order."""
    if isinstance(tree, TensorSpec):
        t = side.tensor(loaded)
        if tree.requires_grad and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_(True)
            leaves.append(t)
            # An in-place API may not modify a leaf that requires grad; it modifies a copy the graph tracks.
            return t.clone() if inplace else t
        return t
    if isinstance(tree, tuple):
        return tuple(_build(v, l, side, leaves, inplace) for v, l in zip(tree, loaded))
    if isinstance(tree, dict):
        return {k: _build(v, loaded[k], side, leaves, inplace) for k, v in tree.items()}
    if isinstance(tree, torch.dtype):
        return side.dtype(tree)
    if isinstance(tree, DeviceArg):
        return side.device_arg(tree)
    return tree


def run_side(entry: ApiEntry, args: tuple, kwargs: dict, loaded_args: tuple, loaded_kwargs: dict,
             grad_outputs: tuple | None, side: Side) -> SideRun:
    """Forward (and backward where recorded) of one call on one side; exceptions become ``SideRun.error``."""
    leaves: list[torch.Tensor] = []
    try:
        call_args = _build(args, loaded_args, side, leaves, entry.inplace)
        call_kwargs = _build(kwargs, loaded_kwargs, side, leaves, entry.inplace)
        func = entry.golden if side.golden and entry.golden else entry.func
        with torch.set_grad_enabled(bool(leaves)):
            result = func(*call_args, **call_kwargs)
        if result is None and entry.inplace and call_args:
            result = call_args[0]     # __setitem__ and friends return None; the mutated tensor is the output
        outputs = flatten(result)
        grads = _backward(outputs, leaves, grad_outputs, side) if grad_outputs is not None and leaves else None
        side.synchronize()
    except Exception as e:  # the API's own failure is this case's result, never the run's
        return SideRun(outputs=[], error=one_line(e))
    return SideRun(outputs=[_detach(o) for o in outputs], grads=grads)


def _backward(outputs: list[Any], leaves: list[torch.Tensor], grad_outputs: tuple,
              side: Side) -> list[torch.Tensor | None]:
    grads_in = flatten(grad_outputs)
    pairs = [(out, side.tensor(g)) for out, g in zip(outputs, grads_in)
             if isinstance(out, torch.Tensor) and out.requires_grad and isinstance(g, torch.Tensor)]
    if not pairs:
        return [None] * len(leaves)
    outs, grads = zip(*pairs)
    result = torch.autograd.grad(outs, leaves, grads, allow_unused=True)
    return [None if g is None else g.detach() for g in result]


def _detach(value: Any) -> Any:
    return value.detach() if isinstance(value, torch.Tensor) else value

