"""The outputs training computed, graded beside the replay: what a default run would otherwise miss.

A dump from an NPU checked on a CPU machine re-runs each call on the CPU's kernels (``--target device``): a kernel
that was wrong in training, and is right here, passes. When the tensor dump saved a call's outputs, those are
graded against the same golden, with the same honest kernel as yardstick. Where a recorded output is an error and
the replay's is not, the kernel that ran in training (or the program around it) computed it: that output's details
row becomes the recorded output's grading, labelled, the API's status follows it, and the row's Message says so
(docs/guide/run_ut.md). A statistics dump saved no outputs: its inputs are generated, so its recorded statistics
describe other values than the replay's and cannot tell a wrong kernel from the generated inputs' spread.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from precheck.core.status import ERROR
from precheck.dump.records import Case, TensorSpec
from precheck.execution.runner import Call
from precheck.grader.rows import Honest, RowGrader
from precheck.inputs.builder import InputBuilder, InputError
from precheck.results import DetailRow
from precheck.walk import flatten

__all__ = ["TRAINING_LABEL", "recorded_rows", "worse_in_training"]

TRAINING_LABEL = "recorded value"


def recorded_rows(
    case: Case, call: Call, builder: InputBuilder, sides: tuple[list, list | None], grade: RowGrader, honest: Honest
) -> list[DetailRow]:
    """The recorded forward outputs graded against the golden's and the benchmark reference's ``sides`` (copied:
    the replay's grading consumes them); none where an input was generated (the golden is not of the recorded
    call), the dump saved no tensor of an output, its file cannot be read, or a shape contradicts the golden's
    (the row's Message says so already: statistics.recorded_output_notes)."""
    goldens, references = sides
    specs = flatten(case.outputs)
    saved = all(isinstance(s, TensorSpec) and s.data_name for s in specs if s is not None)
    if builder.generated or not specs or not saved:
        return []
    try:
        outputs = flatten(builder.load(case.outputs, "output"))
    except InputError:
        return []
    if call.entry.canonical:  # the recorded indices of a sort point into the recorded inputs
        try:
            outputs = call.entry.canonical(call.loaded_args, call.loaded_kwargs, outputs)
        except (RuntimeError, IndexError, ValueError):  # not of the form the replay's call made (Torch.svd's
            return []  # record of a linalg.svd: V and Vh of other shapes): the replay's grading stands alone
    shapes = [tuple(o.shape) if isinstance(o, torch.Tensor) else None for o in outputs]
    if len(outputs) != len(goldens) or shapes != [
        tuple(g.shape) if isinstance(g, torch.Tensor) else None for g in goldens
    ]:
        return []
    return grade.outputs(case.name, list(outputs), list(goldens), references, honest)


def worse_in_training(replayed: list[DetailRow], recorded: list[DetailRow], device: str) -> list[DetailRow]:
    """The replay's forward rows, each replaced by the recorded output's where that one is an error and the
    replay's is not, its clause saying which was graded and what the replay gave."""
    by_index = {r.index: r for r in recorded}
    rows = []
    for row in replayed:
        training = by_index.get(row.index)
        if training is None or training.status != ERROR or row.status == ERROR:
            rows.append(row)
            continue
        c = training.comparison
        clause = (
            f"its {TRAINING_LABEL} is {c.clause or c.message}; this machine's replay on {device} is not "
            f"({row.status}): the kernel that ran in training (or the program around it) computed it"
        )
        rows.append(replace(training, comparison=replace(c, message=clause + c.place, clause=clause, recorded=True)))
    return rows
