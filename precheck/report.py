"""msprobe-compatible CSVs: written row by row as results stream in, reordered into dump order at the end.

Files are UTF-8 with a BOM and CRLF records, blank cells are a single space, floats have 14 fixed decimals and
``Shape`` is a Python tuple string, as msprobe writes them, so msprobe's own second-stage tool and our users'
scripts read them unchanged.
"""

from __future__ import annotations

import csv
import io
import os
import re
import time
from array import array
from pathlib import Path
from typing import BinaryIO

from precheck.check import ApiResult, DetailRow
from precheck.escape import escape, formula_safe, unescape

RESULT_HEADER = ["API name", "Forward Test Success", "Backward Test Success", "Message"]
DETAILS_HEADER = [
    "API Name",
    "Bench Dtype",
    "DEVICE Dtype",
    "Shape",
    "余弦相似度",
    "最大绝对误差",
    "双百指标",
    "双千指标",
    "双万指标",
    "二进制一致错误率",
    "误差均衡性",
    "均方根误差",
    "小值域错误占比",
    "相对误差最大值",
    "相对误差平均值",
    "inf/nan错误率",
    "相对误差错误率",
    "绝对误差错误率",
    "ULP误差最大值",
    "ULP误差平均值",
    "ULP误差大于阈值占比",
    "Status",
    "Message",
]
BLANK = " "


MAX_CELL = 32767  # a spreadsheet cell's limit, and well below the csv module's default field limit (131072)


def text(value: str) -> str:
    """A text cell (name, message, dtype) as written: one printable line, never the start of a spreadsheet formula,
    never longer than a cell can be, always encodable as UTF-8, and reversible (precheck.escape): control
    characters and lone surrogates become backslash escapes, text that a spreadsheet would run as a formula
    gets a single quote in front (OWASP), so ``=cmd`` and ``'=cmd`` stay two cells. Ordinary names, messages and
    numbers written as text (``-0.5``, ``-inf``) are written as they are, as msprobe writes them.
    """
    value = escape(value)
    if len(value) > MAX_CELL:
        value = f"{value[: MAX_CELL - 40]}... ({len(value) - MAX_CELL + 40} more characters)"
    return formula_safe(value)


def cell(value: object) -> str:
    """msprobe's cell text: floats with 14 fixed decimals, blanks as one space, text through :func:`text`."""
    if value is None or value == "":
        return BLANK
    if isinstance(value, float):
        return f"{value:.14f}"
    if isinstance(value, str):
        return text(value)
    return str(value)


def result_row(r: ApiResult) -> list[str]:
    return [text(r.name), r.forward, r.backward, cell(r.message)]


def detail_row(d: DetailRow) -> list[str]:
    c = d.comparison
    metrics = c.metrics.columns() if c.metrics is not None else [None] * 17
    shape = BLANK if c.shape is None else str(tuple(c.shape))
    return [
        text(d.name),
        cell(c.golden_dtype),
        cell(c.target_dtype),
        shape,
        *map(cell, metrics),
        c.status,
        cell(c.message),
    ]


def _line(row: list[str]) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerow(row)
    return buf.getvalue()


class ResumeError(Exception):
    """The CSV named by -csv_path cannot be continued (one line, exit code 2)."""


_RESULT_NAME = re.compile(r"^accuracy_checking_result_(\d{14})\.csv$")


