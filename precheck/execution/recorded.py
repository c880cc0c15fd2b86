"""``--target recorded``: grade what the device really produced during training.

The target side is not re-run: its outputs are the output files of the forward record, its gradients the files
of the backward record's ``output`` list, and the golden is computed on the CPU from the recorded inputs. No
accelerator is needed at check time, so an NPU dump can be pre-checked on a laptop or in CI.

msprobe's backward hook sits on the autograd node that made the call's first tensor output and saves the
gradients autograd hands that node's inputs, in the node's order (runner.NodeGrads). For a call that is one node
these are its input gradients; for a composite call they are not: ``cross_entropy`` records the gradient at its
internal ``log_softmax`` output, ``linear`` on 2-D input addmm's (bias, input, weight transposed) and on 3-D input
the flattened ``grad_output``. Each recorded gradient is graded against the golden gradient at the same input of
the same node in the golden's graph; the shape only confirms the pairing, it never chooses it. Where the recording
device built another graph (a fused kernel), the call's own input gradients are used if every recorded gradient
lines up with them by position; a recorded gradient with no golden counterpart is named, never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from precheck.dump.records import Case, TensorSpec
from precheck.execution.runner import SideRun, flatten
from precheck.grader.limits import limits_for
from precheck.grader.status import PASS, WARNING
from precheck.inputs.builder import InputBuilder


class StatisticsOnly(Exception):
    """The record saved statistics, not data: only its statistics can be graded."""


@dataclass(frozen=True)
class AtHook:
    """The golden of each recorded gradient, by its place in the backward record's ``output`` list."""

    kind: str  # "node": the hooked node's inputs; "inputs": the call's own inputs; "": nowhere
    golden: dict[int, torch.Tensor]
    where: dict[int, str]  # where a golden is not simply the call's input of that number, in words
    notes: tuple[str, ...] = ()  # recorded gradients without a golden counterpart, named


def gradient_shapes(grad_inputs: tuple | None) -> list[tuple | None]:
    """The shape of each recorded gradient (None for a null entry), in the backward record's order."""
    return [tuple(g.shape) if isinstance(g, TensorSpec) else None for g in flatten(grad_inputs or ())]


def golden_at_hook(shapes: list[tuple | None], golden: SideRun, made_no_node: Callable[[], bool]) -> AtHook:
    """Pairs each recorded gradient with the golden gradient where msprobe's hook saw it, by position.

    ``made_no_node`` says whether the call, run in the recorded dtypes, returned its input unchanged: then
    msprobe hooked the node that made that input, in another record, and nothing here is its golden."""
    if all(s is None for s in shapes):
        return AtHook("", {}, {})
    node = golden.node
    if node is not None and not node.name and made_no_node():
        why = (
            "the call returned its input unchanged, so msprobe's hook recorded the gradients of the node that "
            "made that input, outside this record"
        )
        return _nowhere(shapes, why)
    api = golden.grads or {}
    by_input = [api.get(i) for i in range(max(api, default=-1) + 1)]
    if node is not None and node.name and len(node.grads) == len(shapes):
        where = [f"{node.name} input {k} ({source})" for k, source in enumerate(node.sources)]
        at = _by_position("node", shapes, list(node.grads), where)
        if not at.notes or _by_position("inputs", shapes, by_input, []).notes:
            return at  # the node, unless only the call's own inputs line up with every recorded gradient
    at = _by_position("inputs", shapes, by_input, [])
    if not at.notes:
        return at
    seen = f"{node.name} has {len(node.grads)} inputs, " if node is not None and node.name else ""
    inputs = ", ".join(str(tuple(g.shape)) if g is not None else "-" for g in by_input) or "none"
    return _nowhere(shapes, f"{seen}the call's input gradients have shapes {inputs}")


def _by_position(kind: str, shapes: list, goldens: list, where: list[str]) -> AtHook:
    golden, places, notes = {}, {}, []
    for k, shape in enumerate(shapes):
        if shape is None:
            continue
        g = goldens[k] if k < len(goldens) else None
        if g is None or tuple(g.shape) != shape:
            there = "no gradient" if g is None else f"shape {tuple(g.shape)}"
            notes.append(
                f"backward: recorded gradient {k} of shape {shape} has no golden counterpart "
                f"({where[k] if k < len(where) else f'input {k}'} has {there}); not graded"
            )
            continue
        golden[k] = g
        if k < len(where) and not where[k].endswith(f"(input {k})"):
            places[k] = f"gradient at {where[k]}"
    return AtHook(kind, golden, places, tuple(notes))


