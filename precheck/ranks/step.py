"""A step folder of ranks (``dump/step0/rank0``, ``rank1`` ... or ``proc*``) run as one run.

Each rank's dump is run_ut's own run into a folder of its name under ``-o`` (``out/rank0/``), so each CSV pair keeps
msprobe's names and every reader of one run reads it; the summary and the console block count all ranks at once.
A collective (``Distributed.all_reduce.0``) is no call one rank can replay: it is graded here from every rank's
records (precheck.ranks.collectives), and each rank's run writes its row as it is. A user with eight ranks
runs precheck once, not eight times, and joins nothing by hand.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from precheck.core.status import SKIP
from precheck.dump.records import Dump, DumpError, load_dump
from precheck.dump.selection import ApiLists
from precheck.dump.steps import DUMP_JSON, Found, RankDump
from precheck.errors import OptionError
from precheck.escape import escape
from precheck.execution.options import CheckOptions
from precheck.paths import output_folder
from precheck.ranks.collectives import Rank, grade_collectives, is_collective
from precheck.ranks.p2p import grade_point_to_point, is_point_to_point
from precheck.ranks.whole_calls import WHOLE, grade_sharded
from precheck.results import ApiResult
from precheck.run_ut import RunSummary, run_ut
from precheck.scheduling.costs import default_max_memory

if TYPE_CHECKING:
    import pandas

__all__ = ["RanksSummary", "run_step"]


@dataclass
class RanksSummary(RunSummary):
    """The run of a step's ranks: the counts of all of them (``result_path`` and ``details_path`` are the
    output folder holding a folder per rank), and each rank's own run in ``ranks``."""

    ranks: dict[str, RunSummary] = field(default_factory=dict)
    step: Path = Path()
    collectives: int = 0  # collective calls graded across the ranks (rows of every rank; not a SKIP)
    whole: int = 0  # DTensor calls put together as a whole (``<call>.whole`` rows of each mesh's first rank) ...
    whole_skipped: int = 0  # ... of which SKIP (a missing rank, an unreadable shard): not graded
    whole_statistics: int = 0  # DTensor calls of a statistics dump: no whole row (said once)
    left_out: dict[str, str] = field(default_factory=dict)  # rank folders whose dump could not be read, and why

    def _files(self) -> str:
        lines = [
            f"  ranks:   {len(self.ranks)} dumps of {self.step} ({', '.join(self.ranks)}); "
            f"{self.collectives} collective rows graded from every rank's inputs"
        ]
        if self.whole:
            graded = self.whole - self.whole_skipped
            lines.append(
                f"  sharded: {self.whole} DTensor calls as a whole (<call>{WHOLE} rows of each mesh's first rank): "
                f"{graded} graded, {self.whole_skipped} SKIP"
            )
        if self.whole_statistics:
            lines.append(
                f"  sharded: {self.whole_statistics} DTensor calls of a statistics dump, none put together as a "
                f"whole (no <call>{WHOLE} rows): its shards hold no values, and shards generated from their "
                f"statistics make a call no device ran (each rank's own row is as in any statistics dump)"
            )
        for name, why in self.left_out.items():
            lines.append(f"  {name}: left out, not graded: {why}")
        for name, run in self.ranks.items():
            lines += [f"  {name}: result:  {run.result_path}", f"  {' ' * len(name)}  details: {run.details_path}"]
        return "\n".join(escape(line) for line in lines)  # names from the dump: one printable line each

    def frame(self) -> pandas.DataFrame:
        """Every rank's rows as data, with a ``rank`` column (the rank's folder name) first."""
        import pandas as pd

        frames = [run.frame().assign(rank=name) for name, run in self.ranks.items()]
        frame = pd.concat(frames, ignore_index=True)
        return frame[["rank", *(c for c in frame if c != "rank")]]


def run_step(found: Found, out_path: str | os.PathLike = ".", **kwargs: Any) -> RanksSummary:
    """Run every dump of the step ``found`` (precheck.dump.steps.find_dumps) as one run: run_ut's keyword
    arguments apply to each rank's run, and each rank's rows go to ``out_path/<rank folder>/``."""
    if not found.ranks:
        raise DumpError(f"{found.path}: not a step folder of rank or proc dumps")
    if kwargs.get("csv_path") is not None:
        raise OptionError(f"{found.path}: -csv_path continues one rank's run: run_ut that rank's dump.json with it")
    start = time.perf_counter()
    options = kwargs.get("options") or CheckOptions()
    dumps, left_out = _readable(found, kwargs.get("framework"))  # each read once
    readable = replace(found, ranks=[d for d in found.ranks if d.name in dumps])
    graded, statistics_calls = _collectives(readable, dumps, options, kwargs.get("api_lists"), left_out)
    runs = {}
    for dump in readable.ranks or ():
        folder = output_folder(Path(out_path) / dump.name)
        runs[dump.name] = run_ut(
            dump.folder / DUMP_JSON, folder, graded=graded.get(dump.name), loaded=dumps[dump.name], **kwargs
        )
    summary = _summary(found, Path(out_path), runs, time.perf_counter() - start, graded)
    summary.left_out, summary.whole_statistics = left_out, statistics_calls
    return summary


