"""msprobe's compare CSV: its headers per mode (CompareConst in mindstudio-probe 26.2's core/common/const.py, held
against that source by tests/test_compare_headers.py) and the cells of one row, written as rows are made.

Every cell that comes from a dump (names, dtypes, shapes, values, stacks) is escaped to one printable line and
never starts a spreadsheet formula.
"""

from __future__ import annotations

import csv
from typing import Any, TextIO

from precheck.compare.entries import Item
from precheck.compare.metrics import N_A, TENSOR_COLUMNS, UNSUPPORTED, TensorMetrics, stats_differences
from precheck.escape import escape, formula_safe

BASIC_INFO = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
              "NPU Requires_grad", "Bench Requires_grad"]  # fmt: skip
SUMMARY_COMPARE_INDEX = ["Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
                         "MeanRelativeErr", "NormRelativeErr"]  # fmt: skip
SUMMARY_INFO = ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean",
                "Bench l2norm"]  # fmt: skip
EXTRACT_INDEX = ["Requires_grad Consistent", "Result", "Err_message"]
STACK, DATA_NAME = "NPU_Stack_Info", "Data_name"


def header(mode: str, stack: bool) -> list[str]:
    """The compare CSV's columns: msprobe's COMPARE_RESULT_HEADER (+ Data_name), SUMMARY_COMPARE_RESULT_HEADER or
    MD5_COMPARE_RESULT_HEADER, with NPU_Stack_Info when a stack.json was found."""
    if mode == "tensor":
        middle = list(TENSOR_COLUMNS) + SUMMARY_INFO
    elif mode == "statistics":
        middle = SUMMARY_COMPARE_INDEX + SUMMARY_INFO
    else:
        middle = ["NPU MD5", "BENCH MD5"]
    columns = BASIC_INFO + middle + EXTRACT_INDEX + ([STACK] if stack else [])
    return columns + [DATA_NAME] if mode == "tensor" else columns


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


def make_row(mode: str, npu: Item | None, bench: Item | None, metrics: TensorMetrics | None) -> dict[str, Any]:
    """The cells of one compare row before its Result (precheck.compare.rules sets it)."""
    row: dict[str, Any] = {}
    _basic(row, "NPU", npu)
    _basic(row, "Bench", bench)
    row["Requires_grad Consistent"] = row["NPU Requires_grad"] == row["Bench Requires_grad"]
    row["_notes"] = list(metrics.notes) if metrics else []
    if mode == "tensor":
        row.update(dict.fromkeys(TENSOR_COLUMNS, UNSUPPORTED) | (metrics.values if metrics else {}))
        names = [npu.data_name if npu else N_A, bench.data_name if bench else N_A]
        row[DATA_NAME] = str(names)
    elif mode == "statistics":
        if npu is not None and bench is not None:
            diffs, rels = stats_differences(npu.stats, bench.stats)
        else:
            diffs, rels = [N_A] * 4, [N_A] * 4
        row.update(zip(SUMMARY_COMPARE_INDEX, diffs + rels, strict=True))
    else:
        row["NPU MD5"] = npu.md5 if npu and npu.md5 is not None else N_A
        row["BENCH MD5"] = bench.md5 if bench and bench.md5 is not None else N_A
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