def _nowhere(shapes: list, why: str) -> AtHook:
    notes = tuple(
        f"backward: recorded gradient {k} of shape {shape} has no golden counterpart ({why}); not graded"
        for k, shape in enumerate(shapes)
        if shape is not None
    )
    return AtHook("", {}, {}, notes)


def same_place(run: SideRun | None, at: AtHook, shapes: list[tuple | None]) -> dict[int, torch.Tensor]:
    """Another side's gradients (the benchmark reference) at the places ``at`` chose for the golden."""
    if run is None or not at.kind:
        return {}
    if at.kind == "node":
        goldens = list(run.node.grads) if run.node is not None and len(run.node.grads) == len(shapes) else []
    else:
        grads = run.grads or {}
        goldens = [grads.get(i) for i in range(max(grads, default=-1) + 1)]
    return _by_position(at.kind, shapes, goldens, []).golden


def recorded_run(
    case: Case, builder: InputBuilder, golden: SideRun, made_no_node: Callable[[], bool]
) -> tuple[SideRun, SideRun, AtHook]:
    """The recorded outputs and gradients as a target run, the golden with each recorded gradient's golden at the
    same place, and where that is. Gradients are keyed by their place in the backward record.

    Raises StatisticsOnly when the forward outputs were not saved."""
    outputs = flatten(case.outputs)
    if any(isinstance(o, TensorSpec) and o.data_name is None for o in outputs):
        raise StatisticsOnly()
    target = SideRun(outputs=flatten(builder.load(case.outputs, "output")))
    if golden.grads is None or case.grad_inputs is None:
        return target, golden, AtHook("", {}, {})
    recorded = flatten(case.grad_inputs)
    if any(isinstance(g, TensorSpec) and g.data_name is None for g in recorded):
        note = "backward: recorded gradients are statistics only, not graded"
        return target, replace(golden, grads={}), AtHook("", {}, {}, (note,))
    at = golden_at_hook(gradient_shapes(case.grad_inputs), golden, made_no_node)
    loaded = flatten(builder.load(case.grad_inputs, "backward.output"))
    grads = {k: loaded[k] for k in at.golden}
    return replace(target, grads=grads), replace(golden, grads=at.golden), at


@dataclass(frozen=True)
class StatisticsVerdict:
    status: str
    message: str


def grade_statistics(spec: TensorSpec, golden: torch.Tensor) -> StatisticsVerdict:
    """A statistics-only record: its recorded Max/Min/Mean/Norm against the golden's. Four numbers can raise a
    suspicion but not prove an error, so the status is capped at warning."""
    g = golden.detach().to(torch.float64)
    if g.is_complex():
        g = torch.view_as_real(g)
    finite = g[torch.isfinite(g)]
    if finite.numel() == 0:
        return StatisticsVerdict(WARNING, "statistics only: the golden has no finite value to compare")
    ours = {
        "Max": float(finite.max()),
        "Min": float(finite.min()),
        "Mean": float(finite.mean()),
        "Norm": float(torch.linalg.vector_norm(finite)),
    }
    theirs = {"Max": spec.stats.max, "Min": spec.stats.min, "Mean": spec.stats.mean, "Norm": spec.stats.norm}
    scale = max(ours["Norm"] / math.sqrt(finite.numel()), 1e-30)
    tolerance = max(4 * limits_for(spec.dtype).rtol, 1e-3) if spec.dtype.is_floating_point else 0.0
    off = []
    for name, value in theirs.items():
        if value is None or not math.isfinite(value):
            continue
        error = abs(value - ours[name]) / max(abs(ours[name]), scale)
        if error > tolerance:
            off.append(f"{name} {value:.6g} vs golden {ours[name]:.6g}")
    prefix = "statistics only (graded on Max/Min/Mean/Norm, never worse than warning)"
    if off:
        return StatisticsVerdict(WARNING, f"{prefix}: " + "; ".join(off))
    return StatisticsVerdict(PASS, prefix)