class CsvReport:
    """The pair of CSV files of one run. Every finished API is on disk (flushed) before the next starts: its
    details rows first, then its result row, so a result row always has all its details.

    Resuming (``resume`` = a result CSV of an interrupted run) repairs a torn last line, drops details rows of
    APIs without a result row, and continues both files; the journal beside them counts how often each API was
    started, so an API that killed the run twice is recorded as such instead of being retried forever.
    Memory does not grow with the rows: per API only its dump order and where its lines lie are kept, and the
    files are put in dump order at the end by copying those byte ranges.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        timestamp: str | None = None,
        *,
        resume: str | os.PathLike | None = None,
        orders: dict[str, int] | None = None,
    ) -> None:
        self._orders = array("q")
        self._spans = {"result": array("q"), "details": array("q")}  # (start, end) byte offsets per API
        self.completed: set[str] = set()
        self.started: dict[str, int] = {}
        if resume is not None:
            path = Path(resume)
            m = _RESULT_NAME.match(path.name)
            if m is None or not path.is_file():
                raise ResumeError(f"{path}: not an accuracy_checking_result_<YYYYmmddHHMMSS>.csv file")
            self.out_dir, ts = path.parent, m.group(1)
        else:
            self.out_dir = Path(out_dir)
            self.out_dir.mkdir(parents=True, exist_ok=True)
            ts = timestamp or time.strftime("%Y%m%d%H%M%S")
        self.result_path = self.out_dir / f"accuracy_checking_result_{ts}.csv"
        self.details_path = self.out_dir / f"accuracy_checking_details_{ts}.csv"
        self.journal_path = self.out_dir / f"accuracy_checking_result_{ts}.journal"
        kept = self._interrupted(orders or {}) if resume is not None else []
        self._files = {
            "result": _restart(self.result_path, RESULT_HEADER),
            "details": _restart(self.details_path, DETAILS_HEADER),
        }
        for order, result, details in kept:
            self._write(order, result, details)
        if resume is None:
            self.journal_path.write_text("", encoding="utf-8")
        self._journal = open(self.journal_path, "a", encoding="utf-8")

    def _interrupted(self, orders: dict[str, int]) -> list[tuple[int, str, str]]:
        """The complete rows of the run being resumed, and how often each unfinished API was started."""
        if not self.details_path.is_file():
            raise ResumeError(f"{self.details_path}: missing, cannot resume {self.result_path.name}")
        header, results = _read_complete_rows(self.result_path)
        if header != RESULT_HEADER:
            raise ResumeError(f"{self.result_path}: not a precheck result CSV (header {header})")
        _, details = _read_complete_rows(self.details_path)
        by_api: dict[str, list[str]] = {}
        for row in details:
            api = row[0].rsplit(".", 3)[0] if row else ""
            by_api.setdefault(api, []).append(_line(row))
        kept = []
        for row in results:
            name = row[0]
            self.completed.add(name)
            kept.append((orders.get(name, len(orders)), _line(row), "".join(by_api.get(name, []))))
        if self.journal_path.is_file():
            for line in self.journal_path.read_text(encoding="utf-8").splitlines():
                kind, _, name = line.partition("\t")
                name = unescape(name)
                if kind == "start" and name not in self.completed:
                    self.started[name] = self.started.get(name, 0) + 1
        return kept

    def start(self, name: str) -> None:
        """Journal that ``name`` starts, before it runs: a kill during it is then known on resume."""
        self._journal.write(f"start\t{escape(name)}\n")  # one line, whatever the name holds
        self._journal.flush()

    def add(self, r: ApiResult) -> None:
        self._write(r.order, _line(result_row(r)), "".join(_line(detail_row(d)) for d in r.details))

    def _write(self, order: int, result: str, details: str) -> None:
        # Details first: a result row on disk always has its details. A flush puts the rows in the OS's hands:
        # they survive the process being killed at any moment.
        for kind, text_ in (("details", details), ("result", result)):
            f = self._files[kind]
            start = f.tell()
            f.write(text_.encode("utf-8"))
            f.flush()
            self._spans[kind].extend((start, f.tell()))
        self._orders.append(order)

    def close(self, complete: bool = True) -> None:
        """Put both files in dump order (results arrive in completion order) and close them; a complete run
        needs its journal no more."""
        for f in (*self._files.values(), self._journal):
            f.close()
        ranked = sorted(range(len(self._orders)), key=self._orders.__getitem__)
        for kind, path, header in (
            ("result", self.result_path, RESULT_HEADER),
            ("details", self.details_path, DETAILS_HEADER),
        ):
            spans = self._spans[kind]
            tmp = path.with_suffix(".csv.tmp")
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                dst.write(_BOM + _line(header).encode("utf-8"))
                for i in ranked:
                    src.seek(spans[2 * i])
                    dst.write(src.read(spans[2 * i + 1] - spans[2 * i]))
            os.replace(tmp, path)
        if complete:
            self.journal_path.unlink(missing_ok=True)

    def __enter__(self) -> CsvReport:
        return self

    def __exit__(self, kind: type | None, *exc: object) -> None:
        self.close(complete=kind is None)


_BOM = "\ufeff".encode("utf-8")


def _restart(path: Path, header: list[str]) -> BinaryIO:
    """A CSV holding only its header, open for appending rows."""
    _write_lines(path, header, [])
    return open(path, "ab")


def _read_complete_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    """Rows of a CSV cut at its last complete line (a run killed mid-write leaves half a line)."""
    text = path.read_bytes().decode("utf-8-sig", errors="replace")
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    rows = list(csv.reader(io.StringIO(text, newline="")))
    return (rows[0] if rows else []), [r for r in rows[1:] if r]


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    """A whole CSV in msprobe's dialect; every cell is text here (numbers already rendered), so each goes through
    :func:`text` (a rendered number is left as it is)."""
    _write_lines(path, header, [_line([text(str(v)) for v in row]) for row in rows])


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
        return header, [dict(zip(header, row, strict=False)) for row in reader if row]
