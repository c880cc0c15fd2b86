"""Run one case on one side: rebuild its call, run forward, then backward with the recorded gradients.

Gradients are fed into every output that the backward record holds one for (not only output 0), and the
gradients of every input tensor that required grad during recording are collected, positional and keyword
alike. ``i`` of ``<API>.backward.output.<i>`` counts every tensor of the positional arguments (depth first,
whether or not it needs a gradient), as msprobe numbers them, and continues through the keyword arguments,
which msprobe never compares.

msprobe's backward record of a call is not always these input gradients: its hook sits on the autograd node that
made the call's first tensor output and saves what autograd hands that node's inputs (for ``cross_entropy`` the
gradient at its internal ``log_softmax`` output, for ``linear`` on 3-D input the flattened ``grad_output``).
``run_side(..., hook_node=True)`` finds the same node in this side's graph and keeps those gradients too
(``SideRun.node``), so ``--target recorded`` grades each recorded gradient where it was recorded.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from api_registry import ApiEntry
from precheck.dump.records import DeviceArg, TensorSpec
from precheck.execution.sides import CompileError, Side
from precheck.grader.side_run import NodeGrads, SideRun
from precheck.walk import flatten, map_placed

# The replayed calls' own warnings (torch deprecating an API the model used) are logged here, not shown: on the
# console they broke the progress bar and said nothing about the check.
REPLAYED = logging.getLogger("precheck.replayed")
_REPLAYING = threading.local()


def in_replayed_call() -> bool:
    """Whether this thread is inside a recorded call being replayed (run_side's forward and backward)."""
    return getattr(_REPLAYING, "active", False)


def quiet_replayed(show: Callable[..., None]) -> Callable[..., None]:
    """``show`` (a ``warnings.showwarning``) that logs the warnings of replayed calls to ``precheck.replayed``
    instead (per thread: the in-process helper's calls and this thread's other warnings are told apart)."""

    def showwarning(message: Warning | str, category: type, filename: str, lineno: int, *rest: Any) -> None:
        if in_replayed_call():
            REPLAYED.info("%s:%s: %s: %s", filename, lineno, category.__name__, message)
        else:
            show(message, category, filename, lineno, *rest)

    return showwarning


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
        # The copies an in-place call modifies: id of each copy's node -> (that node, kept alive; its argument)
        self.copies: dict[int, tuple[Any, int]] = {}


def _build(tree: Any, loaded: Any, side: Side, leaves: _Leaves, inplace: bool) -> Any:
    """This side's argument tree, built depth first so tensor arguments are numbered in argument order."""
    if isinstance(tree, TensorSpec):
        t = side.tensor(loaded)
        index = leaves.count
        leaves.count += 1
        if leaves.grad and tree.requires_grad and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_(True)
            leaves.needing_grad[index] = t
            if inplace:  # autograd refuses to modify a leaf that requires grad: the call modifies a tracked copy
                copy = t.clone()
                leaves.copies[id(copy.grad_fn)] = (copy.grad_fn, index)
                return copy
        return t
    if isinstance(tree, tuple):
        return tuple(_build(v, value, side, leaves, inplace) for v, value in zip(tree, loaded))
    if isinstance(tree, dict):
        return {k: _build(v, loaded[k], side, leaves, inplace) for k, v in tree.items()}
    if isinstance(tree, torch.dtype):
        return side.dtype(tree)
    if isinstance(tree, DeviceArg):
        return side.device_arg(tree)
    return tree


@dataclass(frozen=True)
class Call:
    """One recorded call, ready to run on any side: its registry entry, its decoded argument specs, the values
    rebuilt from them (tensors still on the CPU, in the recorded dtypes), and the gradients fed into its outputs
    (None: no backward)."""

    entry: ApiEntry
    args: tuple
    kwargs: dict
    loaded_args: tuple
    loaded_kwargs: dict
    grad_outputs: tuple | None = None
    autocast: torch.dtype | None = None  # the dtype torch.autocast cast its inputs to (precheck/dump/autocast.py)


def run_side(call: Call, side: Side, func: Callable[..., Any] | None = None, hook_node: bool = False) -> SideRun:
    """Forward (and backward where recorded) of one call on one side; exceptions become ``SideRun.error``.
    ``func`` replaces the API's callable (a compiled one); ``hook_node`` keeps the gradients at the node msprobe's
    hook sits on."""
    entry, args, kwargs, grad_outputs = call.entry, call.args, call.kwargs, call.grad_outputs
    leaves = _Leaves(grad=kwargs.get("out") is None)
    _REPLAYING.active = True
    try:
        inplace = entry.writes_input(args, kwargs)
        call_args = _build(args, call.loaded_args, side, leaves, inplace)
        call_kwargs = _build(kwargs, call.loaded_kwargs, side, leaves, inplace)
        if call.autocast is not None:
            cast = call.autocast
            call_args, call_kwargs = map_placed((call_args, call_kwargs), lambda t, _: side.autocast(t, cast))
        # The golden side runs the API's float64 reference where it has one; the honest side only where the API
        # itself cannot run on the CPU (NPU fused ops), since a down-cast's own rounding is what it must measure.
        reference = entry.golden if side.golden or side.honest and entry.needs_device else None
        func = func or reference or entry.func
        with torch.set_grad_enabled(bool(leaves.needing_grad)):
            result = func(*call_args, **call_kwargs)
        if result is None and inplace and call_args:
            result = call_args[0]  # __setitem__ and friends return None; the mutated tensor is the output
        outputs = flatten(result)
        hooked = hooked_tensor(result)
        probe = _NodeProbe(hooked, leaves) if hook_node else None
        grads = (
            _backward(outputs, leaves.needing_grad, grad_outputs, side, hooked)
            if grad_outputs is not None and leaves.needing_grad
            else None
        )
        side.synchronize()
        if entry.canonical:
            outputs = entry.canonical(call_args, call_kwargs, [_detach(o) for o in outputs])
    except CompileError as e:
        return SideRun(outputs=[], error=str(e), compile_failed=True)
    except Exception as e:  # the API's own failure is this case's result, never the run's
        return SideRun(outputs=[], error=one_line(e), device_lost=side.lost_to(e))
    finally:
        _REPLAYING.active = False
    return SideRun(outputs=[_detach(o) for o in outputs], grads=grads, node=probe.node() if probe else None)


def hooked_tensor(result: Any) -> torch.Tensor | None:
    """The output msprobe hooks: the first element of each sequence, the first tensor of a dict, down to a tensor
    (as ``_register_backward_pre_hook`` walks it); None where that walk meets no tensor."""
    var = result
    while not isinstance(var, torch.Tensor):
        if isinstance(var, dict):
            var = next((v for v in var.values() if isinstance(v, torch.Tensor)), None)
        elif isinstance(var, (list, tuple)) and var:
            var = var[0]
        else:
            return None
    return var


class _NodeProbe:
    """A hook on the node msprobe hooks in this side's graph, keeping the gradients at that node's inputs.

    The hook keeps them in a list of its own, never in the probe: a hook that was the probe's bound method made a
    cycle (node -> hook -> probe -> node) that only the cyclic collector ends, and through the node's
    ``next_functions`` it held the side's inputs (their float64 copies) and gradients past the case, into the
    next ones (``--target recorded`` on a LLaMA step: 0.45 GB of ``lm_head``'s golden held through
    ``cross_entropy``)."""

    def __init__(self, out: torch.Tensor | None, leaves: _Leaves) -> None:
        self._kept: list[tuple] = []
        self.fn = out.grad_fn if out is not None and out.requires_grad else None
        self.leaf = out is not None and out.requires_grad and out.grad_fn is None
        if self.fn is not None:
            index_of = {id(t): i for i, t in leaves.needing_grad.items()}
            index_of.update({node_id: i for node_id, (_, i) in leaves.copies.items()})
            self.sources = tuple(_source(fn, index_of) for fn, _ in self.fn.next_functions)
            try:
                self.fn.register_hook(_keeper(self._kept))
            except RuntimeError:  # a node that takes no hooks: the call's own input gradients are graded instead
                self.fn = None

    def node(self) -> NodeGrads | None:
        if self.fn is None:
            return NodeGrads("") if self.leaf else None
        grads = self._kept[-1] if self._kept else (None,) * len(self.sources)
        return NodeGrads(type(self.fn).__name__, self.sources, grads)


def _keeper(kept: list[tuple]) -> Callable[[tuple, tuple], None]:
    """A node hook that keeps the gradients at the node's inputs (the last call's) in ``kept``, and refers to
    nothing else."""

    def keep(grad_inputs: tuple, grad_outputs: tuple) -> None:
        kept[:] = [tuple(None if g is None else g.detach() for g in grad_inputs)]

    return keep


def _source(fn: Any, index_of: dict[int, int]) -> str:
    """What feeds one input of the hooked node, in words: an argument, a node on one argument, or a node's output."""
    if fn is None:
        return "no gradient"
    if id(fn) in index_of:  # the copy an in-place call modified: the argument itself, as msprobe saw it
        return f"input {index_of[id(fn)]}"
    if hasattr(fn, "variable"):  # AccumulateGrad: the argument itself
        return f"input {index_of.get(id(fn.variable), '?')}"
    below = [f for f, _ in fn.next_functions if f is not None]
    if len(below) == 1 and hasattr(below[0], "variable"):
        return f"{type(fn).__name__} of {_source(below[0], index_of)}"
    return f"the output of {type(fn).__name__}"


def _backward(
    outputs: list[Any], leaves: dict[int, torch.Tensor], grad_outputs: tuple, side: Side, hooked: Any
) -> dict[int, torch.Tensor | None]:
    pairs = [(out, side.tensor(g)) for out, g in _incoming(outputs, flatten(grad_outputs), hooked)]
    if not pairs:
        return dict.fromkeys(leaves)
    for i, (out, g) in enumerate(pairs):
        if out.shape != g.shape:
            raise ValueError(f"recorded gradient {i} has shape {tuple(g.shape)}, the output {tuple(out.shape)}")
    outs, grads = zip(*pairs)
    result = _autograd(outs, grads, tuple(leaves.values()))
    return {i: None if g is None else g.detach() for i, g in zip(leaves, result)}


def _incoming(outputs: list[Any], recorded: list[Any], hooked: torch.Tensor | None) -> list[tuple]:
    """(output, recorded incoming gradient) pairs. msprobe saves the gradients of the hooked node's outputs, one
    per output of that node: where the call returns fewer (``svdvals`` returns S of the node's U, S, Vh), an output
    of that node takes the gradient at its own place in the node (``output_nr``)."""
    fn = hooked.grad_fn if hooked is not None else None
    if fn is not None and len(recorded) != len(outputs):
        places = [(out, out.output_nr) for out in outputs if isinstance(out, torch.Tensor) and out.grad_fn is fn]
        pairs = [(out, recorded[nr]) for out, nr in places if nr < len(recorded)]
    else:
        pairs = list(zip(outputs, recorded))
    return [
        (out, g)
        for out, g in pairs
        if isinstance(out, torch.Tensor) and out.requires_grad and isinstance(g, torch.Tensor)
    ]


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
