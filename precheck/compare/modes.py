"""The three kinds of compare, as types: a tensor, a statistics and an md5 compare differ in msprobe's columns, in
how a row's cells are read from the two items, in the rules that judge it and in how far apart two items are.
Each difference is said once here, and a compare picks its mode once, from what both dumps hold, as run_ut picks
its Target (precheck.execution.targets); the rest of the compare reads the same for all three.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from precheck.compare.entries import DumpIndex, Item
from precheck.compare.metrics import TensorMetrics, stats_deviation, stats_differences
from precheck.compare.rules import judge, judge_md5, judge_statistics, judge_tensors
from precheck.compare.table import make_row
from precheck.core.older_python import zip_strict
from precheck.schema import CompareConst as C


class CompareMode:
    """One kind of compare. Its class attributes say what the rest of the compare must know of it."""

    name: ClassVar[str]
    columns: ClassVar[list[str]]  # msprobe's columns between the basic info and the result
    reads_tensors: ClassVar[bool] = False  # its rows compare the tensors' files, not only the dump.json's values

    def __str__(self) -> str:
        return self.name

    def header(self, stack: bool) -> list[str]:
        """The compare CSV's columns: msprobe's header of this mode, with NPU_Stack_Info when a stack.json was
        found."""
        return C.BASIC_INFO + self.columns + C.EXTRACT_INDEX + ([C.STACK] if stack else [])

    def row(self, npu: Item | None, bench: Item | None, metrics: TensorMetrics | None) -> dict[str, Any]:
        """The cells of one compare row before its Result (:meth:`judge` sets it)."""
        row = make_row(npu, bench, metrics)
        self.fill(row, npu, bench, metrics)
        return row

    def fill(self, row: dict[str, Any], npu: Item | None, bench: Item | None, metrics: TensorMetrics | None) -> None:
        raise NotImplementedError

    def judge(self, rows: list[dict], api: str) -> None:
        """Set ``Result`` and ``Err_message`` on the rows of one record of ``api``."""
        judge(rows, api, self.rules)

    def rules(self, inputs: list[dict], outputs: list[dict]) -> None:
        """msprobe's rules of this mode on a record's input and output rows."""
        raise NotImplementedError

    def deviation(self, item: Item, other: Item, metrics: TensorMetrics | None) -> float:
        """How far apart two paired items are, for the divergence search (0: the same, inf: nothing in common)."""
        if not item.tensor or not other.tensor:
            return 0.0 if str(item.stats[0]) == str(other.stats[0]) else math.inf
        if item.shape != other.shape and (metrics is None or metrics.deviation is None):
            return math.inf
        return self.tensors_apart(item, other, metrics)

    def tensors_apart(self, item: Item, other: Item, metrics: TensorMetrics | None) -> float:
        """Two tensors that can be compared: their measured deviation, else their statistics'."""
        if metrics is not None and metrics.deviation is not None:
            return metrics.deviation
        dev = stats_deviation(item.stats, other.stats)
        return 0.0 if dev is None else dev


class TensorMode(CompareMode):
    """Both dumps hold the tensors: msprobe's COMPARE_RESULT_HEADER and its Data_name, from the tensors' files."""

    name = "tensor"
    columns = list(C.BUILTIN_COMPARE_COLUMNS) + C.SUMMARY_INFO
    reads_tensors = True

    def header(self, stack: bool) -> list[str]:
        return super().header(stack) + [C.DATA_NAME]

    def fill(self, row: dict[str, Any], npu: Item | None, bench: Item | None, metrics: TensorMetrics | None) -> None:
        row.update(dict.fromkeys(C.BUILTIN_COMPARE_COLUMNS, C.UNSUPPORTED) | (metrics.values if metrics else {}))
        row[C.DATA_NAME] = str([npu.data_name if npu else C.N_A, bench.data_name if bench else C.N_A])

    def rules(self, inputs: list[dict], outputs: list[dict]) -> None:
        judge_tensors(inputs, outputs)


class StatisticsMode(CompareMode):
    """The dumps hold statistics (or one holds tensors): SUMMARY_COMPARE_RESULT_HEADER, from max/min/mean/norm."""

    name = "statistics"
    columns = C.SUMMARY_COMPARE_INDEX + C.SUMMARY_INFO

    def fill(self, row: dict[str, Any], npu: Item | None, bench: Item | None, metrics: TensorMetrics | None) -> None:
        if npu is not None and bench is not None:
            diffs, rels = stats_differences(npu.stats, bench.stats)
        else:
            diffs, rels = [C.N_A] * 4, [C.N_A] * 4
        row.update(zip_strict(C.SUMMARY_COMPARE_INDEX, diffs + rels))

    def rules(self, inputs: list[dict], outputs: list[dict]) -> None:
        judge_statistics(inputs, outputs)


class Md5Mode(CompareMode):
    """Both dumps hold CRC-32s: MD5_COMPARE_RESULT_HEADER; two tensors agree or not, nothing in between."""

    name = "md5"
    columns = C.MD5_COLUMNS

    def fill(self, row: dict[str, Any], npu: Item | None, bench: Item | None, metrics: TensorMetrics | None) -> None:
        row[C.NPU_MD5] = npu.md5 if npu and npu.md5 is not None else C.N_A
        row[C.BENCH_MD5] = bench.md5 if bench and bench.md5 is not None else C.N_A

    def rules(self, inputs: list[dict], outputs: list[dict]) -> None:
        judge_md5(inputs, outputs)

    def tensors_apart(self, item: Item, other: Item, metrics: TensorMetrics | None) -> float:
        return 0.0 if item.md5 == other.md5 else math.inf


MODES: dict[str, CompareMode] = {mode.name: mode for mode in (TensorMode(), StatisticsMode(), Md5Mode())}


def compare_mode(target: DumpIndex, bench: DumpIndex) -> CompareMode:
    """tensor when both dumps hold tensors, md5 when both hold CRC-32s, statistics otherwise."""
    return MODES[target.summary_mode if target.summary_mode == bench.summary_mode else "statistics"]
