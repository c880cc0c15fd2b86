"""The regression gate's verdict on two result CSVs of the same dump (``precheck regress``; a step's ranks are
paired in precheck.regress.runs, each pair judged here).

A team keeps the result CSV of a run it accepted (the *baseline*) and compares every new run (the *current*) with
it, so that CI goes red when an API's precision gets worse, not merely when some API is imperfect (a bf16 model
has dozens of warnings that nobody will ever fix). Both files may come from precheck (``run_ut``,
``api_precision_compare``) or from msprobe: UTF-8 with or without a BOM, CRLF or LF, ``API name`` (stage 1) or
``API Name`` (stage 2), status spellings in any case, rows of 3 fields (msprobe omits Message unless SKIP) or 4.
Rows are matched by API name, whatever their order.

Ordering of statuses (one direction, Forward or Backward):

    error  is worse than  warning  is worse than  pass          (graded statuses)
    SKIP and a blank cell (" ": the API has no backward)         (not graded)

An ``error`` counts as failing; a ``warning`` counts as passing (with a warning): bf16 outputs are mostly
warnings against a float64 golden, so a warning that stays a warning is not news.

Outcome of one direction, baseline -> current:

    graded -> graded, rank worse (pass->warning, pass->error, warning->error)   FAIL
    graded -> graded, rank better (error->warning, error->pass, warning->pass)  IMPROVED
    graded -> graded, same rank: error->error                                    STILL_FAILING
                                 pass->pass, warning->warning                    PASS
    graded -> not graded (pass/warning/error -> SKIP or blank)                   FAIL  (a check was lost: an
                                                                                        error that became a SKIP
                                                                                        must not pass the gate)
    not graded -> pass or warning                                                IMPROVED  (coverage gained)
    not graded -> error                                                          FAIL  (an error the baseline
                                                                                        did not have)
    not graded -> not graded (SKIP/blank in any combination)                     PASS  (nothing to compare)

Outcome of one API: decided by presence first (in the baseline only: MISSING; in the current only: NEW), else the
most significant of its two directions' outcomes, by this precedence:

    FAIL > IMPROVED > STILL_FAILING > PASS

A worsening anywhere wins; an improvement outranks an unchanged error because it means the baseline is stale
(``--strict`` then asks for it to be refreshed) while the tables still show the remaining error.

Settings: a run's record beside its result CSV (``accuracy_checking_result_<ts>.run.json``) says what graded it.
Where both files have one and they differ in what decides a verdict (target, device, standard, its thresholds, the
benchmark device, torch's version), the outcomes compare two different checks, not two states of one model: the
report names each difference (:attr:`RegressReport.settings`) and the gate fails unless ``settings_may_differ``.

Exit code (:meth:`RegressReport.exit_code`): 1 when any API is FAIL or MISSING, or the settings differ (unless
``settings_may_differ``), or, with ``strict``, IMPROVED; 0 otherwise. NEW APIs never change it (they have no
baseline to regress from). Unusable input raises :class:`RegressError` (the CLI's exit 2).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from precheck.core.status import ERROR, SKIP
from precheck.errors import PrecheckError
from precheck.escape import escape, markdown, markdown_code, unescape, unformula
from precheck.run_files.csv_files import read_csv_rows
from precheck.run_files.run_state import RunFileError, read_sidecar
from precheck.schema import SEVERITY, SIDECAR, read_status

PASS_OUTCOME, FAIL, IMPROVED, STILL_FAILING, MISSING, NEW = (
    "PASS",
    "FAIL",
    "IMPROVED",
    "STILL_FAILING",
    "MISSING",
    "NEW",
)
# Report order: the outcomes that need a person first.
OUTCOMES = (FAIL, MISSING, IMPROVED, STILL_FAILING, NEW, PASS_OUTCOME)
# Precedence when an API's Forward and Backward outcomes differ (MISSING and NEW are decided before statuses).
_PRECEDENCE = {FAIL: 3, IMPROVED: 2, STILL_FAILING: 1, PASS_OUTCOME: 0}
_RANK = {s: rank for s, rank in SEVERITY.items() if s != SKIP}  # graded statuses only; SKIP and blank are not
_API_COLUMN = "api name"  # "API name" (stage 1) or "API Name" (stage 2), any case
_FORWARD_COLUMN = "forward test success"
_BACKWARD_COLUMN = "backward test success"
_MESSAGE_COLUMN = "message"
REASON_CHARS = 200  # of a reason on the terminal and in the reports: the Message has every clause
SHOWN_WORSE = 50  # APIs that got worse named on the terminal; the reports name them all
REPORT_MD = "regress_report.md"
REPORT_JSON = "regress_report.json"
# What in a run's record decides its verdicts (a dump's path, a seed or a saved-data folder does not).
SETTINGS = ("target", "device", "standard", "cosine", "max_abs", "bench_device")

Status = Optional[str]  # pass / warning / error / SKIP, None for a blank cell


class RegressError(PrecheckError):
    """A result CSV cannot be used at all (missing, unreadable, not a result CSV): one line, exit code 2."""


class ReportUnwritable(RegressError, OSError):
    """The report cannot be written where asked; still an OSError, as it was before it got its one line."""


@dataclass(frozen=True)
class Statuses:
    """One API's statuses in one file, in precheck's spelling; None is a blank cell (no backward). ``message`` is
    the row's Message, why it is what it is (blank in msprobe's rows but a SKIP's): it explains an outcome and is
    no part of it, so two rows of the same statuses are equal whatever their messages."""

    forward: Status
    backward: Status
    message: str = field(default="", compare=False)

    def to_dict(self) -> dict[str, Status]:
        return {"forward": self.forward, "backward": self.backward}


@dataclass(frozen=True)
class ApiOutcome:
    """One API's verdict; ``baseline`` / ``current`` is None where the API is absent from that file. ``rank`` is
    the rank of a step's run it belongs to (``rank1``; ``proc`` for a one-process step, whose folder is named after
    a PID that changes every recording), "" for one run's CSVs: one API name is a row in every rank."""

    api: str
    outcome: str
    baseline: Statuses | None
    current: Statuses | None
    rank: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "api": self.api,
            "outcome": self.outcome,
            "baseline": None if self.baseline is None else self.baseline.to_dict(),
            "current": None if self.current is None else self.current.to_dict(),
            "rank": self.rank or None,
            "reason": self.reason,
        }

    @property
    def worsened(self) -> list[str]:
        """The directions (forward, backward) whose outcome is FAIL, the worse status now first (a check lost
        to a SKIP before an error, an error before a warning)."""
        if self.baseline is None or self.current is None:
            return []
        pairs = (("forward", self.baseline.forward, self.current.forward),
                 ("backward", self.baseline.backward, self.current.backward))  # fmt: skip
        failed = [(name, new) for name, old, new in pairs if direction_outcome(old, new) == FAIL]
        return [name for name, new in sorted(failed, key=lambda f: -_RANK.get(f[1], len(_RANK)))]

    @property
    def reason(self) -> str:
        """Why the API is what it is now, in one clause of its current row's Message: the first that names a
        direction that got worse (``backward.output.1: worse than an honest fp32 kernel ...``), else the first; a
        MISSING API's is that it is absent."""
        if self.current is None:
            return "absent from the current run"
        clauses = [c.strip() for c in self.current.message.split("; ") if c.strip()]
        named = [c for d in self.worsened for c in clauses if c.startswith(f"{d}.")]
        clause = (named or clauses or [""])[0]
        return clause if len(clause) <= REASON_CHARS else clause[: REASON_CHARS - 3] + "..."

    def change(self) -> str:
        """``forward pass -> pass, backward pass -> error``: each direction's status before and after."""
        sides = [_md_side(self.baseline), _md_side(self.current)]
        return ", ".join(f"{d} {sides[0][i]} -> {sides[1][i]}" for i, d in enumerate(("forward", "backward")))


