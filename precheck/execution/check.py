"""Check one case end to end: look up the API, rebuild its inputs, run both sides, grade every output.

This is the unit of work a pool worker runs. It never raises for a problem of the case itself: whatever goes
wrong becomes the case's SKIP or error row with a one-line reason, so one bad record never stops a run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from api_registry import ApiEntry, lookup, why_unsupported
from precheck.dump.records import Case, TensorSpec
from precheck.execution.honest_run import HonestRun, honest_is_target
from precheck.execution.options import CheckOptions
from precheck.execution.recorded import (
    AtHook,
    StatisticsOnly,
    golden_at_hook,
    grade_statistics,
    gradient_shapes,
    recorded_run,
    same_place,
)
from precheck.execution.runner import SideRun, flatten, one_line, run_side
from precheck.execution.sizes import estimated_bytes
from precheck.execution.targets import GOLDEN, compiled, reference_side, target_side
from precheck.grader import (
    ERROR,
    PASS,
    SKIP,
    WARNING,
    Comparison,
    stochastic,
    worst,
)
from precheck.grader.rows import RowGrader
from precheck.inputs.builder import InputBuilder, InputError, builder_for
from precheck.inputs.synth import rng_for
from precheck.results import ApiResult, DetailRow, Direction, failed, graded, skipped


def check_case(case: Case, data_dir: Path, options: CheckOptions = CheckOptions()) -> ApiResult:
    if options.save_error_data and not options.keep_tensors:
        result = _guarded(case, data_dir, replace(options, keep_tensors=True))
        if {result.forward, result.backward} & {WARNING, ERROR}:
            try:
                save_error_data(result, Path(options.save_error_data))
            except (OSError, RuntimeError) as e:  # a full disk costs the saved files, never the verdict
                print(f"precheck: warning: cannot save error data of {result.name}: {one_line(e)}", file=sys.stderr)
        result = replace(result, inputs=None, details=[replace(d, target=None, golden=None) for d in result.details])
    else:
        result = _guarded(case, data_dir, options)
    if options.target == "device":
        return result
    # Other targets are named in every details row's Message (DEVICE Dtype keeps msprobe's meaning).
    label = TARGET_LABELS[options.target]
    details = [
        replace(
            d, comparison=replace(d.comparison, message="; ".join(filter(str.strip, [label, d.comparison.message])))
        )
        for d in result.details
    ]  # the compared tensors stay (-save_error_data keeps them)
    return replace(result, details=details)


TARGET_LABELS = {"recorded": "target: recorded outputs", "compile": "target: torch.compile"}


def _guarded(case: Case, data_dir: Path, options: CheckOptions) -> ApiResult:
    """A fault of precheck's own on one record (a grader or a statistical check meeting what it did not foresee)
    is that record's SKIP row, never the run's end and never a traceback; the API itself is not blamed."""
    try:
        return _check(case, data_dir, options)
    except Exception as e:
        return skipped(case, f"precheck could not check this record: {one_line(e)}")


def _check(case: Case, data_dir: Path, options: CheckOptions) -> ApiResult:
    """One case: preflight, build its inputs, run the golden, the target and the reference, then grade them."""
    checked = _preflight(case, options)
    if isinstance(checked, ApiResult):
        return checked
    entry, reason = checked
    builder = builder_for(
        entry, case, data_dir, seed=options.seed, force_random=options.force_random, max_bytes=options.max_memory
    )
    try:
        args = builder.build(case.args, "input_args")
        kwargs = builder.build(case.kwargs, "input_kwargs")
    except InputError as e:
        return skipped(case, str(e))
    grad_outputs, backward_problem = None, None
    if case.has_backward:
        try:
            grad_outputs = builder.build(case.grad_outputs, "backward.input")
        except InputError as e:
            backward_problem = f"backward: {e}"
    if reason:
        return _random(case, entry, args, kwargs, grad_outputs, builder, options, backward_problem)
    hook = options.target == "recorded"  # the gradients where msprobe's hook recorded them (recorded.py)
    golden = run_side(entry, case.args, case.kwargs, args, kwargs, grad_outputs, GOLDEN, hook_node=hook)
    if entry.alternate is not None and not _fits(golden, case):
        other = run_side(entry.alternate, case.args, case.kwargs, args, kwargs, grad_outputs, GOLDEN, hook_node=hook)
        if _fits(other, case):
            entry, golden = entry.alternate, other
    at = None
    if options.target == "recorded":
        got = _recorded_target(case, entry, builder, golden, (args, kwargs))
        if isinstance(got, ApiResult):
            return got
        target, golden, at = got
    else:
        func = compiled(entry.func, case.signature()) if options.target == "compile" else None
        target = run_side(entry, case.args, case.kwargs, args, kwargs, grad_outputs, target_side(options.device), func)
        if target.compile_failed:
            return skipped(case, f"torch.compile failed: {target.error}")
    reference = (
        run_side(
            entry, case.args, case.kwargs, args, kwargs, grad_outputs, reference_side(options.bench_device), None, hook
        )
        if options.bench_device
        else None
    )
    if at is not None and reference is not None:
        reference = replace(reference, grads=same_place(reference, at, gradient_shapes(case.grad_inputs)))
    if golden.error:
        why = "cannot run the recorded call" if target.error else "golden (CPU float64) failed"
        return skipped(case, "; ".join(filter(None, [f"{why}: {golden.error}", builder.describe()])))
    if target.error:
        return _target_failed(case, target, builder)
    ran = (entry, golden, target, reference, at)
    return _graded(case, builder, options, (args, kwargs, grad_outputs), backward_problem, ran)


def _preflight(case: Case, options: CheckOptions) -> ApiResult | tuple[ApiEntry, str | None]:
    """The case's SKIP row when it cannot be checked here (a bad record, an unsupported API, another device's
    fused op, an uncheckable random call, too much memory); else its registry entry and why it is random."""
    if case.problem:
        return skipped(case, case.problem)
    entry = lookup(case.api)
    if entry is None:
        return skipped(case, why_unsupported(case.api))
    if entry.needs_device and options.target != "recorded" and not options.device.startswith(entry.needs_device):
        return skipped(
            case,
            f"{case.api} is an {entry.needs_device.upper()} fused op: it runs on an "
            f"{entry.needs_device.upper()}, not on {options.device}; --target recorded grades its "
            f"recorded outputs against the CPU reference",
        )
    reason = entry.random_reason(case.args, case.kwargs)
    if reason and not stochastic.checkable(entry):
        return skipped(case, reason)
    need = estimated_bytes(case)
    if options.max_memory is not None and need > options.max_memory:
        return skipped(
            case, f"needs about {need / 2**30:.3g} GiB, above --max-memory {options.max_memory / 2**30:.3g} GiB"
        )
    return entry, reason


def _graded(
    case: Case,
    builder: InputBuilder,
    options: CheckOptions,
    inputs: tuple[tuple, dict, Any],
    backward_problem: str | None,
    ran: tuple[ApiEntry, SideRun, SideRun, SideRun | None, AtHook | None],
) -> ApiResult:
    """The graded rows of a call whose sides all ran, and the row's message: every non-pass reason and note."""
    entry, golden, target, reference, at = ran
    same = target if honest_is_target(case, options.target, options.device) else None
    honest = HonestRun(entry, case, inputs, at, same)
    grade = RowGrader(options.standard, options.cosine, options.max_abs, entry.standard, options.keep_tensors)
    reference_ok = reference is not None and not reference.error
    try:
        refs = reference.outputs if reference_ok else None
        forward = grade.outputs(case.name, target.outputs, golden.outputs, refs, honest.output)
        ref_grads = (reference.grads if reference_ok else None) or {}
        backward = _placed(grade.grads(case.name, target.grads, golden.grads, ref_grads, honest.grad), at)
    except Exception as e:  # outputs no grader rule foresaw: this API's error row, never the run's end
        return failed(case, f"grader failed: {one_line(e)}")
    backward_status = None
    if backward_problem or not backward and at is not None and at.notes:
        backward_status = SKIP  # a backward was recorded but nothing of it could be graded
    problems = [
        f"{r.short_name}: {r.comparison.message}"
        for r in forward + backward
        if r.comparison.status != PASS and r.comparison.message
    ]
    if backward_problem:
        problems.append(backward_problem)
    problems += at.notes if at is not None else ()
    if builder.generated:
        problems.append(builder.describe())
    if entry.nondeterministic and {WARNING, ERROR} & {r.comparison.status for r in forward + backward}:
        problems.append("non-deterministic on accelerators (atomic accumulation): a rerun may differ slightly")
    if reference is not None and reference.error:
        problems.append(f"reference on {options.bench_device} failed ({reference.error}): graded without it")
    if honest.run is not None and honest.run.error:
        problems.append(f"honest kernel (CPU, float32) failed ({honest.run.error}): modeled instead")
    if worst(r.status for r in forward) == SKIP:
        problems.insert(0, "the API returned no output to compare")
    inputs = builder.tensors if options.keep_tensors else None
    return graded(case, forward, backward, "; ".join(problems), backward_status=backward_status, inputs=inputs)


