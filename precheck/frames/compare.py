"""A compare's results as data: ``compare_result_{ts}.csv`` (precheck's or msprobe's) as one pandas DataFrame, a
row per compared tensor, with the divergence verdict of its record beside it when ``compare_records_{ts}.csv`` is
there. The columns follow the run frame (precheck/frames/run.py): ``record``, ``call``, ``api``, ``prefix``,
``direction``, ``role`` (input, output, parameters ...), ``output`` (the index, where it is one), ``dtype``,
``bench_dtype``, ``shape``, ``status`` (the compare's Result) and ``message``; every metric typed (NaN where msprobe
writes N/A or a blank; statistics' percentages as fractions) under msprobe's name and an English one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from precheck.core.older_python import zip_strict
from precheck.dump.record_names import split_item
from precheck.frames.run import LoadError, read_table
from precheck.schema import COMPARE_MODES, COMPARE_RECORDS, COMPARE_RESULT, COMPARE_SUMMARY, compare_tail
from precheck.schema import RECORDS_HEADER as RECORD_COLUMNS
from precheck.schema import CompareConst as C

if TYPE_CHECKING:
    import pandas

__all__ = ["ENGLISH", "compare_files", "is_compare", "load_compare", "load_records", "read_summary"]

# msprobe's metric columns per mode and their English names. MaxRelativeErr is an elementwise error in tensor mode
# and the relative difference of the two maxima in statistics mode, hence two names.
ENGLISH = {
    "tensor": dict(zip_strict(C.BUILTIN_COMPARE_COLUMNS, ("cosine", "euc_dist", "max_abs_err", "max_rel_err",
                                                          "one_thousandth_ratio", "five_thousandths_ratio"))),
    "statistics": dict(zip_strict(C.SUMMARY_COMPARE_INDEX, ("max_diff", "min_diff", "mean_diff", "norm_diff",
                                                            "max_rel_diff", "min_rel_diff", "mean_rel_diff",
                                                            "norm_rel_diff"))),
}  # fmt: skip
_STATS = {c: c.lower().replace(" ", "_") for c in C.SUMMARY_INFO}  # "NPU l2norm": npu_l2norm
_FIRST = ["record", "call", "api", "prefix", "direction", "role", "output", "dtype", "bench_dtype", "shape", "status",
          "message"]  # fmt: skip


def is_compare(path: str | os.PathLike) -> bool:
    """True for a compare's own file (its CSV, records CSV or summary JSON), or a folder that holds a compare (a
    run_ut run beside it is the pre-check of the compare's suspects, which the compare report links)."""
    p = Path(path)
    if p.is_dir():
        return any(p.glob(COMPARE_SUMMARY.format("*")))
    return compare_tail(p.name) is not None


def compare_files(path: str | os.PathLike) -> tuple[Path, Path | None, Path | None]:
    """(compare CSV, records CSV or None, summary JSON or None) of one compare: ``path`` is any of the three, or a
    folder (its newest compare). The three files of one compare share their name's tail (``_rank0_<ts>``)."""
    p = Path(path)
    if p.is_dir():
        found = sorted(p.glob(COMPARE_RESULT.format("*")), key=lambda f: (f.stat().st_mtime, f.name))
        if not found:
            raise LoadError(f"{p}: no compare_result_*.csv in this folder")
        p = found[-1]
    elif not p.is_file():
        raise LoadError(f"{p}: no such file or folder")
    tail = compare_tail(p.name)
    if tail is None:
        raise LoadError(f"{p}: not a compare file (compare_result_*, compare_records_* or compare_summary_*)")
    csv_path, records = p.with_name(COMPARE_RESULT.format(tail)), p.with_name(COMPARE_RECORDS.format(tail))
    summary = p.with_name(COMPARE_SUMMARY.format(tail))
    if not csv_path.is_file():
        raise LoadError(f"{p}: its compare CSV {csv_path.name} is not beside it")
    return csv_path, records if records.is_file() else None, summary if summary.is_file() else None


