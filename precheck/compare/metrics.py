"""The numbers of one compare row, by msprobe compare's formulas (core/compare/npy_compare.py, algorithm/ and
acc_compare.py's CalcStatsDiff in mindstudio-probe 26.2), and the deviation the first-divergence search reads.

Tensor mode: Cosine, EucDist, MaxAbsErr, MaxRelativeErr, One Thousandth and Five Thousandths Err Ratio of the
two recorded tensors. Statistics mode: the differences of Max/Min/Mean/L2norm and their relative differences in
percent. Where msprobe cannot compute (a 0-d or one-element tensor, an empty one, inf/nan at different places)
the same words as msprobe's fill the cells (msprobe keeps its reasons out of the CSV, and so does this); what
precheck itself must say (a tensor file it could not read) goes to the row's Err_message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from precheck.dump import ptarchive

TENSOR_COLUMNS = ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                  "Five Thousandths Err Ratio")  # fmt: skip
UNSUPPORTED, NAN, N_A, SHAPE_UNMATCH = "unsupported", "Nan", "N/A", "shape unmatched"
_EPSILON = float(np.finfo(float).eps)
MAX_FILE = 4 << 30  # bytes of one tensor file read for a compare


@dataclass
class TensorMetrics:
    values: dict[str, Any]  # column -> number or msprobe's word
    notes: list[str] = field(default_factory=list)  # what the row's Err_message must say (a file not read ...)
    deviation: float | None = None  # relative L2 error, or max abs error over the bench's largest magnitude


MMAP_FROM = 1 << 20


def load_array(data_dir: Path, data_name: str) -> np.ndarray:
    """A recorded tensor (.pt through precheck.dump.ptarchive, .npy without pickles); ValueError says why not."""
    if "/" in data_name or "\\" in data_name or data_name in (".", "..") or "\0" in data_name:
        raise ValueError(f"data file {data_name[:80]!r} is not a plain file name")
    path = data_dir / data_name
    if not path.is_file():
        raise ValueError(f"{data_name[:80]}: no such file in {data_dir}")
    try:
        if data_name.endswith(".npy"):  # mapped when large; a small file costs more to map than to read
            return np.load(path, allow_pickle=False, mmap_mode="r" if path.stat().st_size > MMAP_FROM else None)
        return ptarchive.read_array(path, ptarchive.inspect(path, max_bytes=MAX_FILE))
    except ptarchive.PtError as e:
        raise ValueError(f"{data_name[:80]}: {e}") from None
    except (OSError, EOFError) as e:
        raise ValueError(f"{data_name[:80]}: cannot read: {e}") from None


def tensor_metrics(n: np.ndarray, b: np.ndarray) -> TensorMetrics:
    """msprobe's six tensor metrics of target ``n`` against bench ``b``, in as few passes over the data as the
    formulas allow (a heavy dump's tensors are hundreds of megabytes)."""
    if n.size == 0 or b.size == 0:
        return _all(UNSUPPORTED)
    if n.shape != b.shape:
        return _all(SHAPE_UNMATCH)
    kind = np.result_type(_floating(n), _floating(b), np.float32)  # msprobe's relative error is in this dtype
    ndim = n.ndim
    n, b = np.asarray(n, dtype=kind).reshape(-1), np.asarray(b, dtype=kind).reshape(-1)
    if not (np.isfinite(n.sum()) and np.isfinite(b.sum())):  # one pass each; a sum only overflows past 3e38
        n_bad, b_bad = ~np.isfinite(n), ~np.isfinite(b)
        if not np.array_equal(n_bad, b_bad) or not np.array_equal(n[n_bad], b[b_bad], equal_nan=True):
            result = _all(NAN)
            result.deviation = math.inf
            return result
        n, b = np.where(n_bad, 0, n), np.where(b_bad, 0, b)
    return _from_passes(n, b, ndim)


def _from_passes(n: np.ndarray, b: np.ndarray, ndim: int) -> TensorMetrics:
    diff = np.abs(n - b)  # in msprobe's dtype: its relative error is computed in it
    n64, b64 = n.astype(np.float64), b.astype(np.float64)
    d64 = n64 - b64
    values: dict[str, Any] = {}
    nn, bb, nb = float(np.dot(n64, n64)), float(np.dot(b64, b64)), float(np.dot(n64, b64))
    values["Cosine"] = _cosine(nn, bb, nb, n.size, ndim)
    dist = math.sqrt(float(np.dot(d64, d64)))
    values["EucDist"] = UNSUPPORTED if ndim == 0 else dist
    max_abs = float(np.abs(d64).max())
    values["MaxAbsErr"] = _formatted(max_abs)
    relative = _relative(n, b, diff)
    values["MaxRelativeErr"] = _formatted(relative.max())
    for column, bound in (("One Thousandth Err Ratio", 0.001), ("Five Thousandths Err Ratio", 0.005)):
        values[column] = UNSUPPORTED if ndim == 0 else _formatted(np.count_nonzero(relative < bound) / relative.size)
    top = float(max(b64.max(), -b64.min()))
    rel_l2 = dist / math.sqrt(bb) if bb else (0.0 if dist == 0 else math.inf)
    rel_max = max_abs / top if top else (0.0 if max_abs == 0 else math.inf)
    return TensorMetrics(values, deviation=max(rel_l2, rel_max))


def _all(word: str) -> TensorMetrics:
    return TensorMetrics(dict.fromkeys(TENSOR_COLUMNS, word))


def _floating(a: np.ndarray) -> np.dtype:
    """The dtype msprobe computes a relative error in: floats as they are, anything else as float64."""
    return a.dtype if np.issubdtype(a.dtype, np.floating) else np.dtype(np.float64)


def _cosine(nn: float, bb: float, nb: float, size: int, ndim: int) -> Any:
    """msprobe's cosine from the three dot products (float64); its words where it cannot be computed (msprobe's
    compare keeps its reasons out of the CSV, and so does this)."""
    if ndim == 0 or size == 1:
        return UNSUPPORTED
    a_norm, b_norm = math.sqrt(nn), math.sqrt(bb)
    if a_norm <= _EPSILON and b_norm <= _EPSILON:
        return 1.0
    if a_norm <= _EPSILON or b_norm <= _EPSILON:
        return NAN
    cos = _formatted(nb / (a_norm * b_norm))
    return round(cos, 6) if cos > 0.9999 else cos


def _relative(n: np.ndarray, b: np.ndarray, diff: np.ndarray) -> np.ndarray:
    """msprobe's relative error |n - b| / |b|; a zero bench element has the dtype's epsilon added on both sides."""
    zero = b == 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if not zero.any():
            return np.divide(diff, np.abs(b), out=diff)
        eps = np.finfo(n.dtype).eps
        return np.abs((np.where(zero, n + eps, n) - np.where(zero, eps, b)) / np.where(zero, eps, b))


def _formatted(value: float) -> float:
    return float(f"{float(value):.12f}")


def stats_differences(npu: tuple, bench: tuple) -> tuple[list[Any], list[Any]]:
    """msprobe's statistics-mode cells: (Max, Min, Mean, L2norm diffs), (their relative differences)."""
    diffs, rels = [], []
    for a, b in zip(npu, bench, strict=True):
        diff, rel = _stat_difference(a, b)
        diffs.append(diff)
        rels.append(rel)
    return diffs, rels


def _stat_difference(a: Any, b: Any) -> tuple[Any, Any]:
    if str(a) == str(b):
        return "0", "0"
    x, y = _number(a), _number(b)
    if x is None or y is None:
        return N_A, N_A
    if math.isnan(x) or math.isnan(y):
        return NAN, NAN
    if math.isinf(x) or math.isinf(y):  # unequal, so x - y is an infinity of the sign msprobe writes
        sign = "inf" if x - y > 0 else "-inf"
        return sign, sign
    diff = x - y
    return diff, "inf" if y == 0 else f"{abs(diff / y * 100)}%"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def stats_deviation(npu: tuple, bench: tuple) -> float | None:
    """How far the target's statistics are from the bench's, relative to the bench's magnitude: the larger of
    |dNorm| / Norm and |dMax|, |dMin|, |dMean| over max(|Max|, |Min|). None when the statistics are missing."""
    values = [(_number(a), _number(b)) for a, b in zip(npu, bench, strict=True)]
    if any(x is None or y is None for x, y in values):
        return None
    (nmax, bmax), (nmin, bmin), (nmean, bmean), (nnorm, bnorm) = values
    if any(math.isnan(v) or math.isinf(v) for pair in values for v in pair):
        finite_same = all(str(x) == str(y) for x, y in values)
        return 0.0 if finite_same else math.inf
    scale = max(abs(bmax), abs(bmin))
    parts = [abs(nnorm - bnorm) / bnorm if bnorm else (0.0 if nnorm == bnorm else math.inf)]
    for x, y in ((nmax, bmax), (nmin, bmin), (nmean, bmean)):
        parts.append(abs(x - y) / scale if scale else (0.0 if x == y else math.inf))
    return max(parts)