def _recorded_target(
    case: Case, entry: ApiEntry, builder: InputBuilder, golden: SideRun, inputs: tuple[tuple, dict]
) -> ApiResult | tuple[SideRun, SideRun, AtHook]:
    """``--target recorded``: the recorded outputs and gradients, and the golden of each gradient where msprobe's
    hook recorded it; or the case's result when it ends here (statistics only, a missing file)."""
    if golden.error:
        return skipped(case, f"golden (CPU float64) failed: {golden.error}")
    made_no_node = _made_no_node(case, entry, *inputs)
    try:
        target, golden, at = recorded_run(case, builder, golden, made_no_node)
        if entry.canonical:  # the recorded indices of a sort point into the recorded inputs
            target = replace(target, outputs=entry.canonical(*inputs, target.outputs))
    except StatisticsOnly:
        return _statistics_result(case, golden, builder, made_no_node)
    except InputError as e:
        return skipped(case, f"recorded output: {e}")
    return target, golden, at


def _made_no_node(case: Case, entry: ApiEntry, args: tuple, kwargs: dict) -> Callable[[], bool]:
    """Whether the call, run on the CPU in the recorded dtypes, returns its input unchanged (makes no autograd node
    for msprobe's hook); asked only when the golden's call did (``Tensor.float`` of a float64 golden)."""

    def ask() -> bool:
        node = run_side(entry, case.args, case.kwargs, args, kwargs, None, target_side("cpu"), hook_node=True).node
        return node is None or not node.name

    return ask


