"""The end of a checked run's console, one code for ``run_ut`` and each step of ``record --check``: why APIs are
SKIP (the commonest reasons and their fixes), the worst APIs (up to ten errors, each with its worst metric) and
where the report is."""

from __future__ import annotations

from pathlib import Path

from precheck.escape import escape
from precheck.report.frame import worst_errors
from precheck.report.skips import describe_skips, skip_reasons


def closing(result: Path, details: Path, page: str | None) -> list[str]:
    """The lines after a run's counts; ``page``: its report, or the command that writes it (None: no line, for a
    run whose files a killed process left, which no report describes)."""
    worst = worst_errors(details)
    lines = describe_skips(*skip_reasons(result)) + ["  worst APIs:"] * bool(worst) + worst
    lines += [f"  report:  {page}"] * (page is not None)
    return [escape(line) for line in lines]
