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

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from precheck.core.reasons import Reason
from precheck.core.status import PASS, SKIP
from precheck.dump.mindspore import MINDSPORE
from precheck.dump.records import Case, TensorSpec
from precheck.execution.runner import Call, SideRun, run_side
from precheck.execution.sides import target_side
from precheck.execution.statistics import crossed, recorded_output_notes, statistics_rows
from precheck.execution.training_outputs import Refused, canonical_recorded
from precheck.inputs.builder import InputBuilder, InputError
from precheck.results import ApiResult, DetailRow, Direction, graded, skipped
from precheck.walk import flatten


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


def golden_at_hook(
    shapes: list[tuple | None], golden: SideRun, made_no_node: Callable[[], bool], by_node: bool = True
) -> AtHook:
    """Pairs each recorded gradient with the golden gradient where msprobe's hook saw it, by position.

    ``made_no_node`` says whether the call, run in the recorded dtypes, returned its input unchanged: then
    msprobe hooked the node that made that input, in another record, and nothing here is its golden.
    ``by_node`` False: the recorder saved the call's own input gradients (MindSpore's msprobe does)."""
    if all(s is None for s in shapes):
        return AtHook("", {}, {})
    node = golden.node if by_node else None
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
    if not at.notes or not by_node:
        # MindSpore's recorder saved the call's own input gradients, in their order: each pairs by its place or
        # not at all, and one without a counterpart says nothing against the others.
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
    at = golden_at_hook(gradient_shapes(case.grad_inputs), golden, made_no_node, _by_node(case))
    loaded = flatten(builder.load(case.grad_inputs, "backward.output"))
    grads = {k: loaded[k] for k in at.golden}
    return replace(target, grads=grads), replace(golden, grads=at.golden), at


def _by_node(case: Case) -> bool:
    """Whether the recorded gradients lie where msprobe's hook sat (the node that made the first output); not for
    MindSpore's recorder, nor a call whose node hands on its inputs' own gradients (``grads_of_inputs``)."""
    return case.framework != MINDSPORE and not case.grads_of_inputs


def recorded_outcome(
    case: Case, call: Call, builder: InputBuilder, golden: SideRun
) -> ApiResult | tuple[SideRun, SideRun, AtHook, Refused]:
    """The recorded target of one call: its outputs and gradients, the golden of each gradient where msprobe's
    hook recorded it, and the error verdict of each output that cannot be graded (an index outside its input);
    or the case's result when it ends here (statistics only, a missing file)."""
    if golden.error:
        return skipped(case, f"golden (CPU float64) failed: {golden.error}", Reason.SKIP_GOLDEN_FAILED)
    no_node = made_no_node(call)
    try:
        target, golden, at = recorded_run(case, builder, golden, no_node)
        # the recorded indices of a sort point into the recorded inputs
        outputs, refused = canonical_recorded(call, target.outputs)
    except StatisticsOnly:
        return _statistics_result(case, golden, builder, no_node)
    except InputError as e:
        return skipped(case, f"recorded output: {e}", Reason.SKIP_RECORDED_OUTPUT)
    return replace(target, outputs=outputs), golden, at, refused


def recorded_draw(case: Case, builder: InputBuilder) -> SideRun | ApiResult:
    """A random call's recorded outputs (its law is checked on them), or its SKIP row."""
    if any(isinstance(o, TensorSpec) and o.data_name is None for o in flatten(case.outputs)):
        return skipped(case, "random op: its recorded outputs are statistics only", Reason.SKIP_RECORDED_OUTPUT)
    try:
        return SideRun(outputs=flatten(builder.load(case.outputs, "output")))
    except InputError as e:
        return skipped(case, f"recorded output: {e}", Reason.SKIP_RECORDED_OUTPUT)


def made_no_node(call: Call) -> Callable[[], bool]:
    """Whether the call, run on the CPU in the recorded dtypes, returns its input unchanged (makes no autograd node
    for msprobe's hook); asked only when the golden's call did (``Tensor.float`` of a float64 golden)."""

    def ask() -> bool:
        node = run_side(replace(call, grad_outputs=None), target_side("cpu"), hook_node=True).node
        return node is None or not node.name

    return ask


def placed(rows: list[DetailRow], at: AtHook | None) -> list[DetailRow]:
    """Backward rows of ``--target recorded`` say where their golden was taken when it is not the call's input of
    that number (``gradient at NllLossBackward0 input 0 (LogSoftmaxBackward0 of input 0)``)."""
    if at is None or not at.where:
        return rows
    out = []
    for row in rows:
        where = at.where.get(row.index)
        if where:
            message = "; ".join(filter(None, [where, row.comparison.message]))
            row = replace(row, comparison=replace(row.comparison, message=message))
        out.append(row)
    return out


def _statistics_result(case: Case, golden: SideRun, builder: InputBuilder, no_node: Callable[[], bool]) -> ApiResult:
    """A statistics-only record: each output's and each recorded gradient's statistics against the golden's (a
    gradient's where msprobe's hook recorded it), never worse than warning but for a non-finite statistic the
    golden does not hold (precheck.execution.statistics)."""
    outputs = zip(flatten(case.outputs), golden.outputs)
    triples = [(i, spec, g) for i, (spec, g) in enumerate(outputs) if not crossed(spec)]
    forward = statistics_rows(case.name, Direction.FORWARD, triples)
    odd = recorded_output_notes(case.outputs, golden.outputs)  # an output no tensor can be is not graded: said why
    if not forward:
        why = "; ".join(odd) or "statistics only, and no tensor output to grade them on"
        return skipped(case, why, Reason.SKIP_RECORDED_OUTPUT)
    messages = [r.comparison.message for r in forward if r.status != PASS] or [forward[0].comparison.message]
    backward, notes = [], ()
    if case.has_backward and golden.grads is not None:
        at = golden_at_hook(gradient_shapes(case.grad_inputs), golden, no_node, _by_node(case))
        specs = flatten(case.grad_inputs)
        triples = [(k, specs[k], g) for k, g in sorted(at.golden.items())]
        backward = placed(statistics_rows(case.name, Direction.BACKWARD, triples), at)
        messages += [f"{r.short_name}: {r.comparison.message}" for r in backward if r.status != PASS]
        notes = at.notes
    message = "; ".join(filter(None, [*messages, *odd, *notes, builder.describe()]))
    backward_status = SKIP if case.has_backward and not backward else None
    generated = builder.generated > 0
    return graded(case, forward, backward, message, backward_status=backward_status, generated_inputs=generated)
