"""The MindSpore dump dialect: a case decoded from a MindSpore dump, put in PyTorch's terms.

msprobe writes MindSpore dumps in its PyTorch layout with MindSpore's names (``Mint.softmax``,
``MintFunctional.linear``, ``Tensor.__mul__``), MindSpore's dtype spellings (``BFloat16``, read by
precheck.dump.decode) and ``.npy`` files (bf16 saved widened to float32). What differs is what a case means:
its API is MindSpore's, so the case is rewritten as the PyTorch call that computes the same thing
(api_registry.mindspore); its row keeps the recorded name. MindSpore's msprobe records no ``requires_grad``:
its backward record saves one gradient per tensor input, in argument order (null where none flowed), so an
input needs a gradient exactly where one was recorded.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from api_registry.mindspore import NoEquivalent, torch_call
from precheck.core.reasons import Reason
from precheck.dump.decode import Case, TensorSpec
from precheck.walk import flatten, map_placed

__all__ = ["MINDSPORE", "translate"]

MINDSPORE = "mindspore"  # the ``framework`` field of a MindSpore dump


def translate(case: Case) -> Case:
    """The case as its PyTorch equivalent, or a SKIP case naming the API that has none."""
    case = replace(case, framework=MINDSPORE)
    if case.problem:
        return case
    args, kwargs = _needing_grad(case)
    try:
        equivalent = torch_call(case.api, args, kwargs)
    except NoEquivalent as e:
        return replace(case, problem=str(e), problem_reason=Reason.SKIP_UNSUPPORTED)
    return replace(
        case,
        api=equivalent.api,
        args=equivalent.args,
        kwargs=equivalent.kwargs,
        recorded_api=case.api,
        recorded_call=(args, kwargs),
    )


def _needing_grad(case: Case) -> tuple[tuple, dict]:
    """The arguments, each floating tensor input marked as needing a gradient where the backward record holds
    one at its place among the tensor inputs."""
    recorded = flatten(case.grad_inputs) if case.grad_inputs is not None else []
    tensors = itertools.count()

    def mark(leaf: Any, _: str) -> Any:
        if not isinstance(leaf, TensorSpec):
            return leaf
        k = next(tensors)
        wanted = k < len(recorded) and isinstance(recorded[k], TensorSpec) and leaf.dtype.is_floating_point
        return replace(leaf, requires_grad=wanted)

    return map_placed((case.args, case.kwargs), mark)
