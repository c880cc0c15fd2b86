"""The outputs training computed, graded beside the replay: what a default run would otherwise miss.

A dump from an NPU checked on a CPU machine re-runs each call on the CPU's kernels (``--target device``): a kernel
that was wrong in training, and is right here, passes. When the tensor dump saved a call's outputs, those are
graded against the same golden, with the same honest kernel as yardstick. Where a recorded output is an error and
the replay's is not, the kernel that ran in training (or the program around it) computed it: that output's details
row becomes the recorded output's grading, labelled, the API's status follows it, and the row's Message says so
(docs/guide/run_ut.md). A recorded output that cannot be graded is never a silent pass beside a replay that
passes: a selection's index outside its input is an error (the values beside it are still graded), and a file
torn or of another dtype than its record, or an output the call does not make, is a bad record, an error row that
says which and why. A statistics dump saved no outputs: its inputs are generated, so its recorded statistics
describe other values than the replay's and cannot tell a wrong kernel from the generated inputs' spread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from api_registry.canonical import IndexOutOfRange
from precheck.core.comparison import Comparison
from precheck.core.reasons import Reason
from precheck.core.status import ERROR
from precheck.dump.records import Case, TensorSpec
from precheck.execution.runner import Call
from precheck.grader.rows import Honest, RowGrader
from precheck.inputs.builder import InputBuilder, InputError
from precheck.results import DetailRow, Direction
from precheck.walk import flatten

__all__ = ["TRAINING_LABEL", "canonical_recorded", "graded_refusing", "recorded_rows", "worse_in_training"]

TRAINING_LABEL = "recorded value"
Refused = dict[int, Comparison]  # an output's place -> why it was not graded (an error verdict)


def recorded_rows(
    case: Case, call: Call, builder: InputBuilder, sides: tuple[list, list | None], grade: RowGrader, honest: Honest
) -> list[DetailRow]:
    """The recorded forward outputs graded against the golden's and the benchmark reference's ``sides`` (copied:
    the replay's grading consumes them). An output that cannot be graded is an error row saying why, never a silent
    pass: its file unreadable or of another dtype than its record, an output the call does not make (a bad record),
    an index outside its input. None where an input was generated (the golden is not of the recorded call), the
    dump saved no tensor of an output, or a shape or form contradicts the golden's (the row's Message says so
    already: statistics.recorded_output_notes)."""
    goldens, references = sides
    specs = flatten(case.outputs)
    saved = all(isinstance(s, TensorSpec) and s.data_name for s in specs if s is not None)
    if builder.generated or not specs or not saved:
        return []
    outputs, refused = _loaded(specs, builder, goldens)
    if len(outputs) > len(goldens):  # the record is not of the call the replay made: none of it is graded
        return [_extra(case.name, specs, len(goldens), k) for k in range(len(goldens), len(outputs))]
    try:
        outputs, wrong = canonical_recorded(call, outputs)
    except (RuntimeError, IndexError, ValueError):  # not of the form the replay's call made (Torch.svd's
        return []  # record of a linalg.svd: V and Vh of other shapes): the replay's grading stands alone
    refused.update(wrong)
    if len(outputs) != len(goldens) or _shapes(outputs, refused) != _shapes(goldens, refused):
        return []
    return graded_refusing(grade, case.name, (list(outputs), list(goldens), references), honest, refused)


def _shapes(values: list, refused: Refused) -> list[tuple | None]:
    return [tuple(v.shape) if isinstance(v, torch.Tensor) else None for i, v in enumerate(values) if i not in refused]


def _loaded(specs: list, builder: InputBuilder, goldens: list) -> tuple[list, Refused]:
    """Each recorded output read on its own, so that one torn or mistyped file names itself and leaves the others
    graded; an unreadable one is None, its error verdict kept by its place."""
    outputs: list[Any] = []
    refused: Refused = {}
    for i, spec in enumerate(specs):
        try:
            outputs.append(builder.load(spec, f"output.{i}"))
        except InputError as e:
            outputs.append(None)
            golden = goldens[i] if i < len(goldens) else None
            refused[i] = _verdict(f"a bad record: {e}", Reason.BAD_RECORDED_OUTPUT, spec, golden)
    return outputs, refused


def _extra(api: str, specs: list, made: int, k: int) -> DetailRow:
    why = (
        f"a bad record: it holds {len(specs)} outputs, the call makes {made}; recorded output {k} has no "
        "counterpart, and no recorded output is graded (which output is which is unknown)"
    )
    return DetailRow(api, Direction.FORWARD, k, _verdict(why, Reason.BAD_RECORDED_OUTPUT, specs[k], None))


def _verdict(why: str, reason: Reason, spec: Any, golden: Any) -> Comparison:
    """An error verdict on a recorded output never compared, with the dtypes and shape the details CSV shows."""
    return Comparison(
        ERROR,
        why,
        None,
        golden_dtype=str(golden.dtype) if isinstance(golden, torch.Tensor) else "",
        target_dtype=str(spec.dtype) if isinstance(spec, TensorSpec) else "",
        shape=tuple(spec.shape) if isinstance(spec, TensorSpec) else None,
        reason=reason,
    )


def canonical_recorded(call: Call, outputs: list) -> tuple[list, Refused]:
    """Recorded outputs in the canonical form the golden's are graded in (api_registry/canonical.py), and an error
    verdict for an index output pointing outside its input: no value is there to rewrite it into (Python would read
    a negative one from the end), so it is refused by name while the other outputs (a sort's values) are still
    graded. Any other failure of the rewrite propagates: the record is not of the form the call made."""
    if not call.entry.canonical:
        return outputs, {}
    try:
        return call.entry.canonical(call.loaded_args, call.loaded_kwargs, outputs), {}
    except IndexOutOfRange as e:
        rest = [None if k == e.output else o for k, o in enumerate(outputs)]
        index = outputs[e.output]
        why = f"out of range: {e.detail}"
        shape = tuple(index.shape)
        verdict = Comparison(
            ERROR, why, None, golden_dtype="", target_dtype=str(index.dtype), shape=shape,
            reason=Reason.INDEX_OUT_OF_RANGE,
        )  # fmt: skip
        return call.entry.canonical(call.loaded_args, call.loaded_kwargs, rest), {e.output: verdict}


def graded_refusing(
    grade: RowGrader, api: str, sides: tuple[list, list, Sequence | None], honest: Honest, refused: Refused
) -> list[DetailRow]:
    """``grade.outputs`` of (targets, goldens, references), but for the refused places: each is its error row."""
    targets, goldens, references = sides
    if not refused:
        return grade.outputs(api, targets, goldens, references, honest)
    kept = [[None if i in refused else v for i, v in enumerate(side)] for side in (targets, goldens)]
    refs = None if references is None else [None if i in refused else r for i, r in enumerate(references)]
    rows = grade.outputs(api, kept[0], kept[1], refs, honest)
    rows += [DetailRow(api, Direction.FORWARD, i, c) for i, c in refused.items()]
    return sorted(rows, key=lambda r: r.index)


def worse_in_training(replayed: list[DetailRow], recorded: list[DetailRow], device: str) -> list[DetailRow]:
    """The replay's forward rows, each replaced by the recorded output's where that one is an error and the
    replay's is not, its clause saying which was graded and what the replay gave; a recorded output that could not
    be graded (a bad record) is said on its row whatever the replay gave, and one the replay has no row for is a
    row of its own."""
    by_index = {r.index: r for r in recorded}
    rows = []
    for row in replayed:
        training = by_index.pop(row.index, None)
        if training is None or training.status != ERROR:
            rows.append(row)
        elif training.comparison.reason == Reason.BAD_RECORDED_OUTPUT:
            rows.append(_bad_record(row, training, device))
        elif row.status == ERROR:
            rows.append(row)
        else:
            c = training.comparison
            clause = (
                f"its {TRAINING_LABEL} is {c.clause or c.message}; this machine's replay on {device} is not "
                f"({row.status}): the kernel that ran in training (or the program around it) computed it"
            )
            rows.append(_as_recorded(training, clause))
    extra = [r for r in by_index.values() if r.status == ERROR]  # recorded outputs the call does not make
    return rows + [_as_recorded(r, f"its {TRAINING_LABEL} is not graded, {r.comparison.message}") for r in extra]


def _bad_record(row: DetailRow, training: DetailRow, device: str) -> DetailRow:
    """A recorded output that could not be graded: the row is an error that says so; where the replay's own grading
    is an error too, that stays, and the bad record is said after it."""
    why = f"its {TRAINING_LABEL} is not graded, {training.comparison.message}"
    if row.status == ERROR:
        return replace(row, comparison=replace(row.comparison, message=f"{row.comparison.message}; {why}"))
    return _as_recorded(training, f"{why}; this machine's replay on {device} is {row.status}")


def _as_recorded(training: DetailRow, clause: str) -> DetailRow:
    c = training.comparison
    return replace(training, comparison=replace(c, message=clause + c.place, clause=clause, recorded=True))
