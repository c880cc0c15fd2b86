"""msprobe's compare CSV: its columns (CompareConst in mindstudio-probe 26.2's core/common/const.py, held against
that source by tests/test_compare.py; each mode's are chosen in precheck.compare.modes), the cells every row has,
and the rows written as they are made.

Every cell that comes from a dump (names, dtypes, shapes, values, stacks) is escaped to one printable line and
never starts a spreadsheet formula.
"""

from __future__ import annotations

import csv
from typing import Any, TextIO

from precheck.compare.entries import Item
from precheck.compare.metrics import N_A, TensorMetrics
from precheck.escape import escape, formula_safe

BASIC_INFO = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
              "NPU Requires_grad", "Bench Requires_grad"]  # fmt: skip
SUMMARY_COMPARE_INDEX = ["Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
                         "MeanRelativeErr", "NormRelativeErr"]  # fmt: skip
SUMMARY_INFO = ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean",
                "Bench l2norm"]  # fmt: skip
EXTRACT_INDEX = ["Requires_grad Consistent", "Result", "Err_message"]
STACK, DATA_NAME = "NPU_Stack_Info", "Data_name"


def _basic(row: dict, side: str, item: Item | None) -> None:
    if item is None:
        for column in ("Name", "Dtype", "Tensor Shape", "Requires_grad"):
            row[f"{side} {column}"] = N_A
        for stat in ("max", "min", "mean", "l2norm"):
            row[f"{side} {stat}"] = N_A
        return
    row[f"{side} Name"] = item.name
    row[f"{side} Dtype"] = N_A if item.dtype is None else item.dtype
    row[f"{side} Tensor Shape"] = N_A if item.shape is None else item.shape
    row[f"{side} Requires_grad"] = N_A if item.requires_grad is None else item.requires_grad
    for stat, value in zip(("max", "min", "mean", "l2norm"), item.stats, strict=True):
        row[f"{side} {stat}"] = value


def make_row(npu: Item | None, bench: Item | None, metrics: TensorMetrics | None) -> dict[str, Any]:
    """The cells every compare mode's row has (precheck.compare.modes fills its own)."""
    row: dict[str, Any] = {}
    _basic(row, "NPU", npu)
    _basic(row, "Bench", bench)
    row["Requires_grad Consistent"] = row["NPU Requires_grad"] == row["Bench Requires_grad"]
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
        self.writer.writerow([cell(row.get(c, N_A)) for c in self.columns])
        self.rows += 1
