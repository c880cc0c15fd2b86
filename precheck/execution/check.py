"""Check one case end to end: look up the API, rebuild its inputs, run both sides, grade every output.

This is the unit of work a pool worker runs. It never raises for a problem of the case itself: whatever goes
wrong becomes the case's SKIP or error row with a one-line reason, so one bad record never stops a run. One
check reads as a straight line whatever the target (execution/targets.py): preflight, build, golden, target,
grade, result.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch

from api_registry import ApiEntry, lookup, why_unsupported
from api_registry.mindspore import is_mint
from precheck.compat import replay_function
from precheck.core.reasons import Reason
from precheck.core.status import ERROR, PASS, SKIP, WARNING, worst
from precheck.dump.autocast import autocast_dtype, held_to
from precheck.dump.records import Case, TensorSpec
from precheck.execution.honest_run import HonestRun
from precheck.execution.options import CheckOptions
from precheck.execution.recorded import gradient_shapes, placed, same_place
from precheck.execution.runner import Call, SideRun, one_line, run_side
from precheck.execution.shards import reduced_before_kernel
from precheck.execution.sides import GOLDEN, reference_side
from precheck.execution.sizes import memory_problem
from precheck.execution.statistics import recorded_output_notes
from precheck.execution.targets import Ran, Target, target_for, target_raised
from precheck.execution.training_outputs import graded_refusing, recorded_rows, worse_in_training
from precheck.execution.vocab_parallel import is_loss_parallel, is_masked_embedding
from precheck.grader import stochastic
from precheck.grader.rows import RowGrader
from precheck.inputs.builder import InputBuilder, InputError, builder_for
from precheck.results import ApiResult, DetailRow, Direction, failed, graded, skipped
from precheck.walk import flatten

# The working directory as a handle to return to: O_PATH (Linux) needs no read permission on it, so a run started
# in a folder it may only enter still restores it; elsewhere a plain read-only open.
_HERE = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY


def check_case(case: Case, data_dir: Path, options: CheckOptions = CheckOptions()) -> ApiResult:
    """One case's result. The working directory is the process's, not the call's: an API that changes it (a
    plugin's os.chdir) would leave the relative paths of every later case in this process looking elsewhere
    (a dump named by a relative path: every later API a SKIP, and the run's end unable to reread its dump).
    What an API raises to end a process or thread (SystemExit, GeneratorExit) is that call's row in every
    scheduler: it would end the run in-process, a pool's worker, or a Dask task unanswered (read as a timeout)."""
    try:
        here = os.open(".", _HERE)
    except OSError:  # a working directory this process cannot open: nothing to return to, the case still runs
        here = None
    try:
        # files read after the call ran (its recorded outputs, its gradients) are read where they were before it
        return _check_case(case, Path(os.path.abspath(data_dir)), options)
    except (SystemExit, GeneratorExit) as e:
        return failed(case, f"the call raised {one_line(e)}, which would have ended the run")
    finally:
        if here is not None:
            os.fchdir(here)
            os.close(here)


def _check_case(case: Case, data_dir: Path, options: CheckOptions) -> ApiResult:
    target = target_for(options)
    if options.save_error_data and not options.keep_tensors:
        result = _guarded(case, data_dir, replace(options, keep_tensors=True), target)
        if {result.forward, result.backward} & {WARNING, ERROR}:
            try:
                save_error_data(result, Path(options.save_error_data))
            except (OSError, RuntimeError) as e:  # a full disk costs the saved files, never the verdict
                print(f"precheck: warning: cannot save error data of {result.name}: {one_line(e)}", file=sys.stderr)
        result = replace(result, inputs=None, details=[replace(d, target=None, golden=None) for d in result.details])
    else:
        result = _guarded(case, data_dir, options, target)
    return _labelled(result, target.label, recorded=not target.replays)


def _labelled(result: ApiResult, label: str, recorded: bool) -> ApiResult:
    """A target other than the device is named in every details row's Message (DEVICE Dtype keeps msprobe's
    meaning), and a row graded on the recorded outputs says so in its reason (the report's advice reproduces what
    was graded); the compared tensors stay (-save_error_data keeps them)."""
    if not label:
        return result
    details = [
        replace(
            d,
            comparison=replace(
                d.comparison,
                message="; ".join(filter(str.strip, [label, d.comparison.message])),
                recorded=recorded or d.comparison.recorded,
            ),
        )
        for d in result.details
    ]
    return replace(result, details=details)


def _guarded(case: Case, data_dir: Path, options: CheckOptions, target: Target) -> ApiResult:
    """A fault of precheck's own on one record (a grader or a statistical check meeting what it did not foresee)
    is that record's SKIP row, never the run's end and never a traceback; the API itself is not blamed."""
    try:
        return _check(case, data_dir, options, target)
    except Exception as e:
        return skipped(case, f"precheck could not check this record: {one_line(e)}", Reason.SKIP_PRECHECK_FAULT)


def _check(case: Case, data_dir: Path, options: CheckOptions, target: Target) -> ApiResult:
    """One case: preflight, build its inputs, run the golden and the target, grade them."""
    checked = preflight(case, options, target)
    if isinstance(checked, ApiResult):
        return checked
    entry, reason = checked
    builder = builder_for(
        entry, case, data_dir, seed=options.seed, force_random=options.force_random, max_bytes=options.max_memory
    )
    built = _built(case, entry, builder, options.max_memory)
    if isinstance(built, ApiResult):
        return built
    call, backward_problem = built
    if reason:
        return _random(case, call, builder, target, options, backward_problem)
    golden, call = _golden(case, call, target.hook_node)
    ran = target.outcome(call, case, builder, golden)
    del golden  # the recorded target grades ran.golden; the gradients it moved elsewhere need not live on
    if isinstance(ran, ApiResult):
        return ran
    if ran.golden.error:
        why = "cannot run the recorded call" if ran.target.error else "golden (CPU float64) failed"
        why = "; ".join(filter(None, [f"{why}: {ran.golden.error}", builder.describe()]))
        return skipped(case, why, Reason.SKIP_GOLDEN_FAILED)
    if ran.target.error:
        return target_raised(case, ran.target, builder.describe())
    reference = _reference(case, call, options, ran)
    return _graded(case, call, builder, options, target, backward_problem, ran, reference)


_NEEDS_PEERS = ("Distributed.", "MindSpeed.")  # why_unsupported's: what needs a process group and its peers
_ONE_RANK = (
    "DTensor reduced its Partial input across the ranks before the kernel ran, and one rank's record holds only "
    "its own part: run_ut the step folder of every rank to grade it (precheck.ranks.whole_calls)"
)
_LOSS_PARALLEL = (
    "a loss_parallel cross-entropy: DTensor computed it across every rank's shard of the classes, and one rank's "
    "record holds only its own: run_ut the step folder of every rank to grade it (precheck.ranks.whole_calls)"
)
_MASKED_IDS = (
    "a vocab-parallel embedding: DTensor masked its ids to this rank's rows of the weight before the kernel ran "
    "(its _MaskPartial), and where those rows start is known from every rank's shard: run_ut the step folder of "
    "every rank to grade it (precheck.ranks.whole_calls)"
)


def preflight(case: Case, options: CheckOptions, target: Target) -> ApiResult | tuple[ApiEntry, str | None]:
    """The case's SKIP row when it cannot be checked here (a bad record, an unsupported API, another device's
    fused op, an uncheckable random call, too much memory); else its registry entry and why it is random."""
    if case.problem and case.api.startswith(_NEEDS_PEERS) and lookup(case.api) is None:
        # a rank's own pipeline transfer (a P2POp, isend(group=)) reads as no argument precheck rebuilds, but no
        # rank alone could run it however well recorded: say that, not "bad record" of msprobe's valid record
        return skipped(case, why_unsupported(case.api), Reason.SKIP_UNSUPPORTED)
    if case.problem:
        return skipped(case, case.problem, case.problem_reason)
    if reduced_before_kernel((case.args, case.kwargs), case.outputs):
        return skipped(case, _ONE_RANK, Reason.SKIP_MISSING_RANK)
    if is_masked_embedding(case):
        return skipped(case, _MASKED_IDS, Reason.SKIP_MISSING_RANK)
    if is_loss_parallel(case):
        return skipped(case, _LOSS_PARALLEL, Reason.SKIP_MISSING_RANK)
    entry = lookup(case.api)
    if entry is None and case.recorded_api:
        return skipped(
            case, f"{case.recorded_api}: its PyTorch equivalent {case.api} is not supported", Reason.SKIP_UNSUPPORTED
        )
    if entry is None:
        code = Reason.SKIP_OTHER_FRAMEWORK if is_mint(case.api) else Reason.SKIP_UNSUPPORTED
        return skipped(case, why_unsupported(case.api), code)
    if entry.needs_device and target.on_device and not target.device.startswith(entry.needs_device):
        return skipped(
            case,
            f"{case.api} is an {entry.needs_device.upper()} fused op: it runs on an "
            f"{entry.needs_device.upper()}, not on {target.device}; --target recorded grades its "
            f"recorded outputs against the CPU reference",
            Reason.SKIP_DEVICE_OP,
        )
    reason = entry.random_reason(case.args, case.kwargs)
    if reason and not stochastic.checkable(entry):
        return skipped(case, reason, Reason.SKIP_RANDOM)
    too_big = memory_problem(case, options.max_memory)
    if too_big:
        return skipped(case, too_big, Reason.SKIP_MEMORY)
    return entry, reason


def _built(
    case: Case, entry: ApiEntry, builder: InputBuilder, limit: int | None
) -> ApiResult | tuple[Call, str | None]:
    """The call with its inputs rebuilt, and why its backward cannot be fed (its gradient files), if so; sized
    again with their values (a 0-dim size's file may hold more than its recorded statistics say)."""
    try:
        args = builder.build(case.args, "input_args")
        kwargs = builder.build(case.kwargs, "input_kwargs")
    except InputError as e:
        return skipped(case, str(e), e.reason)
    too_big = memory_problem(case, limit, (args, kwargs))
    if too_big:
        return skipped(case, too_big, Reason.SKIP_MEMORY)
    grad_outputs, backward_problem = None, None
    if case.has_backward:
        try:
            grad_outputs = builder.build(case.grad_outputs, "backward.input")
        except InputError as e:
            backward_problem = f"backward: {e}"
    entry = replace(entry, func=replay_function(case.api, entry.func))  # as this torch spells the call
    call = Call(entry, case.args, case.kwargs, args, kwargs, grad_outputs, autocast=autocast_dtype(case))
    return call, backward_problem


def _golden(case: Case, call: Call, hook_node: bool) -> tuple[SideRun, Call]:
    """The golden run, and the call it ran: of two same-named APIs (``Torch.norm`` is torch's and
    ``torch.linalg``'s), the one whose outputs have the recorded shapes."""
    golden = run_side(call, GOLDEN, hook_node=hook_node)
    if call.entry.alternate is not None and not _fits(golden, case):
        other_call = replace(call, entry=call.entry.alternate)
        other = run_side(other_call, GOLDEN, hook_node=hook_node)
        if _fits(other, case):
            return other, other_call
    return golden, call


def _is_spec(value: object) -> bool:
    return isinstance(value, TensorSpec)


def _fits(run: SideRun, case: Case) -> bool:
    """Whether a golden run produced outputs of the recorded shapes (which of two same-named APIs was called)."""
    recorded = [tuple(s.shape) for s in flatten(case.outputs) if isinstance(s, TensorSpec)]
    return not run.error and recorded == [tuple(o.shape) for o in run.outputs if isinstance(o, torch.Tensor)]


def _reference(case: Case, call: Call, options: CheckOptions, ran: Ran) -> SideRun | None:
    """The benchmark standard's reference run, its gradients where the golden's were taken."""
    if not options.bench_device:
        return None
    hook = ran.at is not None
    reference = run_side(call, reference_side(options.bench_device), hook_node=hook)
    if hook:
        reference = replace(reference, grads=same_place(reference, ran.at, gradient_shapes(case.grad_inputs)))
    return reference


def _graded(
    case: Case,
    call: Call,
    builder: InputBuilder,
    options: CheckOptions,
    target: Target,
    backward_problem: str | None,
    ran: Ran,
    reference: SideRun | None,
) -> ApiResult:
    """The graded rows of a call whose sides all ran, and the row's message: every non-pass reason and note."""
    honest = HonestRun(call, case, ran.at, ran.target if target.is_honest(case) else None)
    max_abs = math.inf if builder.unwritten else options.max_abs  # no bound at a scale the inputs are not at
    grade = RowGrader(
        options.standard, options.cosine, max_abs, call.entry.standard, options.keep_tensors, held_to(case)
    )
    reference_ok = reference is not None and not reference.error
    # Before grading frees the outputs; a canonical form rewrites indices into values, so no dtype is compared.
    odd = recorded_output_notes(case.outputs, ran.target.outputs, dtypes=call.entry.canonical is None)
    try:
        refs = reference.outputs if reference_ok else None
        sides = (ran.golden.outputs, refs)
        training = recorded_rows(case, call, builder, sides, grade, honest.output) if target.replays else []
        forward = graded_refusing(
            grade, case.name, (ran.target.outputs, ran.golden.outputs, refs), honest.output, ran.refused
        )
        forward = worse_in_training(forward, training, target.device)
        ref_grads = (reference.grads if reference_ok else None) or {}
        rows = grade.grads(case.name, ran.target.grads, ran.golden.grads, ref_grads, honest.grad)
        backward = placed(rows, ran.at)
    except Exception as e:  # outputs no grader rule foresaw: this API's error row, never the run's end
        return failed(case, f"grader failed: {one_line(e)}")
    notes = ran.at.notes if ran.at is not None else ()
    if case.has_backward and case.grad_inputs is not None and not any(map(_is_spec, flatten(case.grad_inputs))):
        notes = (*notes, "backward: the backward record saved no input gradient to grade")
    backward_status = None
    if backward_problem or not backward and notes:
        backward_status = SKIP  # a backward was recorded but nothing of it could be graded
    problems = [
        f"{r.short_name}: {r.comparison.message}"
        for r in forward + backward
        if r.status != PASS and r.comparison.message
    ]
    problems += [backward_problem] if backward_problem else []
    problems += [*notes, *builder.roundings, *odd, *_unwritten(builder, forward + backward, options.max_abs)]
    if builder.generated:
        problems.append(builder.describe())
    if call.entry.nondeterministic and {WARNING, ERROR} & {r.status for r in forward + backward}:
        problems.append("non-deterministic on accelerators (atomic accumulation): a rerun may differ slightly")
    if reference is not None and reference.error:
        problems.append(f"reference on {options.bench_device} failed ({reference.error}): graded without it")
    if honest.run is not None and honest.run.error:
        problems.append(f"honest kernel (CPU, float32) failed ({honest.run.error}): modeled instead")
    if worst(r.status for r in forward) == SKIP:
        problems.insert(0, "the API returned no output to compare")
    inputs = builder.tensors if options.keep_tensors else None
    message, generated = "; ".join(problems), builder.generated > 0
    return graded(
        case, forward, backward, message, backward_status=backward_status, inputs=inputs, generated_inputs=generated
    )


def _unwritten(builder: InputBuilder, rows: list[DetailRow], max_abs: float) -> list[str]:
    """What the Message says of a call graded on inputs that read as memory no call wrote (inputs/unwritten.py),
    where it changed a verdict: the default standard's max abs error bound, which is at the training's scale, was
    not held against the rows it would have failed (an exact fp32 linear on 1.7e28 rounds by 1e20); the honest
    kernel's verdict, scale-free, graded them (an error stays one). Elsewhere the call is graded as any other."""
    waived = [
        f"{r.short_name} {r.comparison.metrics.max_abs_err:.3g}"
        for r in rows
        if r.comparison.standard == "default"
        and r.comparison.metrics is not None
        and (r.comparison.metrics.max_abs_err or 0.0) >= max_abs
    ]
    if not builder.unwritten or not waived:
        return []
    return [
        f"{'; '.join(builder.unwritten)}: max abs error ({', '.join(waived)}) not held to {max_abs:g}, a bound "
        "at the training's scale; graded by the honest kernel's verdict, which holds at any scale"
    ]


def _random(
    case: Case, call: Call, builder: InputBuilder, target: Target, options: CheckOptions, backward_problem: str | None
) -> ApiResult:
    """A random call: one target draw, graded by the law of its outputs (grader/stochastic.py)."""
    drawn = target.draw(call, case, builder, options.seed)
    if isinstance(drawn, ApiResult):
        return drawn
    grad_outputs = call.grad_outputs if target.on_device else None  # only a run on the device ran a backward
    rows = stochastic.grade(case.name, call.entry, call.loaded_args, call.loaded_kwargs, drawn, grad_outputs)
    if isinstance(rows, str):
        return skipped(case, "; ".join(filter(None, [rows, builder.describe()])), Reason.SKIP_RANDOM)
    forward = [r for r in rows if r.direction == Direction.FORWARD]
    backward = [r for r in rows if r.direction == Direction.BACKWARD]
    backward_status = worst(r.status for r in backward) if backward else SKIP if case.has_backward else None
    problems = [r.comparison.message for r in rows if r.status != PASS]
    if backward_status == SKIP:
        problems.append(
            backward_problem
            or "backward: not checked (the gradients of a random call are checked "
            "for the dropout family on a device target)"
        )
    if builder.generated:
        problems.append(builder.describe())
    message, generated = "; ".join(problems), builder.generated > 0
    return graded(case, forward, backward, message, backward_status=backward_status, generated_inputs=generated)


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
