"""The honest kernel's side of a check: the default standard's yardstick between warning and error.

The same call on the CPU from the same inputs, with bf16/fp16 tensors and dtype arguments raised to float32
(targets.HONEST): an implementation that accumulates accurately; its results are rounded once to the dtype the
target holds them in. It runs at most once per case, and only when a verdict asks for it (grader/honest.py): an
output that is within its dtype's rounding never costs one. With ``--target recorded`` its gradients are taken
where msprobe's hook recorded the target's, as the golden's are (recorded.py).

A MindSpore call has no honest run: torch's CPU kernels would be the yardstick of another implementation
(MindSpore's CPU fp32 exp is 6 ULP off where torch's is correctly rounded, its fp16 rsqrt within 1 ULP where
torch's rounds once, and neither is wrong), so the honest kernel is modeled (grader/honest.py: correctly
rounded in half precision, a few roundings normwise and tens at an element in fp32).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from precheck.core.dtypes import computed_in
from precheck.dump.autocast import autocast_dtype, held_to
from precheck.dump.mindspore import MINDSPORE
from precheck.dump.records import Case, TensorSpec
from precheck.execution.recorded import AtHook, gradient_shapes, same_place
from precheck.execution.runner import Call, SideRun, run_side
from precheck.execution.sides import HONEST
from precheck.walk import flatten

__all__ = ["HonestRun", "repeats_honest"]


def repeats_honest(case: Case) -> bool:
    """The call holds no half-precision tensor or dtype, nor ran in one under autocast: run in its recorded dtypes
    on the CPU, it is the honest run itself (the CPU's fp32 kernel is its own honest kernel: a model could not
    tell its cancellation from a bug)."""
    leaves = flatten((case.args, case.kwargs, case.grad_outputs))
    dtypes = [leaf.dtype if isinstance(leaf, TensorSpec) else leaf for leaf in leaves] + [autocast_dtype(case)]
    return not any(isinstance(d, torch.dtype) and HONEST.dtype(d) != d for d in dtypes)


class HonestRun:
    """The honest run of one case, made on first use; ``same`` is a run that already is the honest one (see
    Target.is_honest); ``at`` places gradients as ``--target recorded`` placed the golden's."""

    def __init__(self, call: Call, case: Case, at: AtHook | None, same: SideRun | None) -> None:
        self.call, self.case, self.at = call, case, at
        self.run: SideRun | None = same
        self.modeled = case.framework == MINDSPORE
        self.ran_in = held_to(case)  # autocast's dtype: a wider output was computed in it, and rounded to it

    def _side(self) -> SideRun:
        if self.run is None:
            hook = self.at is not None
            run = run_side(self.call, HONEST, hook_node=hook)
            if hook and not run.error:
                run = replace(run, grads=same_place(run, self.at, gradient_shapes(self.case.grad_inputs)))
            self.run = run
        return self.run

    def output(self, i: int, like: Any) -> torch.Tensor | None:
        """Forward output ``i`` rounded to ``like``'s dtype, or None where the honest run has none."""
        if self.modeled:
            return None
        run = self._side()
        return None if run.error or i >= len(run.outputs) else _rounded(run.outputs[i], like, self.ran_in)

    def grad(self, i: int, like: Any) -> torch.Tensor | None:
        """The gradient graded as backward output ``i``, rounded to ``like``'s dtype, or None."""
        if self.modeled:
            return None
        run = self._side()
        return None if run.error or not run.grads else _rounded(run.grads.get(i), like, self.ran_in)


def _rounded(value: Any, like: Any, ran_in: torch.dtype | None) -> torch.Tensor | None:
    """``value`` rounded as the target's was: to the dtype autocast computed it in, then to the one it is held in."""
    if not isinstance(value, torch.Tensor) or not isinstance(like, torch.Tensor) or value.shape != like.shape:
        return None
    narrow = computed_in(ran_in, like.dtype)
    if narrow is not None and value.is_floating_point():
        value = value.to(narrow)
    return value.to(like.dtype) if value.dtype != like.dtype else value