def _placed(rows: list[DetailRow], at: AtHook | None) -> list[DetailRow]:
    """Backward rows of ``--target recorded`` say where their golden was taken when it is not the call's input of
    that number (``gradient at NllLossBackward0 input 0 (LogSoftmaxBackward0 of input 0)``)."""
    if at is None or not at.where:
        return rows
    placed = []
    for row in rows:
        where = at.where.get(row.index)
        if where:
            message = "; ".join(filter(None, [where, row.comparison.message]))
            row = replace(row, comparison=replace(row.comparison, message=message))
        placed.append(row)
    return placed


def _fits(run: SideRun, case: Case) -> bool:
    """Whether a golden run produced outputs of the recorded shapes (which of two same-named APIs was called)."""
    recorded = [tuple(s.shape) for s in flatten(case.outputs) if isinstance(s, TensorSpec)]
    return not run.error and recorded == [tuple(o.shape) for o in run.outputs if isinstance(o, torch.Tensor)]


def _target_failed(case: Case, target: SideRun, builder: InputBuilder) -> ApiResult:
    return failed(case, "; ".join(filter(None, [f"target raised {target.error}", builder.describe()])))


@contextmanager
def _seeded(case: Case, options: CheckOptions) -> Iterator[None]:
    """Seeded like generated inputs, so one --seed gives one draw and the same CSVs on every run; the caller's
    CPU generator is left as it was. Only the generators of the CPU and the target device are seeded
    (torch.manual_seed queues a seeding of every CUDA device even on a CPU run, at 0.7 ms a call)."""
    seed = int(rng_for(options.seed, case.name, "draw").integers(2**62))
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        backend = getattr(torch, options.device.split(":")[0], None)  # torch.cuda, torch.npu (torch_npu), ...
        if options.device != "cpu" and hasattr(backend, "manual_seed_all"):
            backend.manual_seed_all(seed)
        yield


