"""Which record a tensor dump's compare names first divergent: the honest-kernel rule before the tolerance's.

A fixed tolerance (precheck.compare.divergence) cannot see a kernel that loses two or three roundings: a bf16
softmax that sums in bf16 reads "agree" against a bf16 bench, and a later record is blamed for what it passed on.
In a tensor dump each side's record holds its own inputs and outputs, so each side's output can be graded against
the float64 golden of its own inputs, with an honest kernel's error as the yardstick, as run_ut grades ``--target
recorded`` (precheck.execution.check, grader/honest.py). The first record, in execution order, where the target is
worse than an honest kernel (run_ut's error) and the bench is not is the first divergent record.

What is graded is kept in proportion: only the records the divergence search kept as candidates (outputs that
deviate but within rounding: runs that are identical up to a record cost nothing), at most MAX_REPLAYED calls, the
target side first (the bench only where the target is worse), stopping at the first record named. torch is imported
only then, so a compare with nothing to grade stays torch-free. The search reaches past the tolerance's first
divergent record only where that record is itself explained by rounding (its deviation within the coarsest rounding
the runs went through: precheck.compare.divergence keeps candidates past it then): across precisions (autocast bf16
against fp32) a record that only carries bf16 rounding forward must not hide a bad kernel after it. The summary says
how far it looked. Statistics and md5 dumps hold no tensors to grade: the tolerance rule alone names their record,
and the summary says so.

Across precisions each side is graded in the dtype it ran in, as run_ut's ``--target recorded`` grades it: against
the float64 golden of its own inputs, the honest kernel rounded to the dtype that side recorded its output in
(bf16 for an autocast linear, fp32 for the bench's). That is run_ut's rule, shared through its backends, not
copied here: where run_ut learns to replay a call in the dtype autocast ran it in (the autocast inference of the
execution layer), compare's grading follows through ``_Replay.options`` without a change here.

A dump comes from someone else's machine (docs/reference/untrusted-dumps.md), so each call is replayed as run_ut
replays it, through its backends (precheck.scheduling.backends): a call that switches off torch's checks runs in a
worker process, a call sized above ``--max-memory`` is refused before anything is built, and a call past its time
limit (``--timeout``, run_ut's default) is cut. A call refused, crashed or cut is not graded, so never named: the
summary lists it with its reason, and a call cut stops the replay (its helper may still be running; a hostile dump
of such calls would otherwise hold the compare once per call). The replay as a whole has a time budget
(``--replay-budget``, REPLAY_BUDGET by default): no call may run past what is left of it, and once it is spent the
replay stops, the summary saying how far it reached and where it stopped (50 calls each under its own limit held a
compare past 360 s before, with no summary written).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from precheck.compare.divergence import AGREE, HONEST_RULE, MAX_SUSPECTS, SUSPECT, TOLERANCE_RULE, Finding
from precheck.compare.entries import DumpIndex
from precheck.compare.record_log import mark_verdict
from precheck.core.comparison import Comparison
from precheck.core.reasons import BEYOND_ROUNDING, Reason
from precheck.dump.index import RecordError
from precheck.dump.record_names import is_module, split_key
from precheck.execution.options import CheckOptions

if TYPE_CHECKING:
    from pathlib import Path

    from precheck.compare.summary import DumpComparison
    from precheck.dump.records import Case
    from precheck.results import ApiResult

__all__ = ["MAX_PICKS", "MAX_REPLAYED", "REPLAY_BUDGET", "localize"]

MAX_REPLAYED = 50  # calls graded on the target side by one compare
MAX_PICKS = 10  # calls beyond them for the tolerance's picks: candidates before a pick must not spend its grading
MAX_REASON = 300  # characters of run_ut's message kept in the summary
REPLAY_BUDGET = 300.0  # seconds all the calls replayed by one compare may take together (--replay-budget)
MAX_NOT_GRADED = 20  # calls refused, crashed or cut that the summary names (all are counted)
# run_ut's rows of a call that was not graded: refused by --max-memory, cut at its time limit, or whose worker died
# (with --target recorded nothing else fails a target: the only call run is the golden's, and the honest kernel's)
HONEST = ("pass", "warning")  # run_ut's statuses of a side graded and no worse than an honest kernel
NOT_GRADED = frozenset({Reason.SKIP_MEMORY, Reason.TIMED_OUT, Reason.TARGET_FAILED, Reason.DEVICE_FAILED})


def localize(
    result: DumpComparison,
    target: DumpIndex,
    bench: DumpIndex,
    pairs: list[tuple[int | None, int | None]],
    limits: CheckOptions | None = None,
    budget: float = REPLAY_BUDGET,
) -> None:
    """Apply the honest-kernel rule to ``result``'s candidates; ``result.divergence.localization`` says which rule
    named the first divergent record, what grading cost and which calls were not graded. ``limits``: run_ut's
    ``max_memory`` and ``timeout`` for each replayed call (None: run_ut's defaults); ``budget``: the seconds all
    of them may take together."""
    d = result.divergence
    info: dict[str, Any] = {
        "rule": TOLERANCE_RULE,
        "tolerance_first": d.first.name if d.first else None,
        "candidates": d.candidates_seen,
        "replayed_calls": 0,
        "replay_seconds": 0.0,
    }
    if not result.mode.reads_tensors:
        info["why"] = f"a {result.mode} dump holds no tensors to grade against a golden: the tolerance rule alone"
    elif not d.candidates:
        info["why"] = "no record deviates: nothing for the honest-kernel rule to grade"
    else:
        start = time.perf_counter()
        replay = _Replay(target, bench, pairs, limits or CheckOptions(), budget)
        replay.clearable = d.clearable
        found = replay.search(d.candidates)
        info.update(replayed_calls=replay.calls, replay_seconds=round(time.perf_counter() - start, 3))
        info["replay_budget"] = budget
        info["graded_up_to"] = replay.reached
        if replay.cleared:
            info["cleared"] = [{"record": f.name, "why": why} for f, why in replay.cleared]
        info["why"] = replay.summary(found)
        if replay.not_graded:
            info.update(not_graded=replay.not_graded, not_graded_count=replay.not_graded_count)
        _settle(result, found, [f for f, _ in replay.cleared])
        if found is not None and found.rule == HONEST_RULE:
            info["rule"] = HONEST_RULE
    d.localization = info


def _settle(result: DumpComparison, found: Finding | None, cleared: list[Finding]) -> None:
    """The records the replay cleared agree; ``found`` becomes the first divergent record (None: none), and where
    the honest-kernel rule named it, the first suspect: in the summary and the records CSV."""
    d = result.divergence
    for finding in cleared:
        d.verdicts[finding.verdict] -= 1
        d.verdicts[AGREE] += 1
        mark_verdict(result.records_path, finding.name, AGREE)
    d.suspects = [f for f in d.suspects if f not in cleared]
    d.first = found
    if found is not None and found.rule == HONEST_RULE:
        d.verdicts[AGREE] -= 1
        d.verdicts[SUSPECT] += 1
        d.suspects = [found, *d.suspects][:MAX_SUSPECTS]
        mark_verdict(result.records_path, found.name, SUSPECT)


class _Replay:
    """Grades records of either side as run_ut's ``--target recorded`` does, each call once per side."""

    def __init__(
        self,
        target: DumpIndex,
        bench: DumpIndex,
        pairs: list[tuple[int | None, int | None]],
        limits: CheckOptions,
        budget: float,
    ) -> None:
        self.target, self.bench = target, bench
        self.options = replace(limits, target="recorded")
        self.bench_of = {i: j for i, j in pairs if i is not None and j is not None}
        self.at = {id(target): _positions(target), id(bench): _positions(bench)}
        self.graded: dict[tuple[int, str], Any] = {}
        self.calls = 0
        self.stopped = False
        self.cut: str | None = None  # the call that stopped the replay: past its time limit, or the budget spent
        self.cut_why = ""
        self.budget, self.deadline = budget, time.monotonic() + budget
        self.not_graded: list[dict[str, str]] = []  # calls refused, crashed or cut: record, side, why
        self.not_graded_count = 0
        self.reached: str | None = None  # the last record graded
        self.cleared: list[tuple[Finding, str]] = []  # the tolerance's picks that rounding explains, and why
        self.clearable: set[str] = set()  # the picks a replay may clear (precheck.compare.divergence)

    def search(self, records: list[Finding]) -> Finding | None:
        """The first record named: a candidate the target's side fails and the bench's passes (HONEST_RULE), or a
        pick of the tolerance's that the replay does not clear; None where neither is found."""
        for at, found in enumerate(records):
            if found.verdict != AGREE:  # a pick of the tolerance's
                if not self._clears(found):
                    return found
                continue
            if self.stopped:
                continue  # past the candidates' budget: only the tolerance's picks are still graded
            i = self.at[id(self.target)].get(found.name)
            j = self.bench_of.get(i) if i is not None else None
            if j is None:
                continue
            mine = self._status(self.target, found.name)
            if self.cut:
                return _next_pick(records[at:])
            self.reached = found.name if mine is not None else self.reached
            if mine is None or mine[0] != "error":
                continue
            theirs = self._status(self.bench, self.bench.keys[j])
            if self.cut:
                return _next_pick(records[at:])
            if theirs is not None and theirs[0] in HONEST:  # graded, and no worse than honest
                why = (
                    f"the target's {found.direction} is worse than an honest kernel ({mine[1][:MAX_REASON]}) and "
                    f"the bench's is not ({theirs[0]})"
                )
                return replace(found, verdict=SUSPECT, rule=HONEST_RULE, honest=why)
        return None

    def _clears(self, found: Finding) -> bool:
        """Whether neither side of the tolerance's pick ``found`` is worse than an honest kernel: its deviation
        is then rounding (a sum whose cancellation magnifies the rounding it received), and it is cleared. A pick
        not graded on both sides (no call, refused, past the budget) stands, as does one not held to CARRIED."""
        if found.name not in self.clearable:
            return False
        i = self.at[id(self.target)].get(found.name)
        j = self.bench_of.get(i) if i is not None else None
        mine = self._status(self.target, found.name, pick=True) if j is not None else None
        if j is None or mine is None or self.cut or mine[0] not in HONEST:
            return False
        self.reached = found.name
        theirs = self._status(self.bench, self.bench.keys[j])
        if theirs is None or self.cut or theirs[0] not in HONEST:
            return False
        why = (
            f"output deviation {found.output_deviation:.3g} beyond the tolerance (inputs {found.input_deviation:.3g}), "
            f"but each side's {found.direction} graded against the float64 golden of its own inputs is no worse "
            f"than an honest kernel (target {mine[0]}, bench {theirs[0]}): rounding explains it"
        )
        self.cleared.append((found, why))
        return True

    def summary(self, found: Finding | None) -> str:
        """How far the search looked and what it found, in one sentence."""
        cleared = ""
        if self.cleared:
            names = ", ".join(f.name for f, _ in self.cleared[:3]) + (" ..." if len(self.cleared) > 3 else "")
            cleared = (
                f"; {len(self.cleared)} record(s) the tolerance named cleared, no worse than an honest kernel on "
                f"either side: {names}"
            )
        if found is not None and found.rule == HONEST_RULE:
            return f"the target is worse than an honest kernel at {found.name} and the bench is not{cleared}"
        limit = (
            f" (a compare grades at most {MAX_REPLAYED} calls, so the candidates after those were left to the "
            "tolerance rule; run_ut --target recorded on the target dump grades every call)"
            if self.stopped
            else ""
        )
        if self.cut:
            limit = f" (stopped at {self.cut}, {self.cut_why}: the rest were not graded)"
        if self.not_graded_count:
            first = self.not_graded[0]
            limit += (
                f"; {self.not_graded_count} call(s) not graded (refused, crashed or past the time limit), "
                f"the first {first['record']} ({first['side']}): {first['why']}"
            )
        stands = "the tolerance rule's record stands" if found is not None else "no record parts the runs"
        up_to = f", up to {self.reached}" if self.reached else ""
        graded = f"of {self.calls} calls graded{up_to}{limit}{cleared}"
        return f"no record graded worse than an honest kernel on the target only, {graded}: {stands}"

    def _status(self, index: DumpIndex, key: str, pick: bool = False) -> tuple[str, str] | None:
        """(run_ut's status of the record's direction, its error message), or None where it has none; ``pick``:
        a tolerance's pick, which has MAX_PICKS calls of its own past the candidates' budget."""
        parts = split_key(key)
        if parts is None or is_module(key):
            return None  # a module is no API to replay
        api, number, direction = parts
        stem = f"{api}.{number}"
        if (id(index), stem) not in self.graded:
            if index is self.target and self.calls >= MAX_REPLAYED + (MAX_PICKS if pick else 0):
                self.stopped = True
                return None
            if time.monotonic() >= self.deadline:
                self.cut, self.cut_why = stem, f"the replay's time budget of {self.budget:g} s spent"
                return None
            self.calls += index is self.target
            self.graded[(id(index), stem)] = self._graded(index, stem, api)
        return _direction(self.graded[(id(index), stem)], direction)

    def _graded(self, index: DumpIndex, stem: str, api: str) -> ApiResult | None:
        """run_ut's result of the call, or None where it was not graded: refused, crashed or cut, which the
        summary then names (a cut also stops the replay)."""
        left = max(self.deadline - time.monotonic(), 0.0)
        result = _grade(index, self.at[id(index)], stem, api, self.options, left)
        if result is None or not any(d.comparison.reason in NOT_GRADED for d in result.details):
            return result
        side = "target" if index is self.target else "bench"
        self.not_graded_count += 1
        if len(self.not_graded) < MAX_NOT_GRADED:
            self.not_graded.append({"record": stem, "side": side, "why": result.message[:MAX_REASON]})
        if any(d.comparison.reason == Reason.TIMED_OUT for d in result.details):
            spent = time.monotonic() >= self.deadline
            self.cut = stem
            self.cut_why = f"the replay's time budget of {self.budget:g} s spent" if spent else "past its time limit"
        return None


def _next_pick(records: list[Finding]) -> Finding | None:
    """The tolerance's next pick among ``records``: where the replay stopped, it stands ungraded."""
    return next((f for f in records if f.verdict != AGREE), None)


def _positions(index: DumpIndex) -> dict[str, int]:
    return {key: i for i, key in enumerate(index.keys)}


def _grade(
    index: DumpIndex, at: dict[str, int], stem: str, api: str, options: CheckOptions, left: float
) -> ApiResult | None:
    """run_ut's result of one call of ``index`` graded as recorded (its outputs against the float64 golden of its
    own inputs, an honest kernel the yardstick), or None when its records cannot be read; ``left``: the seconds
    left of the replay's budget."""
    from precheck.dump.decode import decode_case
    from precheck.dump.mindspore import MINDSPORE, translate

    try:
        with index.file() as f:
            forward = index.read(at[f"{stem}.forward"], f) if f"{stem}.forward" in at else None
            backward = index.read(at[f"{stem}.backward"], f) if f"{stem}.backward" in at else None
    except (OSError, ValueError, RecordError):  # the file gone or refused; a record broken inside
        return None
    if forward is None:
        return None
    case = decode_case(stem, api, 0, forward, backward)
    if index.framework == MINDSPORE:
        case = translate(case)
    return _replayed(case, index.data_dir, options, left)


def _replayed(case: Case, data_dir: Path, options: CheckOptions, left: float) -> ApiResult:
    """The case run as a small dump's run_ut runs it, through the backends' one seam: on a helper thread of this
    process, waited for at most its time limit and never past the ``left`` seconds of the replay's budget, unless
    it may crash its process (then in a worker process, whose death is its row); sized against ``--max-memory``
    (default: half the machine's, one case at a time) first."""
    from precheck.scheduling.backends import backend_for
    from precheck.scheduling.costs import case_timeout, default_max_memory

    if options.max_memory is None:
        options = replace(options, max_memory=default_max_memory(1))
    options = replace(options, timeout=min(case_timeout(case, options), math.ceil(left)))  # whole seconds, said
    backend = backend_for("inprocess", [case], data_dir, options, workers=1)
    (result,) = backend.run([case], lambda _: None)  # run to its end: the helper closed, torch's threads restored
    return result


def _direction(result: Any, direction: str) -> tuple[str, str] | None:
    if result is None:
        return None
    from precheck.results import Direction

    status = result.forward if direction == "forward" else result.backward
    if status is None:
        return None
    rows = result.rows(Direction.FORWARD if direction == "forward" else Direction.BACKWARD)
    errors = [f"{r.short_name}: {_why(r.comparison)}" for r in rows if r.status == status]
    return str(status.value), "; ".join(errors) or result.message


def _why(c: Comparison) -> str:
    """An honest-kernel verdict's clause and the worst element's place (not the rule it overruled, nor a target's
    label), else the row's whole message: from the comparison's fields, never by finding a phrase."""
    return c.clause + c.place if c.reason in BEYOND_ROUNDING else c.message
