"""Check one case end to end: look up the API, rebuild its inputs, run both sides, grade every output.

This is the unit of work a pool worker runs. It never raises for a problem of the case itself: whatever goes
wrong becomes the case's SKIP or error row with a one-line reason, so one bad record never stops a run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from api_registry import ApiEntry, lookup, why_unsupported
from precheck.dump.records import Case, TensorSpec
from precheck.execution.honest_run import HonestRun, honest_is_target
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
    DEFAULT_COSINE,
    DEFAULT_MAX_ABS,
    ERROR,
    PASS,
    SKIP,
    WARNING,
    Comparison,
    compare,
    stochastic,
    worst,
)
from precheck.inputs.builder import InputBuilder, InputError, builder_for
from precheck.inputs.synth import rng_for

NO_BACKWARD = " "  # msprobe's blank Backward cell: no backward was compared


@dataclass(frozen=True)
class CheckOptions:
    device: str = "cpu"
    cosine: float = DEFAULT_COSINE
    max_abs: float = DEFAULT_MAX_ABS
    seed: int = 0  # seeds every generated input, together with the API name and argument place
    force_random: bool = False  # generate inputs from statistics even where the dump saved the data
    max_memory: int | None = None  # bytes one case may need; above it the case is a SKIP row
    standard: str = "default"  # precision standard (precheck.grader.standards), or "auto" per API class
    bench_device: str | None = None  # reference device for the benchmark standard (the same call, target dtypes)
    target: str = "device"  # device (re-run on `device`), recorded (the dump's outputs), compile
    keep_tensors: bool = False  # keep inputs, target and golden outputs in the result (generated tests)
    save_error_data: str | None = None  # folder for the inputs and outputs of every API that is not pass
    timeout: float | None = None  # seconds one API may take in a pool worker (None: scaled by size)


@dataclass(frozen=True)
class DetailRow:
    name: str  # "<API>.forward.output.<i>" or "<API>.backward.output.<i>"
    comparison: Comparison
    target: Any = None  # the compared values, kept only with CheckOptions.keep_tensors
    golden: Any = None


@dataclass(frozen=True)
class ApiResult:
    """One row of the result CSV and its rows of the details CSV."""

    name: str
    order: int
    forward: str
    backward: str
    message: str
    details: list[DetailRow] = field(default_factory=list)
    inputs: dict[str, Any] | None = None  # input tensors by argument place, only with CheckOptions.keep_tensors


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
    grade = _Grader(options, entry.standard, reference, honest)
    try:
        forward = grade.outputs(f"{case.name}.forward.output", target.outputs, golden.outputs)
        backward = _placed(grade.grads(f"{case.name}.backward.output", target, golden), at)
    except Exception as e:  # outputs no grader rule foresaw: this API's error row, never the run's end
        message = f"grader failed: {one_line(e)}"
        row = DetailRow(f"{case.name}.forward.output.0", Comparison(ERROR, message, None, "", "", None))
        return ApiResult(case.name, case.order, ERROR, NO_BACKWARD, message, [row])
    backward_status = worst(r.comparison.status for r in backward) if backward else NO_BACKWARD
    if backward_problem or not backward and at is not None and at.notes:
        backward_status = SKIP  # a backward was recorded but nothing of it could be graded
    problems = [
        f"{r.name.removeprefix(case.name + '.')}: {r.comparison.message}"
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
    forward_status = worst(r.comparison.status for r in forward)
    if forward_status == SKIP:
        problems.insert(0, "the API returned no output to compare")
    return ApiResult(
        case.name,
        case.order,
        forward_status,
        backward_status,
        "; ".join(problems),
        forward + backward,
        builder.tensors if options.keep_tensors else None,
    )


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
        where = at.where.get(int(row.name.rsplit(".", 1)[1]))
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
    message = "; ".join(filter(None, [f"target raised {target.error}", builder.describe()]))
    row = DetailRow(f"{case.name}.forward.output.0", Comparison(ERROR, message, None, "", "", None))
    return ApiResult(case.name, case.order, ERROR, NO_BACKWARD, message, [row])


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
    graded = stochastic.grade(case, entry, args, kwargs, target, grad_outputs)
    if isinstance(graded, str):
        return skipped(case, "; ".join(filter(None, [graded, builder.describe()])))
    rows = [DetailRow(name, comparison) for name, comparison in graded]
    forward = [r for r in rows if ".forward." in r.name]
    backward = [r for r in rows if ".backward." in r.name]
    backward_status = (
        worst(r.comparison.status for r in backward) if backward else SKIP if case.has_backward else NO_BACKWARD
    )
    problems = [r.comparison.message for r in rows if r.comparison.status != PASS]
    if backward_status == SKIP:
        problems.append(
            backward_problem
            or "backward: not checked (the gradients of a random call are checked "
            "for the dropout family on a device target)"
        )
    if builder.generated:
        problems.append(builder.describe())
    return ApiResult(
        case.name, case.order, worst(r.comparison.status for r in forward), backward_status, "; ".join(problems), rows
    )


def save_error_data(result: ApiResult, root: Path) -> Path:
    """The inputs, target and golden outputs of one API, once, under names that say what each file is:
    ``<API>/input_args[0].pt``, ``<API>/forward.output.0.target.pt``, ``<API>/backward.output.1.golden.pt``."""
    folder = root / result.name
    folder.mkdir(parents=True, exist_ok=True)
    for where, tensor in (result.inputs or {}).items():
        torch.save(tensor, folder / f"{where}.pt")
    for d in result.details:
        short = d.name.removeprefix(result.name + ".")
        for side, value in (("target", d.target), ("golden", d.golden)):
            if isinstance(value, torch.Tensor):
                torch.save(value.cpu(), folder / f"{short}.{side}.pt")
    return folder


def _statistics_result(
    case: Case, golden: SideRun, builder: InputBuilder, made_no_node: Callable[[], bool]
) -> ApiResult:
    """``--target recorded`` on a statistics-only record: each output's and each recorded gradient's statistics
    against the golden's (a gradient's where msprobe's hook recorded it), never worse than warning."""
    outputs = zip(flatten(case.outputs), golden.outputs, strict=False)
    rows = _statistics_rows(f"{case.name}.forward.output", [(i, spec, g) for i, (spec, g) in enumerate(outputs)])
    if not rows:
        return skipped(case, "statistics only, and no tensor output to grade them on")
    messages = [r.comparison.message for r in rows if r.comparison.status != PASS] or [rows[0].comparison.message]
    backward_status, notes = (SKIP if case.has_backward else NO_BACKWARD), ()
    if case.has_backward and golden.grads is not None:
        at = golden_at_hook(gradient_shapes(case.grad_inputs), golden, made_no_node)
        specs = flatten(case.grad_inputs)
        triples = [(k, specs[k], g) for k, g in sorted(at.golden.items())]
        backward = _placed(_statistics_rows(f"{case.name}.backward.output", triples), at)
        messages += [
            f"{r.name.removeprefix(case.name + '.')}: {r.comparison.message}"
            for r in backward
            if r.comparison.status != PASS
        ]
        backward_status = worst(r.comparison.status for r in backward) if backward else SKIP
        rows, notes = rows + backward, at.notes
    forward_status = worst(r.comparison.status for r in rows if ".forward." in r.name)
    message = "; ".join(filter(None, [*messages, *notes, builder.describe()]))
    return ApiResult(case.name, case.order, forward_status, backward_status, message, rows)


