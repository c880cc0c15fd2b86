"""What one side of a check produced, as a value the grader reads: its outputs, its input gradients, the node
msprobe's backward hook sits on, or its error. Defined here, below execution, so that the grader's checks of
random APIs (precheck.grader.stochastic) take a side's run without importing the runner that makes it
(precheck.execution.runner).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass
class SideRun:
    """What one side produced: flat forward outputs, input gradients (None where no gradient flowed), or the
    one-line error the call raised."""

    outputs: list[Any]
    grads: dict[int, torch.Tensor | None] | None = None  # tensor-argument index -> gradient
    error: str | None = None
    compile_failed: bool = False  # the error is the compiler's, not the API's
    device_lost: bool = False  # the error left the process's device untrusted (execution/sides.Side.lost_to)
    node: NodeGrads | None = None  # only with hook_node: the node msprobe's backward hook sits on


@dataclass(frozen=True)
class NodeGrads:
    """The autograd node msprobe's backward hook sits on and the gradients autograd handed to its inputs.

    msprobe (``PytorchHookManager._register_backward_pre_hook``) walks the call's result to its first tensor and
    registers a hook on that tensor's ``grad_fn``; the hook's ``grad_inputs`` (one per ``next_functions`` edge,
    None where an input needs no gradient) become the backward record's ``output`` list. ``name`` is "" when the
    call returned one of its inputs unchanged and so made no node of its own."""

    name: str
    sources: tuple[str, ...] = ()  # what feeds each node input: "input 1", "TBackward0 of input 1"
    grads: tuple[torch.Tensor | None, ...] = ()
