"""What a run produces, as values: a verdict per output (a details row) and per API (a result row).

Torch-free on purpose: the commands that only read or compare results (regress, api_precision_compare, the
report) import this and never torch. The CSV's spellings (a blank Backward cell, 14 decimals, escaping) belong
to the writer in precheck/run_files/csv_files.py, not to these values: an API without a backward has
``backward=None`` here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from precheck.core.comparison import Comparison
from precheck.core.reasons import Reason
from precheck.core.status import ERROR, SKIP, Status, worst
from precheck.schema import Direction, split_row_name

__all__ = [
    "ApiResult",
    "DetailRow",
    "device_lost",
    "Direction",
    "Status",
    "failed",
    "graded",
    "is_timed_out",
    "skipped",
    "split_row_name",
    "timed_out",
]


@dataclass(frozen=True)
class DetailRow:
    """One compared output of one API, named as msprobe names it: ``<API>.forward.output.<i>`` for the call's
    i-th output, ``<API>.backward.output.<i>`` for the gradient of its i-th tensor input."""

    api: str
    direction: Direction
    index: int
    comparison: Comparison
    target: Any = None  # the compared values, kept only with CheckOptions.keep_tensors
    golden: Any = None

    @property
    def name(self) -> str:
        return f"{self.api}.{self.direction}.output.{self.index}"

    @property
    def short_name(self) -> str:
        """The name without the API (``forward.output.0``), as messages and saved files say it."""
        return f"{self.direction}.output.{self.index}"

    @property
    def status(self) -> Status:
        return self.comparison.status


@dataclass(frozen=True)
class ApiResult:
    """One row of the result CSV and its rows of the details CSV."""

    name: str
    order: int
    forward: Status
    backward: Status | None  # None: the dump recorded no backward, so none was compared
    message: str
    details: list[DetailRow] = field(default_factory=list)
    inputs: dict[str, Any] | None = None  # input tensors by argument place, only with CheckOptions.keep_tensors
    generated_inputs: bool = False  # graded on inputs generated from the dump's statistics, not recorded ones

    def rows(self, direction: Direction) -> list[DetailRow]:
        return [d for d in self.details if d.direction == direction]


class Recorded(Protocol):
    """What a result needs of the record it is about (a dump's ``Case``, or anything shaped like it)."""

    @property
    def name(self) -> str: ...

    @property
    def order(self) -> int: ...

    @property
    def has_backward(self) -> bool: ...


def _one_row(record: Recorded, status: Status, backward: Status | None, reason: str, code: Reason) -> ApiResult:
    row = DetailRow(record.name, Direction.FORWARD, 0, Comparison.failed(reason, code, status))
    return ApiResult(record.name, record.order, status, backward, reason, [row])


def skipped(record: Recorded, reason: str, code: Reason = Reason.SKIPPED) -> ApiResult:
    """A record that cannot be checked: SKIP forward, and backward too when the dump recorded one."""
    return _one_row(record, SKIP, SKIP if record.has_backward else None, reason, code)


def timed_out(record: Recorded, seconds: float) -> ApiResult:
    """A record whose check ran past its time limit: SKIP, not an error. How long a call takes says nothing of its
    precision, and on a busy machine a call that passes with more time ran past the limit: as an error it failed a
    nightly ``--fail-on error`` gate for the machine's load. The same row from every scheduler."""
    return skipped(record, f"timed out after {seconds:g} s; not graded", Reason.TIMED_OUT)


def is_timed_out(result: ApiResult) -> bool:
    """Whether a result is ``timed_out``'s, so summaries count it apart."""
    return result.forward == SKIP and any(d.comparison.reason == Reason.TIMED_OUT for d in result.details)


def failed(record: Recorded, reason: str, code: Reason = Reason.TARGET_FAILED) -> ApiResult:
    """A record whose check failed in a way that blames the API (it crashed, or its target run failed):
    one error row, its backward not compared; ``code`` DEVICE_FAILED where the failure left the device
    untrusted (a pool then retires the worker: ``device_lost``)."""
    return _one_row(record, ERROR, None, reason, code)


def device_lost(result: ApiResult) -> bool:
    """Whether a result's check left its process's device untrusted: the worker that ran it is retired."""
    return any(d.comparison.reason == Reason.DEVICE_FAILED for d in result.details)


def graded(
    record: Recorded,
    forward: list[DetailRow],
    backward: list[DetailRow],
    message: str,
    *,
    backward_status: Status | None = None,
    inputs: dict[str, Any] | None = None,
    generated_inputs: bool = False,
) -> ApiResult:
    """The result of graded rows: each direction's worst status; the backward's is ``backward_status`` when
    given (a recorded backward of which nothing could be graded is SKIP), else None when no row was graded."""
    if backward_status is None and backward:
        backward_status = worst(r.status for r in backward)
    forward_status = worst(r.status for r in forward)
    details = forward + backward
    return ApiResult(
        record.name, record.order, forward_status, backward_status, message, details, inputs, generated_inputs
    )
