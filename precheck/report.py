"""msprobe-compatible CSVs: written row by row as results stream in, reordered into dump order at the end.

Files are UTF-8 with a BOM and CRLF records, blank cells are a single space, floats have 14 fixed decimals and
``Shape`` is a Python tuple string, as msprobe writes them, so msprobe's own second-stage tool and our users' scripts read them unchanged.
"""
from __future__ import annotations

import csv
import io
import os
import time
from pathlib import Path

from precheck.check import ApiResult, DetailRow

RESULT_HEADER = ["API name", "Forward Test Success", "Backward Test Success", "Message"]
DETAILS_HEADER = [
    "API Name", "Bench Dtype", "DEVICE Dtype", "Shape", "余弦相似度", "最大绝对误差", "双百指标", "双千指标", "双万指标",
    "二进制一致错误率", "误差均衡性", "均方根误差", "小值域错误占比", "相对误差最大值", "相对误差平均值", "inf/nan错误率",
    "相对误差错误率", "绝对误差错误率", "ULP误差最大值", "ULP误差平均值", "ULP误差大于阈值占比", "Status", "Message",
]
BLANK = " "


def cell(value: object) -> str:
    """msprobe's cell text: floats with 14 fixed decimals, blanks as one space."""
    if value is None or value == "":
        return BLANK
    if isinstance(value, float):
        return f"{value:.14f}"
    return str(value)


def result_row(r: ApiResult) -> list[str]:
    return [r.name, r.forward, r.backward, cell(r.message)]


def detail_row(d: DetailRow) -> list[str]:
    c = d.comparison
    metrics = c.metrics.columns() if c.metrics is not None else [None] * 17
    shape = BLANK if c.shape is None else str(tuple(c.shape))
    return [d.name, cell(c.golden_dtype), cell(c.target_dtype), shape, *map(cell, metrics), c.status,
            cell(c.message)]


def _line(row: list[str]) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerow(row)
    return buf.getvalue()


class CsvReport:
    """The pair of CSV files of one run. Every finished API is on disk (flushed) before the next is written."""

    def __init__(self, out_dir: str | os.PathLike, timestamp: str | None = None) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        ts = timestamp or time.strftime("%Y%m%d%H%M%S")
        self.result_path = self.out_dir / f"accuracy_checking_result_{ts}.csv"
        self.details_path = self.out_dir / f"accuracy_checking_details_{ts}.csv"
        self._result = open(self.result_path, "w", encoding="utf-8-sig", newline="")
        self._details = open(self.details_path, "w", encoding="utf-8-sig", newline="")
        self._result.write(_line(RESULT_HEADER))
        self._details.write(_line(DETAILS_HEADER))
        self._flush()
        self._written: list[tuple[int, str, str]] = []   # (order, result line, details lines)

    def add(self, r: ApiResult) -> None:
        result = _line(result_row(r))
        details = "".join(_line(detail_row(d)) for d in r.details)
        self._result.write(result)
        self._details.write(details)
        self._flush()
        self._written.append((r.order, result, details))

    def _flush(self) -> None:
        # A flush puts the row in the OS's hands: it survives the process being killed at any moment.
        self._result.flush()
        self._details.flush()

    def close(self) -> None:
        """Rewrite both files in dump order (results arrive in completion order) and close them."""
        self._result.close()
        self._details.close()
        rows = sorted(self._written, key=lambda w: w[0])
        _write_lines(self.result_path, RESULT_HEADER, [w[1] for w in rows])
        _write_lines(self.details_path, DETAILS_HEADER, [w[2] for w in rows])

    def __enter__(self) -> "CsvReport":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    """A whole CSV in msprobe's dialect."""
    _write_lines(path, header, [_line(row) for row in rows])


def _write_lines(path: Path, header: list[str], lines: list[str]) -> None:
    """Header and rendered lines, through a temporary file so no reader ever sees half a file."""
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", encoding="utf-8-sig", newline="") as f:
        f.write(_line(header))
        f.writelines(lines)
    os.replace(tmp, path)


def read_csv_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """Header and rows of a CSV written by precheck or msprobe (BOM or not, CRLF or LF)."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        return header, [dict(zip(header, row)) for row in reader if row]
