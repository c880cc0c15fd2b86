"""``precheck report PATH``'s one entry: the page for whatever run PATH holds, a compare's
(precheck/report/compare_html.py), a step's ranks' (precheck/report/ranks_html.py) or run_ut's
(precheck/report/html.py). The choice sits above the pages, so the compare page can embed the run page of its
pre-checked suspects without the two importing each other.
"""

from __future__ import annotations

import os
from pathlib import Path

from precheck.frames.compare import is_compare
from precheck.frames.run import LoadError
from precheck.report.compare_html import write_compare_report
from precheck.report.html import write_report
from precheck.report.ranks_html import rank_runs, write_ranks_report
from precheck.schema import COMPARE_RECORDS, COMPARE_RESULT, COMPARE_SUMMARY, DETAILS, RESULT

READS = (
    f"precheck report reads a run's output folder, its {DETAILS.format('<ts>')} or {RESULT.format('<ts>')}, or a "
    f"compare's {COMPARE_RESULT.format('_<...>')}, {COMPARE_RECORDS.format('_<...>')} or "
    f"{COMPARE_SUMMARY.format('_<...>')}"
)


def write_page(path: str | os.PathLike, into: str | os.PathLike | None = None) -> Path:
    """Write the report of the run at ``path`` (an output folder or one of its CSVs) into ``into`` (default: beside
    the CSVs); returns its path. A compare's file, or a folder holding a compare, gets the compare report; the
    output folder of a step's ranks (``out/`` holding ``rank0/``, ``rank1/`` ...) one page over every rank."""
    if is_compare(path):
        return write_compare_report(path, into)
    runs = rank_runs(path)
    if runs:
        return write_ranks_report(runs, path, into)
    try:
        return write_report(path, into)
    except LoadError as e:  # train.py: a parser's complaint about its line 19 would not say what to give instead
        named = Path(path).name.startswith((DETAILS.split("{")[0], RESULT.split("{")[0]))
        if not Path(path).is_file() or named:
            raise
        raise LoadError(f"{path}: not a run's CSV nor a compare's file; {READS}") from e
