"""msprobe-compatible CSVs: written row by row as results stream in, reordered into dump order at the end.

Files are UTF-8 with a BOM and CRLF records, blank cells are a single space, floats have 14 fixed decimals and
``Shape`` is a Python tuple string, as msprobe writes them, so msprobe's own second-stage tool and our users'
scripts read them unchanged.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
from array import array
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from precheck.dump.safe_files import open_regular
from precheck.escape import escape, formula_safe
from precheck.frames import reasons
from precheck.paths import claim_stamp
from precheck.results import ApiResult, DetailRow
from precheck.run_files import run_state
from precheck.run_files.run_state import RunFileError
from precheck.schema import (
    DETAILS,
    DETAILS_HEADER,
    JOURNAL,
    METRIC_HEADERS,
    RESULT,
    RESULT_HEADER,
    RESULT_NAME,
    SIDECAR,
    split_row_name,
)

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
    return [text(r.name), r.forward, BLANK if r.backward is None else r.backward, cell(r.message)]


def detail_row(d: DetailRow) -> list[str]:
    c = d.comparison
    metrics = c.metrics.columns() if c.metrics is not None else [None] * len(METRIC_HEADERS)
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


ResumeError = RunFileError  # the name callers catch: a run's files cannot be created or continued


def resumable(path: Path) -> str:
    """The stamp of the result CSV a run continues, once it is one (run_ut checks it before it loads torch)."""
    m = RESULT_NAME.match(path.name)
    if not path.is_file():
        raise ResumeError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    if m is None:
        raise ResumeError(f"{path}: not an {RESULT.format('<YYYYmmddHHMMSS>')} file")
    return m.group(1)


class CsvReport:
    """The pair of CSV files of one run. Every finished API is on disk (flushed) before the next starts: its
    details rows first, then its result row, so a result row always has all its details.

    A new run claims names no other run has (paths.claim_stamp) and locks its journal. Resuming (``resume`` = a
    result CSV of an interrupted run) checks the sidecar against ``identity`` (what this run is), then repairs
    both files into new ones (a torn last line cut, details rows of APIs without a result row dropped) that
    replace the old ones atomically, so a kill at any moment of a resume loses nothing. ``suspects`` are the APIs
    that were running when the interrupted run died (run_state.suspects). Memory does not grow with the rows: per
    API only its dump order and where its lines lie are kept, and the files are put in dump order at the end by
    copying those byte ranges.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        timestamp: str | None = None,
        *,
        resume: str | os.PathLike | None = None,
        orders: dict[str, int] | None = None,
        identity: dict[str, object] | None = None,
    ) -> None:
        self._orders = array("q")
        self._spans = {kind: array("q") for kind in ("result", "details", "reasons")}  # (start, end) per API
        self.completed: set[str] = set()
        self.previous: Counter = Counter()  # (forward, backward) -> APIs kept from the run being resumed
        self.suspects: set[str] = set()
        if resume is not None:
            path = Path(resume)
            self.out_dir, stem = path.parent, resumable(path)
        else:
            self.out_dir = Path(out_dir)
            self.out_dir.mkdir(parents=True, exist_ok=True)
            stem = claim_stamp(self.out_dir, RESULT, DETAILS, stamp=timestamp)
        self.result_path = self.out_dir / RESULT.format(stem)
        self.details_path = self.out_dir / DETAILS.format(stem)
        self.journal_path = self.out_dir / JOURNAL.format(stem)
        self.sidecar_path = self.out_dir / SIDECAR.format(stem)
        self.reasons_path = reasons.path_for(self.details_path)
        self._journal = run_state.lock(self.journal_path, self.result_path)
        try:
            if resume is not None:
                run_state.check_sidecar(self.sidecar_path, identity or {}, self.result_path)
                self._repair(orders or {})
                self.suspects = {n for n in run_state.suspects(self.journal_path) if text(n) not in self.completed}
            else:
                for path, header in ((self.result_path, RESULT_HEADER), (self.details_path, DETAILS_HEADER)):
                    path.write_bytes(_BOM + _line(header).encode("utf-8"))
                if identity is not None:  # last: a run without one has no row, and cannot be resumed
                    run_state.write_sidecar(self.sidecar_path, identity)
            self._files = {"result": open(self.result_path, "ab"), "details": open(self.details_path, "ab")}
            self._reasons = open(self.reasons_path, "ab")  # in completion order, ranked as the CSVs at the end
        except BaseException:
            self._journal.close()
            raise

    def _repair(self, orders: dict[str, int]) -> None:
        """Copy the complete rows of the interrupted run into new files and put them in place of the old ones,
        details first: a kill between the two renames leaves files that repair the same way again."""
        if not self.details_path.is_file():
            raise ResumeError(f"{self.details_path}: missing, cannot resume {self.result_path.name}")
        results = _complete_rows(self.result_path)
        if next(results, RESULT_HEADER) != RESULT_HEADER:  # empty: killed before its header, nothing to keep
            raise ResumeError(f"{self.result_path}: not a precheck result CSV (no result header)")
        result_tmp = self.result_path.with_name(self.result_path.name + ".resume")
        details_tmp = self.details_path.with_name(self.details_path.name + ".resume")
        kept: list[tuple[str, int, int]] = []  # (name, start, end) of each kept result line, in file order
        with open(result_tmp, "wb") as f:
            f.write(_BOM + _line(RESULT_HEADER).encode("utf-8"))
            for row in results:
                if len(row) < 3 or row[0] in self.completed:  # a row cut short is no result: its API runs again
                    continue
                self.completed.add(row[0])
                self.previous[row[1], row[2].strip() or None] += 1  # a blank Backward: none compared
                start = f.tell()
                f.write(_line(row).encode("utf-8"))
                kept.append((row[0], start, f.tell()))
            _sync(f)
        details = self._copy_details(details_tmp)
        why = self._copy_reasons(self.reasons_path.with_name(self.reasons_path.name + ".resume"))
        os.replace(details_tmp, self.details_path)
        os.replace(result_tmp, self.result_path)
        run_state.sync_dir(self.out_dir)
        for name, start, end in kept:
            self._spans["result"].extend((start, end))
            self._spans["details"].extend(details.get(name, (0, 0)))
            self._spans["reasons"].extend(why.get(name, (0, 0)))
            self._orders.append(orders.get(name, len(orders)))

    def _copy_details(self, tmp: Path) -> dict[str, tuple[int, int]]:
        """The details rows of the completed APIs into ``tmp``; where each API's rows lie there."""
        spans: dict[str, tuple[int, int]] = {}
        rows = _complete_rows(self.details_path)
        next(rows, None)
        with open(tmp, "wb") as f:
            f.write(_BOM + _line(DETAILS_HEADER).encode("utf-8"))
            last = None
            for row in rows:
                parts = split_row_name(row[0]) if row else None
                api = parts[0] if parts else ""
                if api not in self.completed:
                    continue
                if api != last and api in spans:
                    raise ResumeError(f"{self.details_path}: the details rows of {api} are not together")
                start = spans[api][0] if api in spans else f.tell()
                f.write(_line(row).encode("utf-8"))
                spans[api], last = (start, f.tell()), api
            _sync(f)
        return spans

    def _copy_reasons(self, tmp: Path) -> dict[str, tuple[int, int]]:
        """The reasons lines of the completed APIs put in place (a torn line or one of another API left out);
        where each API's lines lie. An API's lines are together: they are written at once, after its rows."""
        spans: dict[str, tuple[int, int]] = {}
        if not self.reasons_path.is_file():  # a run from before the reasons file
            return spans
        with open(self.reasons_path, "rb") as src, open(tmp, "wb") as f:
            for raw in src:
                parsed = reasons.parse(raw)
                parts = split_row_name(parsed[0]) if parsed else None
                if parts is None or parts[0] not in self.completed:
                    continue
                api = parts[0]
                start = spans[api][0] if api in spans and spans[api][1] == f.tell() else f.tell()
                f.write(raw)
                spans[api] = (start, f.tell())
            _sync(f)
        os.replace(tmp, self.reasons_path)
        return spans

    def start(self, name: str) -> None:
        """Journal that ``name`` starts, before it runs: a kill during it is then known on resume."""
        run_state.journal_start(self._journal, name)

    def add(self, r: ApiResult) -> None:
        rows = [detail_row(d) for d in r.details]
        self._write(r.order, _line(result_row(r)), "".join(map(_line, rows)))
        start = self._reasons.tell()
        self._reasons.write(reasons.lines(r, [row[0] for row in rows]).encode("utf-8"))
        self._reasons.flush()
        self._spans["reasons"].extend((start, self._reasons.tell()))

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

    def close(self, complete: bool = True, interrupted: bool = False) -> None:
        """Put both files and the reasons file in dump order (results arrive in completion order) and close them;
        a complete run needs its journal no more. ``interrupted``: stopped in an orderly way, no API is to blame."""
        for f in (*self._files.values(), self._reasons):
            f.close()
        ranked = sorted(range(len(self._orders)), key=self._orders.__getitem__)
        for kind, path, header in (
            ("reasons", self.reasons_path, None),
            ("details", self.details_path, DETAILS_HEADER),
            ("result", self.result_path, RESULT_HEADER),
        ):
            spans = self._spans[kind]
            tmp = path.with_name(path.name + ".tmp")
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                if header is not None:
                    dst.write(_BOM + _line(header).encode("utf-8"))
                for i in ranked:
                    src.seek(spans[2 * i])
                    dst.write(src.read(spans[2 * i + 1] - spans[2 * i]))
                _sync(dst)
            os.replace(tmp, path)
        run_state.sync_dir(self.out_dir)
        if complete:
            self.journal_path.unlink(missing_ok=True)  # while still locked: no resume can start on a half state
        elif interrupted:
            run_state.journal_interrupted(self._journal)
        self._journal.close()

    def __enter__(self) -> CsvReport:
        return self

    def __exit__(self, kind: type | None, *exc: object) -> None:
        try:
            self.close(complete=kind is None, interrupted=kind is not None and issubclass(kind, KeyboardInterrupt))
        except OSError:
            if kind is None:
                raise
            # The run failed already (a full disk fails the reordering too): its error is the one to report. The
            # rows stay in completion order, which a resume repairs; no temporary file is left behind.
            for f in (*self._files.values(), self._reasons):
                with contextlib.suppress(OSError):
                    f.close()  # a write that failed is still buffered: closing retries it, and fails again
            for path in (self.details_path, self.result_path, self.reasons_path):
                path.with_name(path.name + ".tmp").unlink(missing_ok=True)
            self._journal.close()


