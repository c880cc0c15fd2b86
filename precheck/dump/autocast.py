"""Did a recorded call run under ``torch.autocast``, and in which dtype? Inferred from its record alone.

A dump does not say that a step ran in autocast; its records do, by their dtypes. A call on autocast's lists
(api_registry/autocast.py) whose recorded output is not what its inputs' dtypes give ran on inputs autocast cast:
``linear`` of a bf16 activation and an fp32 weight with a bf16 output ran in bf16, ``cross_entropy`` of bf16
logits with an fp32 loss ran in fp32. The dtype autocast cast to is then the recorded output's, for every kind:

- ``lower``: a bf16/fp16 output from a floating input of another dtype (fp32 weights, an fp16 input);
- ``fp32``: an fp32 output from a bf16/fp16 input;
- ``promote``: the widest of mixed floating inputs as output.

A ``lower`` call recorded without an output (msprobe writes a call that raised with its inputs only) and with
one half dtype among fp32 inputs ran in that half dtype: eager torch runs no product of mixed dtypes.

Autocast casts every floating input but float64 (torch's ``is_eligible``) and never a call that names its own
dtype (``softmax(x, dtype=...)``) or writes ``out=``, so neither is inferred. This is the one rule: run_ut
replays what it infers (execution/runner.py), the honest kernel runs in that dtype, and compare reads the same
answer. docs/reference/autocast.md says where it cannot tell.
"""

from __future__ import annotations

import torch

from api_registry.autocast import FP32, LOWER, PARTLY_HALF, PROMOTE, kinds, op_name
from precheck.dump.decode import Case, TensorSpec
from precheck.walk import flatten

__all__ = ["autocast_dtype", "held_to"]

_HALF = (torch.bfloat16, torch.float16)


def autocast_dtype(case: Case) -> torch.dtype | None:
    """The dtype autocast cast ``case``'s floating inputs to when it was recorded, or None: not on autocast's
    lists, or its dtypes are what they are without autocast (a replay without a cast runs it as it ran)."""
    kind = kinds(case.api)
    if not kind or case.problem or case.framework != "pytorch" or case.kwargs.get("out") is not None:
        return None
    leaves = flatten((case.args, case.kwargs))
    if any(isinstance(leaf, torch.dtype) for leaf in leaves):
        return None
    inputs = {leaf.dtype for leaf in leaves if isinstance(leaf, TensorSpec) and _eligible(leaf.dtype)}
    output = next(
        (o.dtype for o in flatten(case.outputs) if isinstance(o, TensorSpec) and o.dtype.is_floating_point), None
    )
    if output is None:
        return _without_output(kind, inputs)
    if not inputs:
        return None
    if LOWER in kind and output in _HALF and inputs != {output}:
        return output
    if FP32 in kind and output == torch.float32 and inputs & set(_HALF):
        return output
    if PROMOTE in kind and len(inputs) > 1 and output == _widest(inputs):
        return output
    return None


def held_to(case: Case) -> torch.dtype | None:
    """The precision a call's wider outputs are graded in: the dtype autocast ran it in, or the half dtype of its
    input for an op that does part of its work in it (``PARTLY_HALF``: CUDA's cross_entropy under autocast, a
    norm's mixed-dtype kernel with or without it); None for any other call."""
    ran = autocast_dtype(case)
    if op_name(case.api) not in PARTLY_HALF or case.framework != "pytorch":
        return ran
    dtypes = {leaf.dtype for leaf in flatten((case.args, case.kwargs)) if isinstance(leaf, TensorSpec)}
    half = [dtype for dtype in _HALF if dtype in dtypes]
    mixed = len(half) == 1 and (ran is not None or torch.float32 in dtypes)
    return half[0] if mixed else ran


def _without_output(kind: frozenset[str], inputs: set[torch.dtype]) -> torch.dtype | None:
    """A record with inputs only (a call that raised: msprobe writes its inputs, then no output): a
    lower-precision op of one half dtype mixed with fp32 ran in that half dtype, as nothing but autocast runs a
    product of mixed dtypes. Any other record without an output is not inferred."""
    half = inputs & set(_HALF)
    return half.pop() if LOWER in kind and len(half) == 1 and inputs == half | {torch.float32} else None


def _eligible(dtype: torch.dtype) -> bool:
    """What autocast casts: a floating dtype other than float64 (at::autocast::is_eligible)."""
    return dtype.is_floating_point and dtype != torch.float64


def _widest(dtypes: set[torch.dtype]) -> torch.dtype:
    widest = next(iter(dtypes))
    for dtype in dtypes:
        widest = torch.promote_types(widest, dtype)
    return widest
