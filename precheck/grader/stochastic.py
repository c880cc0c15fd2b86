"""Check a random call by the law of its outputs, never by comparing two draws.

The target runs once (on the device, compiled, or as recorded); its outputs, and for the dropout family its
input gradients, go to the API's statistical check in precheck.grader.laws (share of zeros within binomial
bounds of p, survivors equal to x / (1 - p), a sampler's moments against its parameters, a permutation being one).
The verdict is the details row of output 0 (and of input 0's gradient): pass when every property holds, error
naming the one that does not. A call no check can judge is a SKIP row saying why.
"""

from __future__ import annotations

from typing import Any

import torch

from api_registry import ApiEntry
from precheck.core.comparison import Comparison
from precheck.core.reasons import Reason
from precheck.core.status import ERROR, PASS
from precheck.grader.choices import RANDOM_VERDICT
from precheck.grader.laws.base import Finding, NotCheckable
from precheck.grader.laws.checks import BACKWARD_CHECKS, CHECKS, SHAPE_CHECKS
from precheck.grader.side_run import SideRun
from precheck.results import DetailRow, Direction
from precheck.walk import flatten

STANDARD = "statistical"
# Every message of a statistical verdict starts so: api_precision_compare keeps such a verdict as it is.
VERDICT = RANDOM_VERDICT


def checkable(entry: ApiEntry) -> bool:
    """Whether a random call of this API has a law to check; without one its row is a SKIP saying it is random."""
    return entry.name in CHECKS


def unfit(entry: ApiEntry, args: tuple, kwargs: dict, outputs: tuple) -> str | None:
    """The SKIP reason of a random call that its law refuses from the shapes alone, read off the recorded call
    (TensorSpecs) before anything runs; the law makes the same test on the run's tensors, so ``apis --check``
    names the run's SKIP rows (an L_k > E_v attention) without rebuilding a tensor."""
    shapes = SHAPE_CHECKS.get(entry.name)
    try:
        if shapes is not None:
            shapes(args, kwargs, list(outputs))
    except NotCheckable as e:
        return f"random op: {e}"
    return None


def _cpu(value: Any) -> Any:
    return value.detach().cpu() if isinstance(value, torch.Tensor) else value


def _row(findings: list[Finding], value: Any) -> Comparison:
    failed = [f for f in findings if not f.passed]
    message = "; ".join(f.message for f in (failed or findings))
    shape = tuple(value.shape) if isinstance(value, torch.Tensor) else None
    dtype = str(value.dtype) if isinstance(value, torch.Tensor) else ""
    status = ERROR if failed else PASS
    return Comparison(
        status,
        f"{VERDICT}: {message}",
        None,
        golden_dtype="",
        target_dtype=dtype,
        shape=shape,
        standard=STANDARD,
        reason=Reason.RANDOM_LAW,
    )


def grade(
    name: str, entry: ApiEntry, args: tuple, kwargs: dict, target: SideRun, grad_outputs: tuple | None
) -> list[DetailRow] | str:
    """A details row per graded output of the call ``name`` (its record's name), or the SKIP reason. Given the
    name, not the dump's case, so the grader needs nothing of dump/. ``args``/``kwargs`` are the call's inputs as
    rebuilt before the call (an in-place sampler's first argument is its output)."""
    outputs = [_cpu(o) for o in target.outputs]
    try:
        findings = CHECKS[entry.name](args, kwargs, outputs)
    except NotCheckable as e:
        return f"random op: {e}"
    if not findings:
        return "random op: nothing to check in its outputs"
    rows = [DetailRow(name, Direction.FORWARD, 0, _row(findings, outputs[0] if outputs else None))]
    backward = BACKWARD_CHECKS.get(entry.name)
    if backward and target.grads and grad_outputs is not None:
        grads = {i: _cpu(g) for i, g in target.grads.items()}
        try:
            found = backward(args, kwargs, outputs, [_cpu(g) for g in flatten(grad_outputs)], grads)
        except NotCheckable:
            found = []
        if found:
            rows.append(DetailRow(name, Direction.BACKWARD, 0, _row(found, grads.get(0))))
    return rows
