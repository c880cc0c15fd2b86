"""Every metric of the details CSV, computed in one float64 pass over a target and its golden.

Non-finite values are handled once, up front: positions where both sides hold the same inf or nan agree, every
other non-finite position counts in ``inf_nan_err_ratio``, and all error statistics are taken over the positions
where both sides are finite. A metric that is not defined for the output is None (a blank cell).

Grading has to cost about one pass over the data (a 4M-element output graded at several times the cost of a plain
cosine and max-abs pass was most of a heavy dump's run), so the flat tensors are walked in chunks of ``CHUNK``
elements: each chunk becomes one float64 difference in reused buffers, and every column is a reduction of it
(sums, maxima, counts of comparisons), accumulated across chunks. Temporaries stay at a few chunk-sized buffers
whatever the output's size. Within one chunk the reductions are the very ones of an unchunked pass, so outputs up
to ``CHUNK`` elements get bit-identical numbers; larger ones combine per-chunk sums with ``math.fsum``.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import torch

from precheck.core.comparison import Metrics
from precheck.grader.limits import DtypeLimits, Regime, absolute_regime, limits_for

_EPS = torch.finfo(torch.float64).eps
CHUNK = 1 << 16  # elements per pass: a float64 buffer of 512 KiB, so a pass's operands stay in a core's L2


_WITHIN = (1e-2, 1e-3, 1e-4)  # the thresholds of rel_within_1e2, _1e3, _1e4
_ZERO = torch.zeros((), dtype=torch.float64)


def _flat(t: torch.Tensor) -> torch.Tensor:
    """The compared values, flat, in their own dtype (complex as interleaved real and imaginary parts)."""
    t = t.detach().cpu()
    if t.is_complex():
        t = torch.view_as_real(t.resolve_conj())  # fft outputs can be conjugate views
    return t.reshape(-1)


def _share(count: int, n: int) -> float:
    return count / n if n else 0.0


def _count(mask: torch.Tensor) -> int:
    """Non-zero elements; a contiguous bool mask is summed as bytes (each 0 or 1), about twice count_nonzero's
    speed on one."""
    if mask.dtype == torch.bool and mask.is_contiguous():
        return int(mask.view(torch.uint8).sum(dtype=torch.int32 if mask.numel() < 2**31 else torch.int64))
    return int(torch.count_nonzero(mask))


_WORKSPACE = threading.local()  # one set of chunk buffers per thread, kept between outputs


class _Buffers:
    """Chunk-sized scratch tensors, reused by every chunk of every output graded on this thread (no per-metric
    temporaries). They are kept between outputs: glibc hands freed half-MiB buffers back to the system, and
    allocating them afresh for each output cost a page fault per 4 KiB touched."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._made: dict[tuple[str, torch.dtype], torch.Tensor] = _WORKSPACE.__dict__.setdefault("buffers", {})

    def __call__(self, name: str, k: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        buf = self._made.get((name, dtype))
        if buf is None or buf.numel() < self.size:
            buf = self._made[name, dtype] = torch.empty(self.size, dtype=dtype)
        return buf if k == buf.numel() else buf[:k]  # slicing costs as much as a small kernel


@dataclass
class _Totals:
    """What the chunks add up to; ``metrics`` turns it into the columns."""

    lim: DtypeLimits
    regime: Regime
    rounding: torch.dtype | None  # the target dtype the golden is rounded to for binary_mismatch (None: float64)
    finite: int = 0  # positions where both sides are finite
    mismatched: int = 0
    bad: int = 0  # non-finite positions where the two sides do not agree
    overflows: int = 0  # of those, the target's inf where the golden rounded to the target dtype is that inf
    first_bad: int | None = None
    max_abs: float = -1.0
    worst: int | None = None
    golden_max: float = 0.0
    cosine: list[tuple[float, float, float, float, float]] = field(default_factory=list)
    squares: list[float] = field(default_factory=list)
    balance: int = 0  # positives minus negatives of the difference
    within: list[int] = field(default_factory=lambda: [0, 0, 0])
    small: int = 0
    small_bad: int = 0
    rel_sums: list[float] = field(default_factory=list)
    rel_max: float = 0.0
    regime_small: int = 0
    regime_rel_bad: int = 0
    regime_abs_bad: int = 0
    ulp_sums: list[float] = field(default_factory=list)
    ulp_max: float = 0.0
    ulp_above: int = 0
    # The default standard's measure (grader/honest.py), taken in this pass while every position is finite:
    scale: float | None = None  # the floor under |g_i| in its worst element, ||g|| / sqrt(n); None: not taken
    golden_norm: float = 0.0
    error_sums: list[float] = field(default_factory=list)
    scaled_worst: float = 0.0


def float_metrics(
    target: torch.Tensor, golden: torch.Tensor, target_dtype: torch.dtype, regime: Regime | None = None
) -> Metrics:
    """All metrics of a floating output; ``target_dtype`` sets the small-value, rtol and ULP rules, ``regime``
    the split of the threshold columns (default: the absolute-threshold standard's)."""
    t, g = _flat(target), _flat(golden)
    n = t.numel()
    if n == 0:
        return Metrics()
    if g.numel() != n:
        raise ValueError(f"target holds {n} values, golden {g.numel()}")
    real = target_dtype.to_real() if target_dtype.is_complex else target_dtype
    totals = _Totals(
        limits_for(target_dtype), regime or absolute_regime(target_dtype), None if real == torch.float64 else real
    )
    golden_norm = float(torch.linalg.vector_norm(g if g.is_floating_point() else g.double(), dtype=torch.float64))
    if math.isfinite(golden_norm):  # an inf/nan anywhere is measured by the verdict itself, on its positions
        totals.golden_norm = golden_norm
        totals.scale = max(golden_norm, math.sqrt(n) * 2.0**totals.lim.min_eb) / math.sqrt(n)
    buffers = _Buffers(min(n, CHUNK))
    for start in range(0, n, CHUNK):
        _chunk(totals, t[start : start + CHUNK], g[start : start + CHUNK], start, buffers)
    return _metrics(totals, n)


def _chunk(s: _Totals, tc: torch.Tensor, gc: torch.Tensor, offset: int, buf: _Buffers) -> None:
    """One chunk: its float64 difference, then either the all-finite pass or the masked one."""
    k = tc.numel()
    t = buf("t", k).copy_(tc)
    g = gc if gc.dtype == torch.float64 else buf("g", k).copy_(gc)
    d = torch.sub(t, g, out=buf("d", k))
    a = torch.abs(d, out=buf("a", k))
    # amax rather than max: the same value (every maximum taken here is over values >= +0, or propagates nan) at
    # half the cost of max's full reduction.
    largest = float(a.amax())  # nan or inf unless both sides are finite everywhere
    if not math.isfinite(largest):
        _nonfinite_chunk(s, t, g, offset, buf)
        return
    s.finite += k
    if s.rounding is None:
        s.mismatched += _count(d)  # t != g exactly where t - g != 0
    else:
        rounded = buf("rounded", k, s.rounding).copy_(g)
        if tc.dtype == s.rounding:
            s.mismatched += _count(torch.ne(tc, rounded, out=buf("mask", k, torch.bool)))
        else:
            s.mismatched += _count(torch.ne(t, rounded.to(torch.float64), out=buf("mask", k, torch.bool)))
    _finite(s, t, g, d, a, largest, offset, None, buf)


def _nonfinite_chunk(s: _Totals, t: torch.Tensor, g: torch.Tensor, offset: int, buf: _Buffers) -> None:
    """A chunk holding inf or nan (rare): masks as the metrics define them, then the finite pass on the rest."""
    s.scale = None
    t_fin, g_fin = torch.isfinite(t), torch.isfinite(g)
    both_nan = torch.isnan(t) & torch.isnan(g)
    finite = t_fin & g_fin
    bad = ~finite & ~((t == g) | both_nan)
    n_bad = _count(bad)
    if n_bad and s.first_bad is None:
        s.first_bad = offset + int(bad.nonzero()[0, 0])
    s.bad += n_bad
    rounded = g if s.rounding is None else g.to(s.rounding).to(torch.float64)
    s.mismatched += _count(~((t == rounded) | both_nan))
    s.overflows += _count(bad & torch.isinf(t) & (t == rounded))
    # Error balance counts every position whose difference has a sign (inf against a finite value does; nan and
    # inf - inf do not), as msprobe's get_error_balance does on the whole arrays.
    d_rest = t[~finite] - g[~finite]
    s.balance += _count(d_rest > 0) - _count(d_rest < 0)
    index = finite.nonzero().reshape(-1)
    s.finite += index.numel()
    if index.numel():
        tf, gf = t[finite], g[finite]
        d = tf - gf
        a = d.abs()
        _finite(s, tf, gf, d, a, float(a.amax()), offset, index, buf)


def _finite(
    s: _Totals,
    t: torch.Tensor,
    g: torch.Tensor,
    d: torch.Tensor,
    a: torch.Tensor,
    largest: float,
    offset: int,
    index: torch.Tensor | None,
    buf: _Buffers,
) -> None:
    """Every column's reductions over finite values: ``d`` = t - g, ``a`` = |d| (``index``: their flat places)."""
    k = t.numel()
    if largest > s.max_abs:  # strictly: the first of equal maxima, as argmax over the whole tensor
        local = int(a.argmax())
        s.max_abs, s.worst = largest, offset + (local if index is None else int(index[local]))
    abs_g = torch.abs(g, out=buf("abs_g", k))
    golden_max = float(abs_g.amax())
    s.golden_max = max(s.golden_max, golden_max)
    s.cosine.append(_cosine_parts(t, g, golden_max, largest, buf))
    s.squares.append(float(torch.dot(d, d)))
    if s.scale is not None:
        s.error_sums.append(float(d.sum()))
        scaled = torch.div(a, torch.clamp(abs_g, min=s.scale, out=buf("x", k)), out=buf("x", k))
        s.scaled_worst = max(s.scaled_worst, float(scaled.amax()))
    s.balance += int(torch.sign(d, out=buf("x", k)).sum())  # a float sum of +-1 and 0: exact below 2^53
    rel = torch.add(abs_g, _EPS, out=buf("rel", k))
    rel = torch.div(a, rel, out=rel)
    _shares(s, a, largest, abs_g, rel, buf)
    ulp = _ulp(a, abs_g, largest, s.lim, buf)
    s.ulp_sums.append(float(ulp.sum()))
    ulp_max = float(ulp.amax())
    s.ulp_max = max(s.ulp_max, ulp_max)
    if ulp_max > s.lim.ulp_threshold:  # (each count below is skipped where the chunk's maximum decides it)
        s.ulp_above += _count(torch.gt(ulp, s.lim.ulp_threshold, out=buf("mask", k, torch.bool)))


def _shares(s: _Totals, a: torch.Tensor, largest: float, abs_g: torch.Tensor, rel: torch.Tensor, buf: _Buffers) -> None:
    """The relative-error columns and the threshold columns: counts of comparisons in reused bool buffers, each
    skipped where the chunk's largest error decides it. Consumes ``rel`` (its small-value positions are zeroed
    for the normal-value statistics)."""
    k, lim, regime = a.numel(), s.lim, s.regime
    top = float(rel.amax())
    small = torch.le(abs_g, lim.small_value, out=buf("small", k, torch.bool))
    n_small = _count(small)
    mask = buf("mask", k, torch.bool)
    n_small_bad, small_ok = 0, None
    if n_small and largest > lim.small_value_atol:
        small_bad = torch.gt(a, lim.small_value_atol, out=buf("small_bad", k, torch.bool)).logical_and_(small)
        n_small_bad = _count(small_bad)
        small_ok = torch.logical_xor(small, small_bad, out=small_bad) if n_small > n_small_bad else None
    elif n_small:
        small_ok = small
    for i, bound in enumerate(_WITHIN):
        # Tiny goldens cannot hold a relative precision (an fp16 subnormal has few bits): in the small-value
        # regime an element counts as within every relative bound when its absolute error is within the atol.
        if top < bound:
            s.within[i] += k
            continue
        within = torch.lt(rel, bound, out=mask)
        s.within[i] += _count(within if small_ok is None else within.logical_or_(small_ok))
    s.small += n_small
    s.small_bad += n_small_bad
    same_split = regime.small_value == lim.small_value
    if same_split:
        s.regime_small += n_small
        s.regime_abs_bad += (
            n_small_bad
            if regime.atol == lim.small_value_atol or not n_small or largest <= regime.atol
            else _count(torch.gt(a, regime.atol, out=mask).logical_and_(small))
        )
    else:  # the accumulative split: |golden| <= 1 by absolute error, the rest by relative error
        regime_small = torch.le(abs_g, regime.small_value, out=buf("regime_small", k, torch.bool))
        s.regime_small += _count(regime_small)
        if largest > regime.atol:
            s.regime_abs_bad += _count(torch.gt(a, regime.atol, out=mask).logical_and_(regime_small))
        if top > regime.rtol:
            normal = regime_small.logical_not_()
            s.regime_rel_bad += _count(torch.gt(rel, regime.rtol, out=mask).logical_and_(normal))
    if n_small == k:
        return
    # Relative errors are >= 0: zeros add nothing. where, in place, writes the same zeros as masked_fill_ without
    # its branch per element (twice as fast where half the goldens are small).
    normal_rel = torch.where(small, _ZERO, rel, out=rel) if n_small else rel
    s.rel_sums.append(float(normal_rel.sum()))
    top = float(normal_rel.amax()) if n_small else top
    s.rel_max = max(s.rel_max, top)
    if same_split and top > regime.rtol:
        s.regime_rel_bad += _count(torch.gt(normal_rel, regime.rtol, out=mask))


def _ulp(a: torch.Tensor, abs_g: torch.Tensor, largest: float, lim: DtypeLimits, buf: _Buffers) -> torch.Tensor:
    """ULP error: |t - g| over the target dtype's spacing at g, 2^(eb - mantissa bits), eb = floor(log2 |g|)
    clamped to the dtype's smallest normal exponent. eb is read from |g|'s exponent bits (exact where log2 can
    round up just below a power of two, and a fifth of its cost); the spacing is built as a float64 from its bits
    where it is a normal float64 (every dtype but float64 itself) and |t - g| cannot overflow."""
    k = a.numel()
    lowest = lim.min_eb + 1023 - lim.mantissa_bits  # biased exponent of the smallest spacing
    if lowest < 1 or largest >= 2.0 ** (1023 - lim.mantissa_bits):
        eb = torch.clamp(torch.floor(torch.log2(abs_g)), min=lim.min_eb)  # log2(0) = -inf is clamped to min_eb
        return a * 2.0**lim.mantissa_bits * torch.exp2(-eb)  # split: 2^(52 + 1022) would overflow
    exponent = torch.bitwise_right_shift(abs_g.view(torch.int64), 52, out=buf("ulp", k, torch.int64))
    spacing = exponent.clamp_(min=lim.min_eb + 1023).sub_(lim.mantissa_bits).bitwise_left_shift_(52)
    return torch.div(a, spacing.view(torch.float64), out=spacing.view(torch.float64))


def _cosine_parts(
    t: torch.Tensor, g: torch.Tensor, g_max: float, largest: float, buf: _Buffers
) -> tuple[float, float, float, float, float]:
    """A chunk's dot product and norms with the scales they were taken at: (dot, |a|, |b|, a's scale, b's scale).
    Where no square can overflow or vanish (|t| <= g_max + largest and g_max within 2^+-400, both norms non-zero)
    they are taken on the values themselves; elsewhere after scaling each side by its own max-abs, two more passes
    that only huge or tiny outputs need."""
    if _SAFE_LOW < g_max and g_max + largest < _SAFE_HIGH:
        parts = float(torch.dot(t, g)), float(torch.linalg.vector_norm(t)), float(torch.linalg.vector_norm(g))
        if parts[1] and parts[2]:
            return (*parts, 1.0, 1.0)
    low, high = torch.aminmax(t)
    t_max = max(-float(low), float(high))
    k = t.numel()  # a side that is all zeros stays zeros (divided by 1) and its scale 0 adds nothing
    a, b = torch.div(t, t_max or 1.0, out=buf("x", k)), torch.div(g, g_max or 1.0, out=buf("y", k))
    return float(torch.dot(a, b)), float(torch.linalg.vector_norm(a)), float(torch.linalg.vector_norm(b)), t_max, g_max


_SAFE_LOW, _SAFE_HIGH = 2.0**-400, 2.0**400  # float64 squares of values in this range neither overflow nor vanish


def _cosine(parts: list[tuple[float, float, float, float, float]], m: int) -> float | None:
    """The chunks' parts brought to one scale per side (the largest any chunk used) and combined (one chunk: its
    own value). A side whose every part is zero is the zero vector."""
    if m < 2:
        return None
    a_zero, b_zero = all(p[1] == 0 for p in parts), all(p[2] == 0 for p in parts)
    if a_zero or b_zero:
        return 1.0 if a_zero and b_zero else 0.0
    if len(parts) == 1:
        dot, norm_a, norm_b = parts[0][:3]
    else:
        t_max, g_max = max(p[3] for p in parts), max(p[4] for p in parts)
        dot = math.fsum(p[0] * (p[3] / t_max) * (p[4] / g_max) for p in parts)
        norm_a = math.sqrt(math.fsum((p[1] * (p[3] / t_max)) ** 2 for p in parts))
        norm_b = math.sqrt(math.fsum((p[2] * (p[4] / g_max)) ** 2 for p in parts))
    return max(-1.0, min(1.0, dot / (norm_a * norm_b)))


def _metrics(s: _Totals, n: int) -> Metrics:
    m = s.finite
    common = dict(
        binary_mismatch=s.mismatched / n,
        # As msprobe: the share of non-finite positions (on either side) that do not agree.
        inf_nan_err_ratio=_share(s.bad, n - m),
        nonfinite_mismatches=s.bad,
        first_nonfinite_mismatch=s.first_bad,
        overflows=s.overflows,
    )
    if m == 0:
        return Metrics(**common)
    normal = m - s.small
    return Metrics(
        cosine=_cosine(s.cosine, m),
        max_abs_err=s.max_abs,
        rel_within_1e2=s.within[0] / m,
        rel_within_1e3=s.within[1] / m,
        rel_within_1e4=s.within[2] / m,
        error_balance=abs(s.balance) / n,  # over every position, as msprobe (not over the finite ones)
        rmse=math.sqrt(math.fsum(s.squares) / m),
        small_value_err_ratio=_share(s.small_bad, s.small),
        max_rel_err=s.rel_max if normal else 0.0,
        mean_rel_err=math.fsum(s.rel_sums) / normal if normal else 0.0,
        rel_err_ratio=_share(s.regime_rel_bad, m - s.regime_small),
        abs_err_ratio=_share(s.regime_abs_bad, s.regime_small),
        ulp_max=s.ulp_max,
        ulp_mean=math.fsum(s.ulp_sums) / m,
        ulp_above_ratio=s.ulp_above / m,
        worst_index=s.worst,
        golden_max_abs=s.golden_max,
        count=m,
        **common,
        **_measure_parts(s, m),
    )


def _measure_parts(s: _Totals, m: int) -> dict[str, float]:
    """The default standard's normwise, worst-element and lean measures' sums, where every position was finite
    (elsewhere the verdict measures on the positions it keeps)."""
    if s.scale is None:
        return {}
    return dict(
        error_norm=math.sqrt(math.fsum(s.squares)),
        golden_norm=s.golden_norm,
        error_sum=math.fsum(s.error_sums),
        scaled_worst=s.scaled_worst,
    )


def exact_metrics(target: torch.Tensor, golden: torch.Tensor) -> Metrics:
    """Integer and bool outputs: the share of differing elements, and how far apart they are."""
    t = target.detach().cpu().reshape(-1)
    g = golden.detach().cpu().reshape(-1)
    n = t.numel()
    if n == 0:
        return Metrics(binary_mismatch=0.0)
    differ = t != g
    k = int(differ.sum())
    if t.dtype == torch.bool or g.dtype == torch.bool:
        return Metrics(binary_mismatch=k / n, worst_index=int(differ.nonzero()[0, 0]) if k else None)
    # Order is judged on the integers themselves; float64 only measures the distance (exact up to 2^53).
    greater, less = int((t > g).sum()), int((t < g).sum())
    abs_err = (t.to(torch.float64) - g.to(torch.float64)).abs().masked_fill(~differ, -1.0)
    worst = int(abs_err.argmax())
    return Metrics(
        binary_mismatch=k / n,
        max_abs_err=max(float(abs_err[worst]), 0.0),
        error_balance=abs(greater - less) / n,
        worst_index=worst if k else None,
    )