def _numbers(column: pandas.Series) -> pandas.Series:
    import pandas as pd

    text = column.str.strip()
    percent = text.str.endswith("%")
    values = pd.to_numeric(text.str.rstrip("%").replace("", None), errors="coerce")
    return values.where(~percent, values / 100)


def load_compare(path: str | os.PathLike) -> pandas.DataFrame:
    """Every compared tensor of one compare as a row (see the module's docstring)."""
    import pandas as pd

    csv_path, records_path, summary_path = compare_files(path)
    required = [C.NPU_NAME, C.BENCH_NAME, C.NPU_DTYPE, C.BENCH_DTYPE, C.RESULT]
    table = read_table(csv_path, required, "a compare CSV")
    mode = _mode(read_summary(summary_path), table)
    names = table[C.NPU_NAME].where(table[C.NPU_NAME].str.strip() != C.N_A, table[C.BENCH_NAME])
    parts = [split_item(name) for name in names]
    frame = pd.DataFrame(
        [p[:5] for p in parts],
        columns=["record", "call", "api", "direction", "role"],
        index=names.index,
        dtype=names.dtype,
    )
    frame["prefix"] = frame["call"].str.split(".", n=1).str[0]
    frame["output"] = pd.array([int(p[5]) if p[5] is not None and p[5].isdigit() else None for p in parts],
                               dtype="Int64")  # fmt: skip
    frame["dtype"], frame["bench_dtype"] = table[C.NPU_DTYPE].str.strip(), table[C.BENCH_DTYPE].str.strip()
    frame["shape"] = table.get(C.NPU_SHAPE, pd.Series([""] * len(table))).str.strip()
    frame["status"] = table[C.RESULT].str.strip().str.lower()
    frame["message"] = table.get(C.ERROR_MESSAGE, pd.Series([""] * len(table))).str.strip()
    for msprobe, english in (ENGLISH.get(mode, {}) | _STATS).items():
        if msprobe in table:
            frame[english] = frame[msprobe] = _numbers(table[msprobe])
    for column in C.MD5_COLUMNS:
        if column in table:
            frame[column.lower().replace(" ", "_")] = table[column].str.strip()
    if records_path is not None:
        records = load_records(records_path).drop(columns=["direction"]).drop_duplicates("record")  # a name both
        frame = frame.merge(records, on="record", how="left")  # sides hold unmatched is two rows there, one verdict
    frame = frame[_FIRST + [c for c in frame if c not in _FIRST]]
    frame.attrs["mode"] = mode
    return frame


def _mode(summary: dict, table: pandas.DataFrame) -> str:
    """The compare's mode as its summary records it (precheck compare chose it from the dumps); told from the CSV's
    columns only where no summary says it: msprobe's own compare CSV, which has none."""
    recorded = summary.get("mode")
    if recorded in COMPARE_MODES:
        return recorded
    return "tensor" if C.COSINE in table else "statistics" if C.MAX_DIFF in table else "md5"


def load_records(path: Path) -> pandas.DataFrame:
    """compare_records_{ts}.csv, a row per record in execution order: its divergence verdict, whether its inputs
    agree, its deviations (floats), the record that produced a differing input and the run_ut verdict."""
    table = read_table(path, RECORD_COLUMNS, "a compare records CSV")
    frame = table.rename(columns={c: c.lower().replace(" ", "_") for c in RECORD_COLUMNS})  # "Worst input": worst_input
    for column in ("input_deviation", "output_deviation"):
        frame[column] = _numbers(frame[column])
    frame["inputs_agree"] = frame["inputs_agree"].map({"True": True, "False": False})
    return frame


def read_summary(path: Path | None) -> dict:
    """compare_summary_{ts}.json as a dict ({} when absent or unreadable: the page then says less, never fails)."""
    if path is None:
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}
