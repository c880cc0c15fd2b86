"""``precheck api_precision_compare``: msprobe's second-stage verdict from two details CSVs.

The NPU (target) and GPU (reference) details CSVs of the same dump, ours or msprobe's, are matched row by row
on the output-level API Name. Float outputs are judged by the benchmark standard on the ratios of their error
columns (or, with ``standard="auto"``, by the standard of the API's class, on the target's columns); integer and
bool outputs by their binary mismatch rate. The output files have msprobe's names and headers.

Where msprobe loses or misjudges rows, this does not: a row with no match in the GPU file, a duplicate, or a
malformed name becomes a SKIP row saying so (msprobe drops the first and aborts on the second); a stage-1 error
whose metrics are blank (a shape mismatch) stays an error (msprobe reads the blanks as 0 and passes it); a blank
metric is "not measured", never 0.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

from api_registry.classes import api_class
from precheck.core.comparison import Metrics
from precheck.core.reasons import Reason
from precheck.core.status import PASS, SKIP, worst
from precheck.dump.record_names import api_of
from precheck.dump.safe_files import Refused
from precheck.errors import PrecheckError
from precheck.frames import reasons
from precheck.frames.reasons import RowReason
from precheck.grader.second_stage import SecondStage, second_stage
from precheck.paths import claim_stamp, output_folder
from precheck.results import split_row_name
from precheck.run_files.csv_files import BLANK, cell, read_csv_rows, write_csv
from precheck.schema import CHINESE as _METRIC_COLUMNS
from precheck.schema import (
    PRECISION_DETAILS,
    PRECISION_DETAILS_HEADER,
    PRECISION_RESULT,
    PRECISION_RESULT_HEADER,
    STANDARD_COLUMN,
    STANDARD_NAMES,
    VERDICT_COLUMN,
    read_status,
)


class CompareError(PrecheckError):
    """A details CSV cannot be used at all (one line, exit code 2)."""


@dataclass(frozen=True)
class PrecisionCompareSummary:
    result_path: Path
    details_path: Path
    apis: dict[str, tuple[str, str]]  # API -> (forward, backward)


def _value(text: str | None) -> float | None:
    """A metric cell: blank means not measured (None), never 0."""
    if text is None or not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _metrics(row: dict[str, str]) -> Metrics:
    values = {field: _value(row.get(column)) for field, column in _METRIC_COLUMNS.items()}
    return Metrics(**values, count=_count(row.get("Shape")))


def _count(shape: str | None) -> int | None:
    """Elements of a Shape cell ("(2, 3)", "[]" or "torch.Size([2, 3])"): the share rules' count, or None."""
    text = (shape or "").strip().removeprefix("torch.Size").strip("()[] ")
    sizes = [part.strip() for part in text.split(",") if part.strip()]
    if not shape or not shape.strip() or not all(size.isdigit() for size in sizes):
        return None
    return math.prod(int(size) for size in sizes)


def _read(path: Path, side: str) -> list[dict[str, str]]:
    try:
        header, rows = read_csv_rows(path)
    except FileNotFoundError:
        raise CompareError(f"{path}: no such file") from None
    except Refused as e:  # a FIFO or a device: refused by its type, nothing read
        raise CompareError(f"{e} ({side}): a details CSV is one") from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise CompareError(f"{path}: cannot read: {e}") from None
    missing = {"API Name", "DEVICE Dtype", "Status", *_METRIC_COLUMNS.values()} - set(header)
    if missing:
        raise CompareError(
            f"{path} ({side}): not an accuracy_checking_details CSV, missing columns: {', '.join(sorted(missing))}"
        )
    return rows


def _judge_row(
    npu: dict[str, str], gpu: dict[str, str] | None, duplicate: bool, standard: str, reason: RowReason | None
) -> list[str]:
    """One details row of the output: its 28 cells; ``reason``: the row's in the first stage's reasons file."""
    name = npu["API Name"]
    out = {column: BLANK for column in PRECISION_DETAILS_HEADER}
    out["API Name"] = name
    found = split_row_name(name)
    if found is None:
        verdict = SecondStage(SKIP, "", f"The API name {name} is invalid.")
    elif gpu is None:
        verdict = SecondStage(SKIP, "", "no row of this name in the GPU details")
    elif duplicate:
        verdict = SecondStage(SKIP, "", "several rows of this name in the GPU details")
    else:
        api = found[0]
        stage1 = read_status(npu.get("Status", "")) or ""
        message, dtype = npu.get("Message", "").strip(), npu.get("DEVICE Dtype", "")
        random = reason is not None and reason.reason == Reason.RANDOM_LAW
        verdict = second_stage(
            stage1, message, _metrics(npu), _metrics(gpu), dtype, api_class(api_of(api)), standard, random
        )
    out.update({column: cell(value) for column, value in verdict.columns.items()})
    out[VERDICT_COLUMN] = verdict.status
    out[STANDARD_COLUMN] = STANDARD_NAMES.get(verdict.standard, verdict.standard or BLANK)
    out["Message"] = verdict.message or BLANK
    return [out[c] for c in PRECISION_DETAILS_HEADER]


def api_precision_compare(
    npu_csv: str | os.PathLike, gpu_csv: str | os.PathLike, out_dir: str | os.PathLike, standard: str = "benchmark"
) -> PrecisionCompareSummary:
    """Compare two details CSVs and write msprobe's ``api_precision_compare_{result,details}_{ts}.csv``."""
    npu_rows = _read(Path(npu_csv), "-npu")
    gpu_rows = _read(Path(gpu_csv), "-gpu")
    gpu: dict[str, dict[str, str]] = {}
    duplicates: set[str] = set()
    for row in gpu_rows:
        if row["API Name"] in gpu:
            duplicates.add(row["API Name"])
        gpu[row["API Name"]] = row
    details: list[list[str]] = []
    per_api: dict[str, dict[str, list[str]]] = {}
    messages: dict[str, str] = {}
    codes = reasons.read(Path(npu_csv)) or {}  # msprobe's CSVs, and precheck's from before the file, have none
    for row in npu_rows:
        name = row["API Name"]
        cells = _judge_row(row, gpu.get(name), name in duplicates, standard, codes.get(name))
        details.append(cells)
        found = split_row_name(row["API Name"])
        api, direction = (found[0], found[1]) if found else (row["API Name"], "forward")
        per_api.setdefault(api, {"forward": [], "backward": []})[direction].append(cells[-3])
        if cells[-3] != PASS and cells[-1].strip():
            messages.setdefault(api, f"{row['API Name'].removeprefix(api + '.')}: {cells[-1]}")
    results = {api: (_aggregate(d["forward"]), _aggregate(d["backward"])) for api, d in per_api.items()}
    out = output_folder(out_dir)
    stem = claim_stamp(out, PRECISION_RESULT, PRECISION_DETAILS)
    result_path, details_path = out / PRECISION_RESULT.format(stem), out / PRECISION_DETAILS.format(stem)
    write_csv(details_path, PRECISION_DETAILS_HEADER, details)
    write_csv(
        result_path, PRECISION_RESULT_HEADER, [[api, f, b, messages.get(api, BLANK)] for api, (f, b) in results.items()]
    )
    return PrecisionCompareSummary(result_path, details_path, results)


def _aggregate(statuses: list[str]) -> str:
    """msprobe's rule: blank when nothing, SKIP when all skipped, else the worst graded status."""
    if not statuses:
        return BLANK
    return worst(s for s in statuses if s != SKIP) if any(s != SKIP for s in statuses) else SKIP
