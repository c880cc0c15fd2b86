"""msprobe's compare CSV: the cells every row has and the rows written as they are made. Its columns are
precheck.schema.CompareConst's (held against msprobe's source by tests/test_compare.py; each mode's are chosen in
precheck.compare.modes).

Every cell that comes from a dump (names, dtypes, shapes, values, stacks) is escaped to one printable line and
never starts a spreadsheet formula.
"""

from __future__ import annotations

import csv
from typing import Any, TextIO

from precheck.compare.entries import Item
from precheck.compare.metrics import TensorMetrics
from precheck.core.older_python import zip_strict
from precheck.escape import escape, formula_safe
from precheck.schema import CompareConst as C


def _basic(row: dict, info: tuple[str, ...], stats: tuple[str, ...], item: Item | None) -> None:
    """One side's cells: its name, dtype, shape and requires_grad (``info``) and its statistics (``stats``)."""
    if item is None:
        row.update(dict.fromkeys((*info, *stats), C.N_A))
        return
    values = (item.name, item.dtype, item.shape, item.requires_grad)
    row.update((column, C.N_A if value is None else value) for column, value in zip_strict(info, values))
    row.update(zip_strict(stats, item.stats))


def make_row(npu: Item | None, bench: Item | None, metrics: TensorMetrics | None) -> dict[str, Any]:
    """The cells every compare mode's row has (precheck.compare.modes fills its own)."""
    row: dict[str, Any] = {}
    _basic(row, C.NPU_INFO, C.NPU_STATS, npu)
    _basic(row, C.BENCH_INFO, C.BENCH_STATS, bench)
    row[C.REQ_GRAD_CONSIST] = row[C.NPU_REQ_GRAD] == row[C.BENCH_REQ_GRAD]
    row["_notes"] = list(metrics.notes) if metrics else []
    return row


def cell(value: Any) -> str:
    """A CSV cell as msprobe's pandas writes it (None as "None", floats by repr), made safe."""
    return formula_safe(escape(str(value)))


class CompareCsv:
    """The compare CSV, one row at a time: a run of any size writes in flat memory."""

    def __init__(self, f: TextIO, columns: list[str]) -> None:
        self.columns = columns
        self.writer = csv.writer(f, lineterminator="\n")
        self.writer.writerow(columns)
        self.rows = 0

    def write(self, row: dict[str, Any]) -> None:
        self.writer.writerow([cell(row.get(c, C.N_A)) for c in self.columns])
        self.rows += 1
