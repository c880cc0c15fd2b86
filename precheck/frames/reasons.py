"""A run's reasons file: beside its msprobe CSVs, one JSON line per details row saying what decided the row (its
reason code, core/reasons.py), the standard that judged it, its honest multiple, its inf/nan mismatches and
whether its inputs were generated from statistics.

The CSVs stay byte for byte what msprobe writes; programs that need a verdict's why (the report's advice,
api_precision_compare's second stage, the console's worst APIs) read this file, never the Message prose. Lines
are appended as rows are written (a resumed run keeps the lines of its finished APIs and appends to them), and put
in the CSVs' order when the run ends, so a run of the same dump writes the same file; the last line of a row wins,
and a line torn by a kill is skipped. A run from before this file has none: readers get None and say so (no
legacy parsing of messages).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from precheck.core.older_python import zip_strict
from precheck.core.reasons import Reason
from precheck.results import ApiResult
from precheck.schema import REASONS, run_stem

__all__ = ["RowReason", "lines", "parse", "path_for", "read"]

MAX_LINE = 1 << 16  # bytes; a longer line is no line of this file's


@dataclass(frozen=True)
class RowReason:
    """What a program may know of one details row without reading its Message."""

    reason: Reason | None
    standard: str = ""
    ratio: float | None = None  # normwise error as a multiple of an honest kernel's, where the Message states it
    nonfinite: int = 0  # positions holding inf/nan the golden does not hold
    generated: bool = False  # the API's inputs were generated from the dump's statistics
    clause: str = ""  # the words of what decided a tensor's verdict, apart from its Message (Comparison.clause)
    recorded: bool = False  # graded on the dump's recorded value (Comparison.recorded), not on a replay


def path_for(details: Path) -> Path:
    """The reasons file of the run whose details CSV is ``details`` (``accuracy_checking_details_<stem>.csv``)."""
    return details.with_name(REASONS.format(run_stem(details.name)))


def lines(result: ApiResult, names: list[str]) -> str:
    """The lines of one API's details rows; ``names`` are the rows' names as their CSV cells write them."""
    out = []
    for name, d in zip_strict(names, result.details):
        c = d.comparison
        nonfinite = c.metrics.nonfinite_mismatches if c.metrics is not None else 0
        record = {"row": name, "reason": c.reason, "standard": c.standard, "ratio": c.ratio, "nonfinite": nonfinite}
        graded = {"generated": result.generated_inputs, "clause": c.clause, "recorded": c.recorded}
        out.append(json.dumps({**record, **graded}) + "\n")
    return "".join(out)


def read(details: Path) -> dict[str, RowReason] | None:
    """Each row's reason by its name as the details CSV writes it; None where the run wrote no reasons file (a
    run from before it, or msprobe's)."""
    path = path_for(details)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    found: dict[str, RowReason] = {}
    with f:
        for raw in f:
            row = parse(raw)
            if row is not None:
                found[row[0]] = row[1]
    return found


def parse(raw: bytes) -> tuple[str, RowReason] | None:
    """One line, or None for a line torn by a kill or not this file's (the row's verdict then has no reason)."""
    if len(raw) > MAX_LINE or not raw.endswith(b"\n"):
        return None
    try:
        item = json.loads(raw)
        code = item["reason"]
        ratio = item["ratio"]
        return item["row"], RowReason(
            Reason(code) if code is not None else None,
            str(item["standard"]),
            float(ratio) if ratio is not None else None,
            int(item["nonfinite"]),
            bool(item["generated"]),
            str(item.get("clause", "")),  # absent from the first version of this file
            bool(item.get("recorded", False)),  # absent before recorded outputs were graded beside a replay
        )
    except (ValueError, KeyError, TypeError):  # JSON, a code this version does not know, a missing field
        return None
