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

from precheck.compare import fused
from precheck.compare.divergence import TOLERANCE
from precheck.compare.fused import Elements
from precheck.core.older_python import zip_strict
from precheck.dump import ptarchive, safe_files
from precheck.schema import CompareConst as C

_EPSILON = float(np.finfo(float).eps)
MAX_FILE = 4 << 30  # bytes of one tensor file read for a compare
# A mask's constant: torch.finfo(dtype).min of fp32, bf16 or fp64 (perhaps scaled: within 16 binades of fp32's
# overflow, where no activation lives), or fp16's finfo.max; held by both sides at the same place, it says nothing of
# how far they are, yet as the bench's largest magnitude it would make any difference beside it read as nothing
_EXTREME, _FP16_MAX = float(np.finfo(np.float32).max) * 2.0**-16, float(np.finfo(np.float16).max)
# The narrow dtypes' range: (smallest normal, smallest subnormal); a bench value below the smallest normal is held by
# the target to within one subnormal step, and one below the smallest subnormal is flushed to zero
_RANGE = {"float16": (2.0**-14, 2.0**-24), "bfloat16": (2.0**-126, 2.0**-133)}
_SHORT = {"float16": "fp16", "bfloat16": "bf16"}


@dataclass
class TensorMetrics:
    values: dict[str, Any]  # column -> number or msprobe's word
    notes: list[str] = field(default_factory=list)  # what the row's Err_message must say (a file not read ...)
    deviation: float | None = None  # relative L2 error, or max abs error over the bench's largest magnitude
    range_explained: bool = False  # the target dtype's range (values flushed to zero or subnormal) explains it


MMAP_FROM = 1 << 20


def load_elements(data_dir: Path, data_name: str) -> Elements:
    """A recorded tensor as it was saved (.pt through precheck.dump.ptarchive, bfloat16 kept as its raw bits
    until a chunk of it is compared; .npy without pickles), read only through the descriptor that
    precheck.dump.safe_files opened and checked, as run_ut reads it (a name leaving the dump, a link out of it or
    one swapped in after the check is refused); ValueError says why not. A tensor left in its file keeps it open
    until the Elements are closed."""
    data = safe_files.open_file(data_dir, data_name)  # Refused: a ValueError naming the file
    kept = False
    try:
        if data_name.endswith(".npy"):  # mapped when large; a small file costs more to map than to read
            return Elements.of(safe_files.load_npy(data, mapped=data.size > MMAP_FROM))
        stored = ptarchive.inspect(data.file, max_bytes=MAX_FILE)
        bf16, start = stored.dtype == "bfloat16", ptarchive.contiguous_start(stored)
        if start is None:  # a strided view, or a compressed entry: read whole
            return Elements.of(ptarchive.read_raw(data.file, stored), bf16)
        kept = True
        return Elements(stored.shape, ptarchive.numpy_dtype(stored), bf16, file=data, start=start)
    except ptarchive.PtError as e:
        raise ValueError(f"{data_name[:80]}: {e}") from None
    except Exception as e:  # any reader's own failure (zipfile on a bad CRC, zlib on a corrupt stream) is the
        # file's problem: its row's one line, never the compare's end
        raise ValueError(f"{data_name[:80]}: unreadable: {_problem(e)}") from None
    finally:
        if not kept:
            data.close()


def _problem(e: Exception) -> str:
    """The first line of a reader's failure, named by its type unless it is a ValueError (whose text says it)."""
    text = (str(e).strip().splitlines() or [""])[0][:200]
    if isinstance(e, ValueError) and text:
        return text
    kind = type(e).__name__ if type(e).__module__ == "builtins" else f"{type(e).__module__}.{type(e).__name__}"
    return f"{kind}: {text}" if text else kind


def load_array(data_dir: Path, data_name: str) -> np.ndarray:
    """A recorded tensor as a numpy array, bfloat16 widened to float32 (exactly); ValueError says why not."""
    with load_elements(data_dir, data_name) as elements:
        return elements.array()


