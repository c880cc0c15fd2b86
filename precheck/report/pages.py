"""``precheck report PATH``'s one entry: the page for whatever run PATH holds, a compare's
(precheck/report/compare_html.py), a step's ranks' (precheck/report/ranks_html.py) or run_ut's
(precheck/report/html.py). The choice sits above the pages, so the compare page can embed the run page of its
pre-checked suspects without the two importing each other.
"""

from __future__ import annotations

import os
from pathlib import Path

from precheck.report.compare_frame import is_compare
from precheck.report.compare_html import write_compare_report
from precheck.report.html import write_report
from precheck.report.ranks_html import rank_runs, write_ranks_report


def write_page(path: str | os.PathLike, into: str | os.PathLike | None = None) -> Path:
    """Write the report of the run at ``path`` (an output folder or one of its CSVs) into ``into`` (default: beside
    the CSVs); returns its path. A compare's file, or a folder holding a compare, gets the compare report; the
    output folder of a step's ranks (``out/`` holding ``rank0/``, ``rank1/`` ...) one page over every rank."""
    if is_compare(path):
        return write_compare_report(path, into)
    runs = rank_runs(path)
    if runs:
        return write_ranks_report(runs, path, into)
    return write_report(path, into)
