"""What ``--baseline`` and ``--current`` name, and a step's ranks paired across the two runs.

Either side is one run (its result CSV, or its output folder: the newest run there) or a step's run: the output
folder ``run_ut`` writes for a step folder, ``out/rank0/``, ``out/rank1/`` ... or ``out/proc6724/`` for a
one-process step. A nightly job gates the whole step with one command, so the ranks are paired here and each pair
is judged by precheck.regress.verdict:

- rank folders pair by their rank (``rank1`` with ``rank1``);
- a one-process step's ``proc<pid>`` folder pairs with the other run's one ``proc<pid>`` folder, whatever the PIDs:
  the folder is named after the process, so a baseline's path would change with every recording. Its rank is
  called ``proc``. Several ``proc`` folders in one step pair by name;
- one run against a step of exactly one process pairs the two (a baseline committed as its CSV alone against
  tonight's ``out/``); against a step of several ranks it is refused, naming them;
- a rank on one side only is said: its APIs are all MISSING (only in the baseline: the gate fails) or all NEW.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from precheck.dump.steps import StepError, rank_folders
from precheck.regress.verdict import (
    RankRuns,
    RegressError,
    RegressReport,
    judge,
    read_result_csv,
    run_settings,
    settings_differ,
)
from precheck.schema import DETAILS, DETAILS_PREFIX, RESULT, RESULT_PREFIX

SIDES = ("baseline", "current")
ONE_PROCESS = "proc"  # the rank of a one-process step's run, whatever its PID
_RUN_FILES = "accuracy_checking_*.csv"  # what makes a rank folder part of a step's run


@dataclass(frozen=True)
class Side:
    """One side of the gate: the path given, and its result CSV by rank ("" for one run's)."""

    path: str
    runs: dict[str, Path]

    @property
    def step(self) -> bool:
        return "" not in self.runs


def read_side(path: str | os.PathLike) -> Side:
    """What ``path`` names: a result CSV, a run's output folder (its newest run) or a step run's folder of ranks;
    RegressError when none of these."""
    p = Path(path)
    if not p.is_dir():
        return Side(os.fspath(path), {"": p})
    try:
        ranks = [] if _holds_a_run(p) else rank_folders(p, _RUN_FILES)
    except StepError as e:
        raise RegressError(str(e)) from None
    if not ranks:
        return Side(os.fspath(path), {"": newest_result(p)})
    procs = [r for r in ranks if r.rank is None and r.name.startswith(ONE_PROCESS)]
    names = {r.name: ONE_PROCESS if len(procs) == 1 and r in procs else r.name for r in ranks}
    return Side(os.fspath(path), {names[r.name]: newest_result(r.folder) for r in ranks})


def _holds_a_run(folder: Path) -> bool:
    return any(f.is_file() for f in folder.glob(_RUN_FILES))


def newest_result(folder: Path) -> Path:
    """The result CSV of the newest run in ``folder``, by the timestamp both of a run's CSVs carry. Regress reads
    only the result CSV (and its run record): a baseline committed as those two files is a whole baseline, and a
    folder is refused for lacking what regress would read, never for a details CSV it would not."""
    results = {_stem(f.name, RESULT_PREFIX): f for f in folder.glob(RESULT.format("*")) if f.is_file()}
    stems = set(results) | {_stem(f.name, DETAILS_PREFIX) for f in folder.glob(DETAILS.format("*")) if f.is_file()}
    if not stems:
        raise RegressError(f"{folder}: no {RESULT.format('*')} in this folder")
    newest = max(stems)
    if newest not in results:  # a run stopped before its result CSV was written: its newest run has no verdict
        raise RegressError(f"{folder}: its newest run ({newest}) has no {RESULT.format('*')}")
    return results[newest]


def _stem(name: str, prefix: str) -> str:
    return name[len(prefix) : -len(".csv")]


def paired(baseline: Side, current: Side) -> list[RankRuns]:
    """The ranks of the two sides, baseline order then the current's own; one run against a one-process step is
    that process's rank on both sides."""
    old, new = baseline.runs, current.runs
    if baseline.step != current.step:
        one, step = (old, new) if current.step else (new, old)
        if len(step) != 1:
            single, many = (baseline, current) if current.step else (current, baseline)
            raise RegressError(
                f"{single.path} is one run and {many.path} a step's run of {len(step)} ranks "
                f"({', '.join(step)}): give the step's run folder on both sides, or one rank's folder"
            )
        one = {next(iter(step)): one[""]}
        old, new = (one, new) if current.step else (old, one)
    names = list(old) + [name for name in new if name not in old]
    return [RankRuns(n, _shown(old.get(n)), _shown(new.get(n))) for n in names]


def _shown(path: Path | None) -> str | None:
    return None if path is None else os.fspath(path)


def regress(baseline: str | os.PathLike, current: str | os.PathLike) -> RegressReport:
    """Compare two result CSVs, run folders (their newest run's) or step runs (rank by rank) API by API;
    RegressError when either cannot be used. APIs are listed rank by rank, each rank's in baseline order, then
    the current file's new ones in its order, so the report reads like the dump and is identical from run to run.
    """
    old, new = read_side(baseline), read_side(current)
    ranks = paired(old, new)
    apis, settings, unrecorded = [], [], set()
    for runs in ranks:
        before = {} if runs.baseline is None else read_result_csv(runs.baseline)
        after = {} if runs.current is None else read_result_csv(runs.current)
        apis += judge(before, after, runs.rank)
        if runs.baseline is not None and runs.current is not None:
            records = run_settings(Path(runs.baseline)), run_settings(Path(runs.current))
            settings += [d for d in settings_differ(*records) if d not in settings]
            unrecorded |= {side for side, record in zip(SIDES, records) if record is None}
    step = old.step or new.step
    paths = (old.path, new.path) if step else (ranks[0].baseline, ranks[0].current)
    unchecked = tuple(side for side in SIDES if side in unrecorded)  # said once for the step, not per rank
    return RegressReport(*paths, apis, tuple(settings), tuple(ranks) if step else (), unchecked)