def _random(
    case: Case,
    entry: ApiEntry,
    args: tuple,
    kwargs: dict,
    grad_outputs: tuple | None,
    builder: InputBuilder,
    options: CheckOptions,
    backward_problem: str | None,
) -> ApiResult:
    """A random call: one target run, graded by the law of its outputs (stochastic.py)."""
    if options.target == "recorded":
        if any(isinstance(o, TensorSpec) and o.data_name is None for o in flatten(case.outputs)):
            return skipped(case, "random op: its recorded outputs are statistics only")
        try:
            target = SideRun(outputs=flatten(builder.load(case.outputs, "output")))
        except InputError as e:
            return skipped(case, f"recorded output: {e}")
        grad_outputs = None
    else:
        func = compiled(entry.func, case.signature()) if options.target == "compile" else None
        with _seeded(case, options):
            target = run_side(
                entry, case.args, case.kwargs, args, kwargs, grad_outputs, target_side(options.device), func
            )
        if target.compile_failed:
            return skipped(case, f"torch.compile failed: {target.error}")
        if target.error:
            return _target_failed(case, target, builder)
    rows = stochastic.grade(case, entry, args, kwargs, target, grad_outputs)
    if isinstance(rows, str):
        return skipped(case, "; ".join(filter(None, [rows, builder.describe()])))
    forward = [r for r in rows if r.direction == Direction.FORWARD]
    backward = [r for r in rows if r.direction == Direction.BACKWARD]
    backward_status = worst(r.status for r in backward) if backward else SKIP if case.has_backward else None
    problems = [r.comparison.message for r in rows if r.comparison.status != PASS]
    if backward_status == SKIP:
        problems.append(
            backward_problem
            or "backward: not checked (the gradients of a random call are checked "
            "for the dropout family on a device target)"
        )
    if builder.generated:
        problems.append(builder.describe())
    return graded(case, forward, backward, "; ".join(problems), backward_status=backward_status)


def save_error_data(result: ApiResult, root: Path) -> Path:
    """The inputs, target and golden outputs of one API, once, under names that say what each file is:
    ``<API>/input_args[0].pt``, ``<API>/forward.output.0.target.pt``, ``<API>/backward.output.1.golden.pt``."""
    folder = root / result.name
    folder.mkdir(parents=True, exist_ok=True)
    for where, tensor in (result.inputs or {}).items():
        torch.save(tensor, folder / f"{where}.pt")
    for d in result.details:
        for side, value in (("target", d.target), ("golden", d.golden)):
            if isinstance(value, torch.Tensor):
                torch.save(value.cpu(), folder / f"{d.short_name}.{side}.pt")
    return folder


def _statistics_result(
    case: Case, golden: SideRun, builder: InputBuilder, made_no_node: Callable[[], bool]
) -> ApiResult:
    """``--target recorded`` on a statistics-only record: each output's and each recorded gradient's statistics
    against the golden's (a gradient's where msprobe's hook recorded it), never worse than warning."""
    outputs = zip(flatten(case.outputs), golden.outputs, strict=False)
    triples = [(i, spec, g) for i, (spec, g) in enumerate(outputs)]
    forward = _statistics_rows(case.name, Direction.FORWARD, triples)
    if not forward:
        return skipped(case, "statistics only, and no tensor output to grade them on")
    messages = [r.comparison.message for r in forward if r.status != PASS] or [forward[0].comparison.message]
    backward, notes = [], ()
    if case.has_backward and golden.grads is not None:
        at = golden_at_hook(gradient_shapes(case.grad_inputs), golden, made_no_node)
        specs = flatten(case.grad_inputs)
        triples = [(k, specs[k], g) for k, g in sorted(at.golden.items())]
        backward = _placed(_statistics_rows(case.name, Direction.BACKWARD, triples), at)
        messages += [f"{r.short_name}: {r.comparison.message}" for r in backward if r.status != PASS]
        notes = at.notes
    message = "; ".join(filter(None, [*messages, *notes, builder.describe()]))
    backward_status = SKIP if case.has_backward and not backward else None
    return graded(case, forward, backward, message, backward_status=backward_status)


def _statistics_rows(api: str, direction: Direction, triples: list[tuple[int, Any, Any]]) -> list[DetailRow]:
    """(place, recorded spec, golden) -> a details row per tensor, graded on its statistics."""
    rows = []
    for i, spec, g in triples:
        if isinstance(spec, TensorSpec) and isinstance(g, torch.Tensor):
            verdict = grade_statistics(spec, g)
            comparison = Comparison(
                verdict.status, verdict.message, None, str(g.dtype), str(spec.dtype), spec.shape, "statistics"
            )
            rows.append(DetailRow(api, direction, i, comparison))
    return rows
