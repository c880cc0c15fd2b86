"""Results as data: a run's CSVs (precheck's or msprobe's) as one pandas DataFrame, a row per compared output.

The CSV writers stay streaming and byte-exact (precheck/run_files/csv_files.py); this only reads what they, or msprobe,
wrote. Metric cells are typed (a blank cell is NaN, never " "), each Chinese metric column has its English name
beside it, and the API, its call, prefix, direction, output index, dtype and status are columns of their own, so a
user filters and groups instead of parsing names."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from precheck.core.older_python import zip_strict
from precheck.errors import PrecheckError
from precheck.frames import reasons
from precheck.schema import (
    CHINESE,
    DETAILS,
    DETAILS_HEADER,
    ENGLISH,
    RESULT_HEADER,
    RESULT_PREFIX,
    details_of,
    result_of,
    split_row_name,
)

if TYPE_CHECKING:
    import pandas

__all__ = [
    "ENGLISH",
    "LoadError",
    "dtype_name",
    "load",
    "csv_pair",
    "read_table",
    "worst_errors",
]

_FIRST = ["call", "api", "prefix", "direction", "output", "dtype", "bench_dtype", "shape", "status", "message"]


# The dtype torch gives a Python scalar (torch.tensor(True).dtype ...): msprobe's CSV cell for a non-tensor output
# is str(type(value)), which the page names as torch would.
_PYTHON_SCALARS = {"bool": "torch.bool", "int": "torch.int64", "float": "torch.float64", "complex": "torch.complex128"}


def dtype_name(cell: str) -> str:
    """A dtype cell as torch names it: ``<class 'bool'>`` is ``torch.bool``, another Python type its bare name
    (``<class 'NoneType'>`` is ``NoneType``); a torch dtype, or anything else, as it is."""
    if cell.startswith("<class '") and cell.endswith("'>"):
        name = cell[len("<class '") : -2]
        return _PYTHON_SCALARS.get(name, name)
    return cell


class LoadError(PrecheckError, ValueError):
    """A path that holds no readable accuracy_checking CSVs (one line, naming the path)."""


def csv_pair(path: str | os.PathLike) -> tuple[Path, Path | None]:
    """(details CSV, its result CSV or None) of a run: ``path`` is an output folder (its newest run), a details
    CSV or a result CSV; the two files of one run share their timestamp."""
    p = Path(path)
    if p.is_dir():
        details = sorted(p.glob(DETAILS.format("*")))
        if not details:
            raise LoadError(f"{p}: no {DETAILS.format('*')} in this folder")
        p = details[-1]
    elif not p.is_file():
        raise LoadError(f"{p}: no such file or folder")
    if p.name.startswith(RESULT_PREFIX):
        details_path = p.with_name(details_of(p.name))
        if not details_path.is_file():
            raise LoadError(f"{p}: its details CSV {details_path.name} is not beside it")
        return details_path, p
    result = p.with_name(result_of(p.name))
    return p, result if result != p and result.is_file() else None


def load(path: str | os.PathLike) -> pandas.DataFrame:
    """Every compared output of one run as a row: ``call`` (``Functional.linear.0``), ``api``
    (``Functional.linear``), ``prefix``, ``direction``, ``output`` (its index), ``dtype``, ``bench_dtype``,
    ``shape``, ``status`` and ``message``; every metric under its English and its Chinese name (floats, NaN where
    blank); and, where the result CSV is beside it, the API's ``forward_status``, ``backward_status`` and
    ``api_message``."""
    import pandas as pd

    details_path, result_path = csv_pair(path)
    details = read_table(details_path, DETAILS_HEADER[:4] + ["Status"])
    for chinese, english in ENGLISH.items():
        if chinese in details:
            details[chinese] = pd.to_numeric(details[chinese].str.strip().replace("", None), errors="coerce")
            details[english] = details[chinese]
    parts = [split_row_name(name) for name in details["API Name"]]
    frame = pd.DataFrame(
        {
            "call": pd.Series([p[0] if p else n for p, n in zip_strict(parts, details["API Name"])], dtype=object),
            "direction": pd.Series([str(p[1]) if p else "" for p in parts], dtype=object),
            "output": pd.array([p[2] if p else None for p in parts], dtype="Int64"),
        }
    )
    frame["api"] = frame["call"].str.replace(r"\.\d+$", "", regex=True)
    frame["prefix"] = frame["call"].str.split(".", n=1).str[0]
    frame["dtype"] = details["DEVICE Dtype"].str.strip().map(dtype_name)
    frame["bench_dtype"] = details["Bench Dtype"].str.strip().map(dtype_name)
    frame["shape"] = details["Shape"].str.strip()
    frame["status"] = details["Status"].str.strip()
    frame["message"] = details.get("Message", pd.Series([""] * len(details))).str.strip()
    frame = pd.concat([frame, details[[c for c in details if c in ENGLISH or c in ENGLISH.values()]]], axis=1)
    found = reasons.read(details_path)
    frame = _with_reasons(frame, details["API Name"], found)
    if result_path is not None:
        frame = frame.merge(_api_statuses(result_path), on="call", how="left")
    frame = frame[_FIRST + [c for c in frame if c not in _FIRST]]
    frame.attrs["reasons"] = found is not None  # False: a run from before its reasons file, or msprobe's
    return frame


def _with_reasons(
    frame: pandas.DataFrame, names: pandas.Series, found: dict[str, reasons.RowReason] | None
) -> pandas.DataFrame:
    """The reasons file's columns (precheck/frames/reasons.py): ``reason``, ``standard``, ``honest_multiple``,
    ``nonfinite``, ``generated`` and ``recorded``; None, NaN, 0 and False where the run wrote no reasons file."""
    import pandas as pd

    known = found or {}
    rows = [known.get(n) for n in names]
    frame["reason"] = pd.Series([r.reason if r else None for r in rows], dtype=object)
    frame["standard"] = pd.Series([r.standard if r else "" for r in rows], dtype=object)
    frame["honest_multiple"] = pd.Series([r.ratio if r and r.ratio is not None else math.nan for r in rows])
    frame["nonfinite"] = pd.Series([r.nonfinite if r else 0 for r in rows], dtype="int64")
    frame["generated"] = pd.Series([bool(r and r.generated) for r in rows], dtype=bool)
    frame["recorded"] = pd.Series([bool(r and r.recorded) for r in rows], dtype=bool)
    return frame


def read_table(path: Path, needed: list[str], kind: str = "an accuracy_checking CSV") -> pandas.DataFrame:
    """A CSV of text cells (blanks stay ""), or LoadError naming the file and what it lacks to be ``kind``."""
    import pandas as pd

    try:
        frame = pd.read_csv(path, encoding="utf-8-sig", dtype=str, keep_default_na=False)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise LoadError(f"{path}: cannot read: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    missing = [c for c in needed if c not in frame]
    if missing:
        raise LoadError(f"{path}: not {kind}, missing columns: {', '.join(missing)}")
    return frame


def _api_statuses(path: Path) -> pandas.DataFrame:
    result = read_table(path, RESULT_HEADER[:3])
    return result.rename(
        columns={
            "API name": "call",
            "Forward Test Success": "forward_status",
            "Backward Test Success": "backward_status",
            "Message": "api_message",
        }
    ).assign(**{c: lambda f, c=c: f[c].str.strip() for c in ("forward_status", "backward_status")})


def worst_errors(details: Path, limit: int = 10) -> list[str]:
    """One line per API graded error in a details CSV, worst first, at most ``limit``, each naming its worst
    output and the reason that decided it, as the reasons file keeps it apart from the Message ("worse than an
    honest bf16 kernel: error 4.76x the honest kernel's ..."; the Message where none is kept): an error of the default
    standard can have a cosine and a max abs error that pass the card's rule, so those numbers explain nothing.
    Worst: the largest multiple of an honest kernel's error, then the lowest cosine, the largest max abs error.
    Read with the csv module, not pandas: every run prints these, and importing pandas would cost a small run a
    fifth of its time."""
    import csv

    worst: dict[str, tuple[tuple[float, float, float], str, str]] = {}
    found = reasons.read(details) or {}
    with open(details, encoding="utf-8-sig", newline="") as f:
        for row in csv.DictReader(f):
            if row.get("Status", "").strip() != "error":
                continue
            parts = split_row_name(row.get("API Name", ""))
            call, where = (parts[0], f"{parts[1]}.output.{parts[2]}") if parts else (row.get("API Name", ""), "")
            cosine, max_abs = _number(row.get(CHINESE["cosine"])), _number(row.get(CHINESE["max_abs_err"]))
            known = found.get(row.get("API Name", ""))
            reason = known.clause if known is not None and known.clause else row.get("Message", "").strip()
            ratio = known.ratio if known is not None else None
            key = (
                -ratio if ratio is not None else 0.0,
                cosine if cosine == cosine else 2.0,
                -(max_abs if max_abs == max_abs else 0.0),
            )
            if call not in worst or key < worst[call][0]:
                figures = [
                    f"{label} {v:.6g}" for label, v in (("cosine", cosine), ("max abs error", max_abs)) if v == v
                ]
                worst[call] = (key, where, reason or ", ".join(figures))
    ranked = sorted(worst.items(), key=lambda item: item[1][0])[:limit]
    return [f"    {call} {where}: {reason}" for call, (_, where, reason) in ranked]


def _number(text: str | None) -> float:
    try:
        return float(text) if text and text.strip() else math.nan
    except ValueError:
        return math.nan