def tensor_metrics(n: Elements, b: Elements) -> TensorMetrics:
    """msprobe's six tensor metrics of target ``n`` against bench ``b``, in one chunked pass over both
    (precheck.compare.fused: a heavy dump's tensors are hundreds of megabytes). Raises ptarchive.PtError when
    a tensor's file cannot be read to its end."""
    if n.size == 0 or b.size == 0:
        return _all(C.UNSUPPORTED)
    if n.shape != b.shape:
        return _all(C.SHAPE_UNMATCH)
    kind = np.result_type(_floating(n.dtype), _floating(b.dtype), np.float32)  # msprobe's relative error's dtype
    narrow = "bfloat16" if n.bf16 else str(n.dtype) if str(n.dtype) in _RANGE else None
    sums = fused.passed(n, b, kind)
    if not (math.isfinite(sums.nn) and math.isfinite(sums.bb)):  # a square only overflows float64 past 1e154
        cleaned = _without_non_finite(n, b, kind)
        if cleaned is None:
            result = _all(C.NAN)
            result.deviation = math.inf
            return result
        n, b = cleaned
        sums = fused.passed(n, b, kind)
    result = _from_sums(sums, n.size, len(n.shape))
    _within_range(result, sums, (n, b, kind), narrow)
    return result


def _within_range(result: TensorMetrics, sums: fused.Sums, pair: tuple, narrow: str | None) -> None:
    """The deviation without what the dtypes' range decides, msprobe's columns left as they are: places where both
    sides hold a mask's constant are left out (a Llama's finfo.min mask made the bf16 rounding of the scores beside
    it read 1e-42, and the softmax fed them a suspect), and a narrow target (fp16, bf16) whose deviation is beyond
    its rounding is ``range_explained`` where, without the bench values its range cannot hold (below its smallest
    normal, held to within a subnormal step: a layer scale of 1e-6 times a gradient of 2e-2 is 0 in fp16), it is
    within that rounding; the values flushed to zero are counted in the row's note."""
    n, b, kind = pair
    if sums.top >= _FP16_MAX:
        result.deviation = _deviation(fused.passed(n, b, kind, drop=_both_extreme))
    if narrow is None or result.deviation <= TOLERANCE[narrow]:
        return
    normal, step = _RANGE[narrow]
    flushed = 0

    def drop(nv: np.ndarray, bv: np.ndarray) -> np.ndarray:
        nonlocal flushed
        tiny = (np.abs(bv) < normal) & (np.abs(nv - bv) <= step)
        flushed += int(np.count_nonzero(tiny & (nv == 0) & (bv != 0)))
        return tiny | _both_extreme(nv, bv)

    result.range_explained = _deviation(fused.passed(n, b, kind, drop=drop)) <= TOLERANCE[narrow]
    if flushed:
        result.notes.append(
            f"underflow: {flushed} values below {_SHORT[narrow]}'s smallest subnormal on the target flushed to zero"
        )


def _both_extreme(nv: np.ndarray, bv: np.ndarray) -> np.ndarray:
    """The places where both sides hold a mask's constant of the same sign."""
    n_abs, b_abs = np.abs(nv), np.abs(bv)
    at = ((n_abs >= _EXTREME) | (n_abs == _FP16_MAX)) & ((b_abs >= _EXTREME) | (b_abs == _FP16_MAX))
    return at & (np.sign(nv) == np.sign(bv))


def _without_non_finite(n: Elements, b: Elements, kind: np.dtype) -> tuple[Elements, Elements] | None:
    """msprobe's handle_inf_nan: inf/nan at the same places with the same values are zeroed on both sides;
    None when they differ (msprobe's "Nan" in every column)."""
    nv, bv = n.array(kind).reshape(-1), b.array(kind).reshape(-1)
    n_bad, b_bad = ~np.isfinite(nv), ~np.isfinite(bv)
    if not np.array_equal(n_bad, b_bad) or not np.array_equal(nv[n_bad], bv[b_bad], equal_nan=True):
        return None
    return Elements.of(np.where(n_bad, 0, nv)), Elements.of(np.where(b_bad, 0, bv))


