"""compare_records_{ts}.csv: one row per record in execution order with its divergence verdict (agree, suspect,
amplified, inherited, unmatched, unreadable, undefined: neither run defined its tensors), its deviations and, after
``--precheck``, the suspect's run_ut verdict beside it. Written as records are read, so it costs no memory.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from precheck.compare.divergence import Finding
from precheck.compare.table import cell
from precheck.schema import RECORDS_HEADER as COLUMNS


def _number(x: float) -> str:
    return f"{x:.6g}" if math.isfinite(x) else str(x)


class RecordLog:
    def __init__(self, f: TextIO) -> None:
        self.writer = csv.writer(f, lineterminator="\n")
        self.writer.writerow(COLUMNS)

    def finding(self, f: Finding) -> None:
        deviations = [_number(f.input_deviation), _number(f.output_deviation)]
        row = [f.name, f.direction, f.verdict, f.inputs_agree, *deviations, f.worst_input or "", f.worst_output or "",
               f.producer or "", ""]  # fmt: skip
        self.writer.writerow([cell(v) for v in row])

    def alone(self, key: str, direction: str, verdict: str, why: str) -> None:
        """A record of one side only, or one that could not be read."""
        self.writer.writerow([cell(v) for v in (key, direction, verdict, "", "", "", "", "", why, "")])


def verdict_text(v: dict[str, str]) -> str:
    """A suspect's run_ut verdict as the records CSV, the console and the report say it."""
    backward = f", backward {v['backward']}" if v.get("backward") else ""
    return f"forward {v['forward']}{backward}"


def add_verdicts(path: Path, verdicts: dict[str, dict[str, str]]) -> None:
    """Fill the Precheck column of the records ``verdicts`` names (after run_ut checked them)."""

    def fill(row: list[str]) -> None:
        v = verdicts.get(row[0])
        if v:
            row[-1] = cell(verdict_text(v))

    _rewrite(path, fill)


def mark_verdict(path: Path, record: str, verdict: str, producer: str | None = None) -> None:
    """The record's verdict as precheck.compare.localize settled it: the record the honest-kernel rule named is a
    suspect, not agreeing; a record its replay cleared agrees. In a step of ranks (precheck.compare.steps) a record
    whose divergence came from a peer rank is inherited, ``producer`` naming the rank and the record."""

    def mark(row: list[str]) -> None:
        if row[0] == cell(record):
            row[2] = verdict
            if producer is not None:
                row[8] = cell(producer)

    _rewrite(path, mark)


def _rewrite(path: Path, change: Callable[[list[str]], None]) -> None:
    """The records CSV with ``change`` applied to each record's row, replaced whole."""
    tmp = path.with_suffix(".tmp")
    with open(path, newline="", encoding="utf-8") as src, open(tmp, "w", newline="", encoding="utf-8") as dst:
        reader, writer = csv.reader(src), csv.writer(dst, lineterminator="\n")
        writer.writerow(next(reader, COLUMNS))
        for row in reader:
            if len(row) == len(COLUMNS):
                change(row)
            writer.writerow(row)
    os.replace(tmp, path)