def _statistics_rows(prefix: str, triples: list[tuple[int, Any, Any]]) -> list[DetailRow]:
    """(place, recorded spec, golden) -> a details row per tensor, graded on its statistics."""
    rows = []
    for i, spec, g in triples:
        if isinstance(spec, TensorSpec) and isinstance(g, torch.Tensor):
            verdict = grade_statistics(spec, g)
            comparison = Comparison(
                verdict.status, verdict.message, None, str(g.dtype), str(spec.dtype), spec.shape, "statistics"
            )
            rows.append(DetailRow(f"{prefix}.{i}", comparison))
    return rows


def skipped(case: Case, reason: str) -> ApiResult:
    """A case that cannot be checked: SKIP forward, and backward too when the dump recorded one."""
    row = DetailRow(f"{case.name}.forward.output.0", Comparison(SKIP, reason, None, "", "", None))
    return ApiResult(case.name, case.order, SKIP, SKIP if case.has_backward else NO_BACKWARD, reason, [row])


class _Grader:
    """Grades one case's outputs with the run's standard, the API's class, the reference run if any, and the
    honest kernel's run when the default standard asks for it."""

    def __init__(self, options: CheckOptions, api_class: str, reference: SideRun | None, honest: HonestRun) -> None:
        self.options = options
        self.api_class = api_class
        self.reference = reference if reference is not None and not reference.error else None
        self.honest = honest

    def _row(self, name: str, target: Any, golden: Any, reference: Any, honest: Any = None) -> DetailRow:
        o = self.options
        comparison = compare(
            target,
            golden,
            standard=o.standard,
            reference=reference,
            cosine=o.cosine,
            max_abs=o.max_abs,
            api_class=self.api_class,
            honest=honest,
        )
        return DetailRow(name, comparison, *((target, golden) if o.keep_tensors else ()))

    def outputs(self, prefix: str, targets: list, goldens: list) -> list[DetailRow]:
        if len(targets) != len(goldens):
            return [
                DetailRow(
                    f"{prefix}.0",
                    Comparison(
                        ERROR, f"target returned {len(targets)} outputs, golden {len(goldens)}", None, "", "", None
                    ),
                )
            ]
        refs = (
            self.reference.outputs
            if self.reference and len(self.reference.outputs) == len(targets)
            else [None] * len(targets)
        )
        return [
            self._row(f"{prefix}.{i}", t, g, r, lambda i=i, t=t: self.honest.output(i, t))
            for i, (t, g, r) in enumerate(zip(targets, goldens, refs, strict=False))
            if not (t is None and g is None)
        ]

    def grads(self, prefix: str, target: SideRun, golden: SideRun) -> list[DetailRow]:
        if target.grads is None or golden.grads is None:
            return []
        ref_grads = (self.reference.grads if self.reference else None) or {}
        rows = []
        for i, t in sorted(target.grads.items()):
            g = golden.grads.get(i)
            name = f"{prefix}.{i}"
            if t is None and g is None:
                continue
            if t is None or g is None:
                missing = "target" if t is None else "golden"
                rows.append(
                    DetailRow(name, Comparison(ERROR, f"no gradient on the {missing} side", None, "", "", None))
                )
            else:
                rows.append(self._row(name, t, g, ref_grads.get(i), lambda i=i, t=t: self.honest.grad(i, t)))
        return rows