_BOM = "\ufeff".encode("utf-8")


def _sync(f: BinaryIO) -> None:
    f.flush()
    os.fsync(f.fileno())


def _complete_rows(path: Path) -> Iterator[list[str]]:
    """Rows of a CSV up to its last complete line (a run killed mid-write leaves half a line), read as a stream:
    the header first."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        while end > 0:  # find the end of the last complete line, reading backwards a block at a time
            f.seek(max(0, end - 65536))
            block = f.read(end - max(0, end - 65536))
            cut = block.rfind(b"\n")
            if cut >= 0:
                end = end - len(block) + cut + 1
                break
            end -= len(block)
        f.seek(0)
        lines = (line.decode("utf-8", "replace") for line in _lines_until(f, end))
        first = True
        try:
            for row in csv.reader(lines):
                if first:
                    row[:1] = [row[0].removeprefix("\ufeff")] if row else []
                    first = False
                yield row
        except csv.Error:
            return  # a quoted cell torn by the kill: the rows before it are all there is


def _lines_until(f: BinaryIO, end: int) -> Iterator[bytes]:
    while f.tell() < end:
        line = f.readline(end - f.tell())
        if not line:
            return
        yield line


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
    """Header and rows of a CSV written by precheck or msprobe (BOM or not, CRLF or LF). A path that is no regular
    file (a FIFO, which would wait for a writer forever; /dev/zero, which never ends) is Refused (a ValueError) by
    its type, before anything is read."""
    with io.TextIOWrapper(open_regular(Path(path)), encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        return header, [dict(zip(header, row)) for row in reader if row]
