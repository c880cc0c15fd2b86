"""The end of a checked run's console, one code for ``run_ut`` and each step of ``record --check``: why APIs are
SKIP (the commonest reasons and their fixes), the worst APIs (up to ten errors, each with its worst metric) and
where the report is."""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from precheck.escape import escape
from precheck.frames.run import worst_errors
from precheck.report.skips import describe_skips, skip_reasons


def closing(runs: Mapping[str, tuple[Path, Path]], page: str | None) -> list[str]:
    """The lines after a run's counts. ``runs``: the (result, details) CSVs of each run the counts cover, by name
    (one run: ""; a step's ranks: by folder, their SKIP reasons counted together and each worst API named by its
    rank); ``page``: their report, or the command that writes it (None: no line, for a run whose files a killed
    process left, which no report describes)."""
    reasons: Counter = Counter()
    total, worst = 0, []
    for name, (result, details) in runs.items():
        found, n = skip_reasons(result)
        reasons, total = reasons + found, total + n
        worst += [f"    {name}{line}" if name else line for line in worst_errors(details)]
    lines = describe_skips(reasons, total) + ["  worst APIs:"] * bool(worst) + worst
    lines += [f"  report:  {page}"] * (page is not None)
    return [escape(line) for line in lines]


def warning_line(message: Warning | str, *args: object, **kwargs: object) -> None:
    """A warning as one line on stderr (``warnings.showwarning``'s signature): no file, no line number, and the
    names from a dump in it escaped (a folder named with a newline or a terminal escape)."""
    print(f"precheck: warning: {escape(str(message))}", file=sys.stderr)


def say(text: str, stream: TextIO) -> None:
    """precheck's own lines where its exit code is another program's (``record -- CMD``): a console that cannot
    be written (stdout on /dev/full or a full disk, a reader that left) costs the lines, never that exit code.
    The stream's descriptor then goes to /dev/null, so what its buffer still holds is not a failure at exit."""
    try:
        print(text, file=stream, flush=True)
    except OSError:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())
        except (OSError, ValueError):  # no descriptor of its own (a captured stream): nothing is left to fail
            pass
        finally:
            os.close(null)