def _readable(found: Found, framework: str | None) -> tuple[dict[str, Dump], dict[str, str]]:
    """Each rank's dump that can be read, and why each other one cannot. One rank killed mid-step leaves an empty
    or torn dump.json: the others are still graded (its collectives' rows say it is missing) and the run says which
    rank was left out and why; only a step with no readable dump at all is refused."""
    dumps: dict[str, Dump] = {}
    left_out: dict[str, str] = {}
    first: DumpError | None = None
    for d in found.ranks or ():
        path = d.folder / DUMP_JSON
        try:
            dumps[d.name] = load_dump(path, framework)
        except DumpError as e:
            first = first or e
            left_out[d.name] = _why_unreadable(path, e)
    if not dumps and first is not None:
        raise first
    return dumps, left_out


def _why_unreadable(path: Path, e: DumpError) -> str:
    try:
        empty = path.stat().st_size == 0
    except OSError:
        empty = False
    if empty:
        return (
            f"{path} is empty (0 bytes): its process likely ended before the dump was written "
            "(killed or crashed mid-step, or still running)"
        )
    return str(e)


def _collectives(
    found: Found, dumps: dict[str, Dump], options: CheckOptions, api_lists: ApiLists | None, left_out: dict[str, str]
) -> tuple[dict[str, dict[str, ApiResult]], int]:
    """Each rank's rows of its collectives, sends and receives, and of its DTensor calls graded across the ranks
    (precheck.ranks.whole_calls; none of a call ``api_lists`` leave out), by the rank's folder name. A ``proc*``
    folder's rank is not recorded (a launcher that called an API in its own process while it started the ranks): its
    collectives go through run_ut, which skips them, and the ranks beside it are graded as if it were not there.
    Also how many DTensor calls of a statistics dump have no whole row (precheck.ranks.whole_calls)."""
    numbered: list[tuple[int, RankDump]] = [(d.rank, d) for d in found.ranks if d.rank is not None]
    if not numbered:
        return {}, 0
    ranks = {}
    for number, dump in numbered:
        names = dumps[dump.name].cases.names
        if any(is_collective(n) or is_point_to_point(n) for n in names):
            ranks[number] = Rank(number, dumps[dump.name].index, {n: i for i, n in enumerate(names)})
        else:
            ranks[number] = Rank(number, None, {})  # no collective: no record of it is read
    world = max(ranks) + 1
    if options.max_memory is None:  # a collective's golden is sized as one in-process case is (half the machine's)
        options = replace(options, max_memory=default_max_memory(1))
    missing = str(found.path) + "".join(f"; {name} left out: {why}" for name, why in left_out.items())
    graded = grade_collectives(ranks, world, missing, options)
    sent = grade_point_to_point(ranks, missing, options)
    whole = grade_sharded({number: dumps[dump.name] for number, dump in numbered}, options, api_lists)
    rows = {dump.name: graded[number] | sent[number] | whole.rows[number] for number, dump in numbered}
    return rows, whole.statistics_calls


def _summary(
    found: Found, out: Path, runs: dict[str, RunSummary], seconds: float, graded: dict[str, dict[str, ApiResult]]
) -> RanksSummary:
    total: dict[str, Any] = {"statuses": Counter(), "previous": Counter(), "resumed": 0, "filtered": 0,
                             "timed_out": 0, "module_records": 0}  # fmt: skip
    for run in runs.values():
        for key in total:
            total[key] += getattr(run, key)
    first = next(iter(runs.values()))
    results = sorted((r for run in runs.values() for r in run.results), key=lambda r: r.order)
    fields = {**vars(replace(first)), **total, "result_path": out, "details_path": out, "wall_seconds": seconds}
    fields["results"] = results
    rows = [(name, r) for each in graded.values() for name, r in each.items()]
    collectives = sum(r.forward != SKIP for name, r in rows if is_collective(name) or is_point_to_point(name))
    whole = [r for name, r in rows if name.endswith(WHOLE)]
    skipped = sum(r.forward == SKIP for r in whole)
    return RanksSummary(
        **fields, ranks=runs, step=found.path, collectives=collectives, whole=len(whole), whole_skipped=skipped
    )