def _from_sums(s: fused.Sums, size: int, ndim: int) -> TensorMetrics:
    values: dict[str, Any] = {C.COSINE: _cosine(s.nn, s.bb, s.nb, size, ndim)}
    dist = math.sqrt(s.dd)
    values[C.EUC_DIST] = C.UNSUPPORTED if ndim == 0 else dist
    values[C.MAX_ABS_ERR] = _formatted(s.max_abs)
    values[C.MAX_RELATIVE_ERR] = _formatted(s.max_rel)
    for column, below in ((C.ONE_THOUSANDTH_ERR_RATIO, s.below_1e3), (C.FIVE_THOUSANDTHS_ERR_RATIO, s.below_5e3)):
        values[column] = C.UNSUPPORTED if ndim == 0 else _formatted(below / size)
    return TensorMetrics(values, deviation=_deviation(s))


def _deviation(s: fused.Sums) -> float:
    """The divergence search's deviation: the larger of the relative L2 error and the max abs error over the
    bench's largest magnitude."""
    dist = math.sqrt(s.dd)
    rel_l2 = dist / math.sqrt(s.bb) if s.bb else (0.0 if dist == 0 else math.inf)
    rel_max = s.max_abs / s.top if s.top else (0.0 if s.max_abs == 0 else math.inf)
    return max(rel_l2, rel_max)


def _all(word: str) -> TensorMetrics:
    return TensorMetrics(dict.fromkeys(C.BUILTIN_COMPARE_COLUMNS, word))


def _floating(dtype: np.dtype) -> np.dtype:
    """The dtype msprobe computes a relative error in: floats as they are, anything else as float64."""
    return dtype if np.issubdtype(dtype, np.floating) else np.dtype(np.float64)


def _cosine(nn: float, bb: float, nb: float, size: int, ndim: int) -> Any:
    """msprobe's cosine from the three dot products (float64); its words where it cannot be computed (msprobe's
    compare keeps its reasons out of the CSV, and so does this)."""
    if ndim == 0 or size == 1:
        return C.UNSUPPORTED
    a_norm, b_norm = math.sqrt(nn), math.sqrt(bb)
    if a_norm <= _EPSILON and b_norm <= _EPSILON:
        return 1.0
    if a_norm <= _EPSILON or b_norm <= _EPSILON:
        return C.NAN
    cos = _formatted(nb / (a_norm * b_norm))
    return round(cos, 6) if cos > 0.9999 else cos


def _formatted(value: float) -> float:
    return float(f"{float(value):.12f}")


def stats_differences(npu: tuple, bench: tuple) -> tuple[list[Any], list[Any]]:
    """msprobe's statistics-mode cells: (Max, Min, Mean, L2norm diffs), (their relative differences)."""
    diffs, rels = [], []
    for a, b in zip_strict(npu, bench):
        diff, rel = _stat_difference(a, b)
        diffs.append(diff)
        rels.append(rel)
    return diffs, rels


def _stat_difference(a: Any, b: Any) -> tuple[Any, Any]:
    if str(a) == str(b):
        return "0", "0"
    x, y = _number(a), _number(b)
    if x is None or y is None:
        return C.N_A, C.N_A
    if math.isnan(x) or math.isnan(y):
        return C.NAN, C.NAN
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
    |dNorm| / Norm and |dMax|, |dMin|, |dMean| over max(|Max|, |Min|) of the finite ones. None when the statistics
    are missing. A statistic that is the same inf or nan on both sides is equal (a causal mask's -inf gives
    Min = Mean = -inf and Norm = inf to both); one that is not finite on one side only, or a different one on each,
    is inf: an overflow."""
    values = [(_number(a), _number(b)) for a, b in zip_strict(npu, bench)]
    if any(x is None or y is None for x, y in values):
        return None
    finite = [math.isfinite(x) and math.isfinite(y) for x, y in values]
    if any(not ok and str(x) != str(y) for ok, (x, y) in zip_strict(finite, values)):
        return math.inf
    (nmax, bmax), (nmin, bmin), (nmean, bmean), (nnorm, bnorm) = values
    scale = max((abs(y) for ok, (_, y) in zip_strict(finite[:2], values[:2]) if ok), default=0.0)
    parts = [0.0]
    if finite[3]:
        parts.append(abs(nnorm - bnorm) / bnorm if bnorm else (0.0 if nnorm == bnorm else math.inf))
    for ok, (x, y) in zip_strict(finite[:3], ((nmax, bmax), (nmin, bmin), (nmean, bmean))):
        if ok:
            parts.append(abs(x - y) / scale if scale else (0.0 if x == y else math.inf))
    return max(parts)