@dataclass(frozen=True)
class RankRuns:
    """One rank of a step's two runs: its result CSV on each side, None on the side that lacks the rank (its APIs
    are then all MISSING, or all NEW)."""

    rank: str
    baseline: str | None
    current: str | None

    def to_dict(self) -> dict[str, object]:
        return {"rank": self.rank, "baseline": self.baseline, "current": self.current}


@dataclass(frozen=True)
class RegressReport:
    """Every API of both files (baseline order, then the current file's new APIs in its order) and its outcome."""

    baseline_path: str
    current_path: str
    apis: list[ApiOutcome]
    settings: tuple[str, ...] = ()  # "target: device in the baseline, recorded in the current run", each that differ
    ranks: tuple[RankRuns, ...] = ()  # a step's runs, rank by rank; empty for two CSVs
    unrecorded: tuple[str, ...] = ()  # "baseline", "current": a side whose CSV has no run record (settings unchecked)

    def unchecked(self) -> str | None:
        """The line saying the settings were not compared, and why, or None when they were: a baseline committed
        as its CSV alone (or msprobe's) would otherwise pass a torch upgrade or another target without a word."""
        if not self.unrecorded:
            return None
        who = "neither run has a" if len(self.unrecorded) == 2 else f"the {self.unrecorded[0]} has no"
        return (
            f"{who} run record ({SIDECAR.format('<ts>')} beside its result CSV): the settings the two runs were "
            "graded with (torch version, target, device, standard, thresholds) were not compared"
        )

    @property
    def counts(self) -> dict[str, int]:
        """APIs per outcome, every outcome present (0 included) so scripts never meet a missing key."""
        found = Counter(a.outcome for a in self.apis)
        return {outcome: found.get(outcome, 0) for outcome in OUTCOMES}

    def exit_code(self, strict: bool = False, settings_may_differ: bool = False) -> int:
        """1 when something got worse or went missing, or the two runs were made with different settings (unless
        ``settings_may_differ``), or (strict) improved: the baseline is stale; else 0."""
        counts = self.counts
        if counts[FAIL] or counts[MISSING] or (strict and counts[IMPROVED]):
            return 1
        return int(bool(self.settings) and not settings_may_differ)

    def summary(self) -> str:
        """One line of counts per outcome, for the terminal."""
        counts = self.counts
        return f"{len(self.apis)} APIs; " + ", ".join(f"{o} {counts[o]}" for o in OUTCOMES)

    def worse_lines(self, limit: int = SHOWN_WORSE) -> list[str]:
        """A line per API that fails the gate, for the CI log: a count alone sends everyone to the report. A FAIL
        names its rank, its statuses before and after and why; a MISSING API that it is absent, unless its whole
        rank is (the rank's own line says so). At most ``limit``, then how many more."""
        gone = {r.rank for r in self.ranks if r.current is None}
        worse = [a for a in self.apis if a.outcome == FAIL or (a.outcome == MISSING and a.rank not in gone)]
        lines = []
        for a in worse[:limit]:
            where = f"{a.rank} " if a.rank else ""
            what = a.change() + (f": {a.reason}" if a.reason else "") if a.outcome == FAIL else a.reason
            lines.append(escape(f"  {a.outcome} {where}{a.api}: {what}"))
        if len(worse) > limit:
            lines.append(f"  ... and {len(worse) - limit} more (the reports name every one)")
        return lines

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys, no timestamps): same inputs, byte-identical file, so it can be diffed
        and committed."""
        doc = {
            "baseline": self.baseline_path,
            "current": self.current_path,
            "counts": self.counts,
            "settings_differ": list(self.settings),
            "settings_unchecked": list(self.unrecorded),
            "ranks": [r.to_dict() for r in self.ranks],
            "apis": [a.to_dict() for a in self.apis],
        }
        return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    def rank_outcome(self, runs: RankRuns) -> str:
        """A rank's outcome: MISSING or NEW when one side lacks it, else the first outcome of its APIs in report
        order (FAIL first), PASS when it has none."""
        if runs.current is None:
            return MISSING
        if runs.baseline is None:
            return NEW
        found = {a.outcome for a in self.apis if a.rank == runs.rank}
        return next((o for o in OUTCOMES if o in found), PASS_OUTCOME)

    def to_markdown(self) -> str:
        """A title, the counts, a step's ranks, then one table per non-PASS outcome that occurred (for a CI job
        summary or a PR comment: PASS rows are the bulk and tell nobody anything)."""
        counts = self.counts
        lines = [
            "# precheck regress",
            "",
            f"- baseline: {markdown_code(self.baseline_path)}",
            f"- current: {markdown_code(self.current_path)}",
            "",
            "| outcome | APIs |",
            "|---|---|",
        ]
        lines += [f"| {o} | {counts[o]} |" for o in OUTCOMES]
        lines.append(f"| total | {len(self.apis)} |")
        if self.settings:
            lines += ["", "## The two runs were made with different settings", ""]
            lines += [f"- {markdown(difference)}" for difference in self.settings]
        if self.unchecked():
            lines += ["", "## The settings were not compared", "", f"- {markdown(self.unchecked() or '')}"]
        if self.ranks:
            lines += ["", "## Ranks", "", "| rank | outcome | baseline | current |", "|---|---|---|---|"]
            for r in self.ranks:
                paths = [markdown(p) if p is not None else "absent" for p in (r.baseline, r.current)]
                lines.append(f"| {markdown(r.rank)} | {self.rank_outcome(r)} | {' | '.join(paths)} |")
        rank = ["rank"] if self.ranks else []
        for outcome in OUTCOMES:
            rows = [a for a in self.apis if a.outcome == outcome]
            if outcome == PASS_OUTCOME or not rows:
                continue
            header = [*rank, "API", "baseline forward", "baseline backward", "current forward", "current backward"]
            header.append("reason")
            lines += ["", f"## {outcome} ({len(rows)})", "", _md_row(header), "|---" * len(header) + "|"]
            for a in rows:
                named = [markdown(a.rank)] if rank else []
                sides = [*_md_side(a.baseline), *_md_side(a.current)]
                lines.append(_md_row([*named, markdown(a.api), *sides, markdown(a.reason)]))
        return "\n".join(lines) + "\n"


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _md_side(side: Statuses | None) -> list[str]:
    if side is None:
        return ["absent", "absent"]
    return ["-" if s is None else s for s in (side.forward, side.backward)]


# ================================================================================================= reading


def _status(text: str, api: str, column: str, path: Path) -> Status:
    t = text.strip()
    if not t:
        return None
    status = read_status(t)
    if status is None:
        raise RegressError(
            f"{path}: not a result CSV: {column} of {api} is {t!r} (expected pass, warning, error, SKIP or blank)"
        )
    return status


def read_result_csv(path: str | os.PathLike) -> dict[str, Statuses]:
    """API name -> statuses of one result CSV, in file order; RegressError when the file cannot be used.

    Strict on what would make matching ambiguous (a duplicate or blank API name, an unknown status), lenient on
    what msprobe and precheck legitimately differ in (BOM, line ends, header case, a missing Message field)."""
    p = Path(path)
    if not p.exists():
        raise RegressError(f"{p}: no such file")
    if not p.is_file():
        raise RegressError(f"{p}: not a file")
    try:
        header, rows = read_csv_rows(p)
    except UnicodeDecodeError:
        raise RegressError(f"{p}: not a result CSV (not UTF-8 text)") from None
    except OSError as e:
        raise RegressError(f"{p}: cannot read: {e.strerror or e}") from None
    except Exception as e:  # csv.Error: NUL bytes, runaway fields
        raise RegressError(f"{p}: not a result CSV ({e})") from None
    columns = {h.strip().lower(): h for h in header}
    wanted = (_API_COLUMN, _FORWARD_COLUMN, _BACKWARD_COLUMN)
    absent = [w for w in wanted if w not in columns]
    if absent:
        names = {
            _API_COLUMN: "API name",
            _FORWARD_COLUMN: "Forward Test Success",
            _BACKWARD_COLUMN: "Backward Test Success",
        }
        raise RegressError(
            f"{p}: not a result CSV (no {', '.join(repr(names[a]) for a in absent)} "
            f"column{'s' if len(absent) > 1 else ''})"
        )
    api_col, fwd_col, bwd_col = (columns[w] for w in wanted)
    out: dict[str, Statuses] = {}
    for number, row in enumerate(rows, start=1):
        api = unescape(unformula(row.get(api_col, "").strip()))  # as precheck's report.text wrote it
        if not api:
            raise RegressError(f"{p}: not a result CSV: data row {number} has no API name")
        if bwd_col not in row:
            raise RegressError(f"{p}: not a result CSV: the row of {api} has {len(row)} field(s), expected 3 or 4")
        if api in out:
            raise RegressError(f"{p}: API {api} appears twice: rows cannot be matched by name")
        out[api] = Statuses(
            _status(row[fwd_col], api, "Forward Test Success", p),
            _status(row[bwd_col], api, "Backward Test Success", p),
            unescape(unformula((row.get(columns.get(_MESSAGE_COLUMN, "")) or "").strip())),
        )
    return out


# ================================================================================================= judging


def direction_outcome(baseline: Status, current: Status) -> str:
    """Outcome of one direction (see the module docstring for the table and why)."""
    old, new = _RANK.get(baseline), _RANK.get(current)  # None: SKIP or blank, not graded
    if old is None and new is None:
        return PASS_OUTCOME
    if old is None:
        return FAIL if current == ERROR else IMPROVED
    if new is None or new > old:
        return FAIL
    if new < old:
        return IMPROVED
    return STILL_FAILING if current == ERROR else PASS_OUTCOME


def api_outcome(baseline: Statuses | None, current: Statuses | None) -> str:
    """MISSING / NEW by presence, else the most significant of the Forward and Backward outcomes."""
    if current is None:
        return MISSING
    if baseline is None:
        return NEW
    return max(
        (direction_outcome(baseline.forward, current.forward), direction_outcome(baseline.backward, current.backward)),
        key=_PRECEDENCE.__getitem__,
    )


def judge(old: dict[str, Statuses], new: dict[str, Statuses], rank: str = "") -> list[ApiOutcome]:
    """Every API of two files' rows and its outcome: baseline order, then the current file's new APIs in its
    order, so the report reads like the dump and is identical from run to run."""
    apis = [ApiOutcome(api, api_outcome(s, new.get(api)), s, new.get(api), rank) for api, s in old.items()]
    return apis + [ApiOutcome(api, NEW, None, s, rank) for api, s in new.items() if api not in old]


def run_settings(result: Path) -> dict[str, object] | None:
    """What graded the run of ``result``, from its record beside it; None for a CSV without one (msprobe's, a
    stage-2 CSV, one copied alone), whose settings nothing says."""
    try:
        record = read_sidecar(result.with_name(result.name.removesuffix(".csv") + ".run.json"))
    except (FileNotFoundError, RunFileError):
        return None
    versions = record.get("versions")
    torch = versions.get("torch") if isinstance(versions, dict) else None
    return {**{key: record.get(key) for key in SETTINGS}, "torch": torch}


def settings_differ(baseline: dict[str, object] | None, current: dict[str, object] | None) -> tuple[str, ...]:
    """Each setting the two runs' records give different values, in one phrase; none where either has no record."""
    if baseline is None or current is None:
        return ()
    return tuple(
        f"{key}: {baseline[key]} in the baseline, {current[key]} in the current run"
        for key in (*SETTINGS, "torch")
        if baseline[key] != current[key]
    )
