"""Tensors rebuilt from the statistics a dump recorded (Max, Min, Mean, Norm), for statistics-mode dumps.

What a generated tensor guarantees, where the four statistics are jointly feasible:
- its max and min equal the recorded Max and Min exactly, at random positions;
- its mean and L2 norm match Mean and Norm after rounding to the dtype: the mean within 1e-3 relative (or within
  what one rounding step at the tensor's RMS can resolve, for a mean that is zero up to float32 noise), the norm
  within 1e-3 relative;
- the other elements follow a Beta law scaled to [Min, Max] with the recorded mean and variance, so values spread
  like real activations rather than sitting on the bounds (the incumbent draws uniform values and ignores Mean
  and Norm).
Where the statistics are not jointly feasible, the closest feasible tensor is built and a note says so.
Non-finite statistics (Max = inf, Min = -inf, nan) mean the tensor holds a few such values, not that it is
filled with them. Every tensor has its own random stream, keyed by the run seed, the API's full name and the
argument's place, so resumed, filtered, reordered or parallel runs give each API the same inputs.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace

import numpy as np
import torch

from precheck.compat import nextafter
from precheck.dump.records import Stats, TensorSpec
from precheck.inputs import synth_large
from precheck.inputs.synth_large import LARGE

_CORRECTION_ROUNDS = 200
_SMALL = 64  # up to this size, rounding's effect on the norm is repaired by a local search


def rng_for(seed: int, case_name: str, where: str) -> np.random.Generator:
    """An independent random stream per (run seed, API, argument)."""
    digest = hashlib.sha256(f"{seed}\x00{case_name}\x00{where}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:16], "little"))


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def max_below_min(stats: Stats) -> str:
    """``Max 1 below Min 2`` where a record's bounds are crossed (no tensor has them), else empty."""
    if stats.max is not None and stats.min is not None and stats.max < stats.min:
        return f"Max {stats.max:g} below Min {stats.min:g}"
    return ""


def odd_moments(spec: TensorSpec) -> list[str]:
    """A record's Mean or Norm that no tensor within its bounds has: infinite beside a finite Max and Min (a forged
    record, or a recorder's sum overflowed where the tensor's dtype cannot explain it). Said in the row's Message,
    so a verdict never rests on such a record without a note. A sum the dtype's range explains is no oddity: a
    mask of finfo(float16).min has Mean -inf when the recorder sums it in float16, beside Max 0 and Min -65504, and
    a pass row carried that note. (A Norm below 0 is msprobe's for a 0-d tensor: its value, not an oddity.)"""
    stats = spec.stats
    if not (_finite(stats.max) and _finite(stats.min)):
        return []
    top = max(abs(stats.max), abs(stats.min)) if spec.dtype.is_floating_point else 0.0
    biggest = torch.finfo(spec.dtype).max if spec.dtype.is_floating_point else math.inf
    overflows = {"Mean": top * spec.numel > biggest, "Norm": top * top * spec.numel > biggest}
    moments = (("Mean", stats.mean), ("Norm", stats.norm))
    return [
        f"{name} {value:g} beside a finite Max and Min"
        for name, value in moments
        if _infinite(value) and not overflows[name]
    ]


def _infinite(x: float | None) -> bool:
    return x is not None and math.isinf(x)


def synthesize(
    spec: TensorSpec, rng: np.random.Generator, int_floor: int | None = None, true_count: int | None = None
) -> tuple[torch.Tensor, str]:
    """A tensor matching ``spec``'s shape, dtype and statistics, and a note (empty when all were met).

    ``int_floor``: for integer arguments whose negative Min is a sentinel (cross-entropy's ignore_index), values
    other than the sentinel are drawn from [int_floor, Max] so every class id stays valid. ``true_count``: for a
    bool mask whose share of True was not recorded, the count the call's recorded output implies. Statistics no
    tensor can hold are said first: Max below Min is read as the bounds swapped, an infinite Mean or Norm beside
    finite bounds is left out.
    """
    n = spec.numel
    if n == 0:
        return torch.empty(spec.shape, dtype=spec.dtype), ""
    said = ""
    odd = list(filter(None, [max_below_min(spec.stats), *odd_moments(spec)]))
    if odd:
        honoured = _honoured(spec.stats)
        fixes = ["Max and Min read swapped"] if max_below_min(spec.stats) else []
        fixes += [
            f"{name} left out"
            for name in ("Mean", "Norm")
            if getattr(honoured, name.lower()) is None and getattr(spec.stats, name.lower()) is not None
        ]
        said = f"statistics no tensor holds ({', '.join(odd)}): {', '.join(fixes)}"
        spec = replace(spec, stats=honoured)
    if spec.dtype == torch.bool:
        values, note = _bools(n, spec, rng, true_count)
    elif spec.dtype.is_floating_point or spec.dtype.is_complex:
        values, note = _floats(n, spec, rng)
    else:
        values, note = _integers(n, spec, rng, int_floor)
    return values.reshape(spec.shape), "; ".join(filter(None, [said, note]))


def _honoured(stats: Stats) -> Stats:
    """The statistics a tensor can hold: Max and Min in order, no infinite Mean or Norm beside finite bounds."""
    hi, lo = (stats.min, stats.max) if max_below_min(stats) else (stats.max, stats.min)
    bounded = _finite(hi) and _finite(lo)
    mean = None if bounded and _infinite(stats.mean) else stats.mean
    norm = None if bounded and _infinite(stats.norm) else stats.norm
    return Stats(hi, lo, mean, norm)


def _bools(n: int, spec: TensorSpec, rng: np.random.Generator, count: int | None) -> tuple[torch.Tensor, str]:
    s = spec.stats
    any_true = bool(s.max) if s.max is not None else True
    any_false = not s.min if s.min is not None else True
    share = s.mean if _finite(s.mean) else (0.5 if any_true and any_false else float(any_true))
    k = count if count is not None and not _finite(s.mean) and 0 <= count <= n else round(share * n)
    k = min(max(k, 1 if any_true else 0), n - 1 if any_false else n)
    out = np.zeros(n, dtype=bool)
    out[rng.permutation(n)[:k]] = True
    return torch.from_numpy(out), ""


def _integers(n: int, spec: TensorSpec, rng: np.random.Generator, floor: int | None) -> tuple[torch.Tensor, str]:
    s = spec.stats
    info = torch.iinfo(spec.dtype)
    hi = int(s.max) if _finite(s.max) else min(info.max, 100)
    lo = int(s.min) if _finite(s.min) else max(info.min, 0)
    lo, hi = min(lo, hi), max(lo, hi)  # a default bound beyond the recorded one (a recorded Max < Min is swapped)
    note = "" if _finite(s.max) and _finite(s.min) else f"integer bounds missing: drawn in [{lo}, {hi}]"
    body_lo = max(lo, floor) if floor is not None and floor <= hi else lo
    if _finite(s.mean) and _finite(s.norm) and body_lo == lo:
        values, moment_note = _moment_matched(n, float(hi), float(lo), s.mean, s.norm, rng)
        out = _round_keeping_sum(torch.from_numpy(values), torch.int64, n * s.mean)
        note = note or moment_note
    else:
        out = torch.from_numpy(rng.integers(body_lo, hi, size=n, endpoint=True))
        order = rng.permutation(n)
        out[order[0]] = hi
        if n > 1:
            out[order[1]] = lo
    return out.clamp(lo, hi).to(spec.dtype), note


def _floats(n: int, spec: TensorSpec, rng: np.random.Generator) -> tuple[torch.Tensor, str]:
    s = spec.stats
    real_dtype = spec.dtype.to_real() if spec.dtype.is_complex else spec.dtype
    specials: list[float] = []
    if s.max == math.inf:
        specials.append(math.inf)
    if s.min == -math.inf:
        specials.append(-math.inf)
    if any(v is not None and math.isnan(v) for v in (s.max, s.min, s.mean, s.norm)) and n > len(specials):
        specials.append(math.nan)
    specials = specials[:n]
    m_fin = n - len(specials)
    if specials:
        hi, lo = _finite_bounds(s.max, s.min, s.mean, s.norm, n)
        if m_fin == 0:
            values = np.empty(0)
        elif m_fin == 1:  # one finite slot: the recorded finite bound, if there is one
            values = np.array([s.min if _finite(s.min) else s.max if _finite(s.max) else 0.0])
        else:
            values, _ = _moment_matched(m_fin, hi, lo, None, None, rng)
        note = f"statistics hold inf/nan: placed {len(specials)} non-finite value(s)" + (
            f", the rest drawn in [{lo:g}, {hi:g}]" if m_fin else ""
        )
        full = np.empty(n)
        order = rng.permutation(n)
        full[order[: len(specials)]] = specials
        full[order[len(specials) :]] = values
        out = torch.from_numpy(full).to(real_dtype)
    elif not (_finite(s.max) and _finite(s.min)):
        hi, lo = _finite_bounds(s.max, s.min, s.mean, s.norm, n)
        values, _ = _moment_matched(n, hi, lo, s.mean, s.norm, rng, _work_dtype(real_dtype))
        out = torch.from_numpy(values).to(real_dtype)
        note = f"Max/Min not recorded: drawn in [{lo:g}, {hi:g}] (Mean -/+ 3 standard deviations from Mean/Norm)"
    else:
        values, note = _moment_matched(n, s.max, s.min, s.mean, s.norm, rng, _work_dtype(real_dtype))
        target_sum = n * s.mean if _finite(s.mean) else float(values.sum())
        out = _round_keeping_sum(torch.from_numpy(values), real_dtype, target_sum)
        if _finite(s.mean) and _finite(s.norm) and n <= _SMALL:
            out = _polish_small(out, n * s.mean, s.norm * s.norm)
    return out.to(spec.dtype), note


def _work_dtype(dtype: torch.dtype) -> type:
    """What a large tensor's values are computed in: float32 unless the dtype holds more."""
    return np.float64 if dtype.itemsize > 4 else np.float32


def _finite_bounds(
    mx: float | None, mn: float | None, mean: float | None, norm: float | None, n: int
) -> tuple[float, float]:
    """Bounds for values whose recorded Max or Min is missing or not finite: the known bound, else Mean -/+ 3
    standard deviations (from Mean and Norm), else [-1, 1]."""
    hi = mx if _finite(mx) else None
    lo = mn if _finite(mn) else None
    if _finite(mean) and _finite(norm):
        sd = math.sqrt(max(norm * norm / n - mean * mean, 0.0)) or abs(mean) or 1.0
        guess_hi, guess_lo = mean + 3 * sd, mean - 3 * sd
    else:
        known = abs(hi if hi is not None else lo if lo is not None else 1.0) or 1.0
        guess_hi, guess_lo = known, -known
    hi = guess_hi if hi is None else hi
    lo = guess_lo if lo is None else lo
    return (hi, lo) if hi >= lo else (lo, hi)


def _moment_matched(
    n: int,
    mx: float,
    mn: float,
    mean: float | None,
    norm: float | None,
    rng: np.random.Generator,
    work: type = np.float64,
) -> tuple[np.ndarray, str]:
    """``n`` values in random order: Max and Min once each, the rest matching the moments. Float64, or ``work``
    above ``LARGE`` elements, where the body is drawn and fitted at a linear cost (``synth_large``)."""
    if n == 1:
        value = mx if mx == mn else (mean if _finite(mean) and mn <= mean <= mx else mx)
        note = "" if mx == mn else "one element cannot hold different Max and Min: used Max"
        return np.array([value]), note
    if mx == mn:
        ok = (mean is None or math.isclose(mean, mx, rel_tol=1e-3, abs_tol=1e-12)) and (
            norm is None or math.isclose(norm, abs(mx) * math.sqrt(n), rel_tol=1e-3, abs_tol=1e-12)
        )
        return np.full(n, mx), "" if ok else "Max == Min: constant tensor, Mean/Norm not consistent with it"
    r = n - 2
    note = ""
    if mean is None or not _finite(mean):
        a = (mx + mn) / 2
        v = ((mx - mn) / 6) ** 2
    else:
        a = (n * mean - mx - mn) / r if r else (mx + mn) / 2
        if norm is None or not _finite(norm):
            v = ((mx - mn) / 6) ** 2
        else:
            b = (norm * norm - mx * mx - mn * mn) / r if r else 0.0
            v = b - a * a
    if r:
        a_clamped = min(max(a, mn), mx)
        v_max = (mx - a_clamped) * (a_clamped - mn)
        v_clamped = min(max(v, 0.0), v_max)
        scale = max(abs(mx), abs(mn)) or 1.0
        # v = b - a^2 cancels: judge it against the size of the terms that cancel, not against v_max alone.
        if abs(a_clamped - a) > 1e-9 * scale or abs(v_clamped - v) > 1e-6 * max(v_max, abs(v), a * a, 1e-300):
            note = "infeasible statistics (Mean/Norm cannot be met inside [Min, Max]): closest feasible tensor built"
        a, v = a_clamped, v_clamped
    if n > LARGE:
        body, met = _large_body(r, mx, mn, a, v, rng, work)
        values = synth_large.place_bounds(body, mx, mn, rng)
    else:
        body = _bounded_sample(r, mx, mn, a, v, rng)
        met = not r or bool(note) or _moments_met(body, a, v, mx, mn)
        values = np.concatenate([[mx, mn], body])[rng.permutation(n)]
    if r and not note and not met:
        note = "Mean/Norm met only approximately (the values crowd the bounds)"
    return values, note


def _body_kind(r: int, mx: float, mn: float, a: float, v: float) -> str:
    """How ``r`` values in [mn, mx] with mean ``a`` and variance ``v`` are drawn: ``constant`` where no spread is
    left (up to float64 noise), ``two-valued`` where the variance is the most the bounds allow, else ``beta``."""
    width = mx - mn
    p = (a - mn) / width
    if r == 1 or v <= 1e-12 * width * width or p <= 0 or p >= 1:
        return "constant"
    return "two-valued" if v >= (mx - a) * (a - mn) * (1 - 1e-9) else "beta"


def _large_body(
    r: int, mx: float, mn: float, a: float, v: float, rng: np.random.Generator, work: type
) -> tuple[np.ndarray, bool]:
    """``_bounded_sample`` above ``LARGE`` elements, in ``work``, and whether the moments were met."""
    kind = _body_kind(r, mx, mn, a, v)
    if kind == "constant":
        return np.full(r, a, dtype=work), True
    if kind == "two-valued":
        return synth_large.two_valued(r, mx, mn, (a - mn) / (mx - mn), rng, work), True
    return synth_large.beta_body(r, mx, mn, a, v, rng, work)


def _moments_met(y: np.ndarray, a: float, v: float, mx: float, mn: float) -> bool:
    scale = max(abs(mx), abs(mn), 1e-300)
    return abs(y.mean() - a) <= 1e-9 * scale and abs(y.var() - v) <= 1e-7 * max(v, a * a, 1e-300)


def _bounded_sample(r: int, mx: float, mn: float, a: float, v: float, rng: np.random.Generator) -> np.ndarray:
    """``r`` values in [mn, mx] with mean ``a`` and variance ``v`` (population), as exactly as float64 allows."""
    if r == 0:
        return np.empty(0)
    width = mx - mn
    p = (a - mn) / width
    kind = _body_kind(r, mx, mn, a, v)
    if kind == "constant":
        return np.full(r, a)
    if kind == "two-valued":
        # Two-valued (a mask, a clamp at both ends): exactly the counts the mean asks for, then the pair fix.
        k = int(round(p * r))
        y = np.where(np.arange(r) < k, mx, mn).astype(float)[rng.permutation(r)]
        return _exact_pair(y, r * a, r * (v + a * a), mx, mn)
    s = p * (1 - p) * width * width / v - 1  # alpha + beta of the Beta law with this mean and variance
    for _ in range(8):  # a few elements piled on a bound may leave no room to fit: draw again
        y = mn + width * rng.beta(max(p * s, 1e-3), max((1 - p) * s, 1e-3), size=r)
        y = _exact_pair(_fit_moments(y, a, v, mx, mn), r * a, r * (v + a * a), mx, mn)
        if _moments_met(y, a, v, mx, mn):
            break
    return y


def _fit_moments(y: np.ndarray, a: float, v: float, mx: float, mn: float) -> np.ndarray:
    """Rescale the values strictly inside the bounds so that, with those sitting on a bound, the mean and
    variance are met. Values pushed onto a bound stay there; if the bounds hold too much, everything shrinks
    toward the mean a little and the fit goes on."""
    r = y.size
    total, squares = r * a, r * (v + a * a)
    for _ in range(_CORRECTION_ROUNDS):
        hi, lo = y >= mx, y <= mn
        free = ~(hi | lo)
        nf = int(free.sum())
        if nf < 2:
            break
        n_hi, n_lo = int(hi.sum()), int(lo.sum())
        af = (total - n_hi * mx - n_lo * mn) / nf
        vf = (squares - n_hi * mx * mx - n_lo * mn * mn) / nf - af * af
        if not (mn < af < mx) or vf < 0:
            y = a + (y - a) * 0.95  # too much on the bounds: release some
            continue
        yf = y[free]
        sd = yf.std()
        y[free] = np.clip(af + (yf - yf.mean()) * (math.sqrt(vf) / sd) if sd > 0 else np.full(nf, af), mn, mx)
        if _moments_met(y, a, v, mx, mn):
            break
    return y


def _exact_pair(y: np.ndarray, total: float, squares: float, mx: float, mn: float) -> np.ndarray:
    """Absorb what is left of the sum and sum of squares into two values, solved in closed form
    (x1 + x2 = S, x1^2 + x2^2 = Q), trying pairs until both land inside the bounds."""
    r = y.size
    if r < 2:
        return y
    s_all, q_all = float(y.sum()), float((y * y).sum())
    distance = np.abs(y - total / r)
    k = min(16, r - 1)  # the values nearest the mean and the farthest: an O(n) selection, no full sort
    candidates = np.unique(
        np.concatenate([np.argpartition(distance, k)[: k + 1], np.argpartition(-distance, k)[: k + 1]])
    )
    for i in range(len(candidates)):
        for j in range(i + 1, len(candidates)):
            a_i, a_j = candidates[i], candidates[j]
            if a_i == a_j:
                continue
            s_need = total - (s_all - y[a_i] - y[a_j])
            q_need = squares - (q_all - y[a_i] ** 2 - y[a_j] ** 2)
            disc = 2 * q_need - s_need * s_need
            if disc < 0:
                continue
            root = math.sqrt(disc)
            x1, x2 = (s_need + root) / 2, (s_need - root) / 2
            if mn <= x2 and x1 <= mx:
                y = y.copy()
                y[a_i], y[a_j] = x1, x2
                return y
    return y


def _round_keeping_sum(values: torch.Tensor, dtype: torch.dtype, target_sum: float) -> torch.Tensor:
    """Round float64 ``values`` to ``dtype``, then move some elements to their other neighbour so that the sum
    (hence the mean) is kept. Elements at the placed Max and Min never move, nor does anything cross them. Above
    ``LARGE`` elements, in one partial pass (``synth_large``)."""
    if values.numel() > LARGE:
        return synth_large.round_keeping_sum(values, dtype, target_sum)
    out = values.to(dtype)
    hi, lo = values.max(), values.min()
    residual = target_sum - float(out.double().sum())
    for _ in range(20):  # each pass settles the residual to below the next smaller step size
        if residual == 0:
            break
        if dtype.is_floating_point:
            other = nextafter(out, torch.full_like(out, math.copysign(math.inf, residual)))
        else:
            other = out + (1 if residual > 0 else -1)
        step = (other.double() - out.double()).abs()
        movable = (
            (out.double() != hi)
            & (out.double() != lo)
            & (other.double() <= hi)
            & (other.double() >= lo)
            & (step > 0)
            & (step <= abs(residual))
        )
        if not bool(movable.any()):
            break
        idx = movable.nonzero().reshape(-1)  # positions are in random order already: no sort needed
        take = int(torch.searchsorted(torch.cumsum(step[idx], 0), abs(residual), right=True))
        chosen = idx[: max(take, 1)]
        out[chosen] = other[chosen]
        residual = target_sum - float(out.double().sum())
    return out


def _polish_small(out: torch.Tensor, total: float, squares: float) -> torch.Tensor:
    """Small tensors: rounding each of a few elements moves the norm by more than 1e-3 (a bf16 step is 2^-8
    relative). Move single elements, or pairs in opposite directions, to their rounding neighbours while that
    brings the sum and the sum of squares closer to the recorded ones. Max and Min stay where they are."""
    hi, lo = out.max(), out.min()
    scale_sum = max(abs(total), math.sqrt(squares / out.numel()) * torch.finfo(out.dtype).eps * out.numel(), 1e-300)

    def cost(total_now: torch.Tensor, squares_now: torch.Tensor) -> torch.Tensor:
        return torch.maximum((total_now - total).abs() / scale_sum, (squares_now - squares).abs() / squares)

    x = out.double()
    n = x.numel()
    same = torch.eye(n, dtype=torch.bool).reshape(-1)
    for _ in range(16):
        now = cost(x.sum(), x.pow(2).sum())
        if float(now) < 1e-4:  # well inside the 1e-3 promise: nothing to repair
            break
        up = nextafter(out, torch.full_like(out, math.inf)).double()
        down = nextafter(out, torch.full_like(out, -math.inf)).double()
        fixed = (x == hi.double()) | (x == lo.double())
        up = torch.where(fixed | (up > hi.double()), x, up)
        down = torch.where(fixed | (down < lo.double()), x, down)
        # Every candidate by what it adds to the sum and the sum of squares: one element up, one down, or a
        # pair (i up, j down), n^2 numbers instead of n^3.
        d_up, d_down = up - x, down - x
        q_up, q_down = up * up - x * x, down * down - x * x
        pair_sum = (d_up[:, None] + d_down[None, :]).reshape(-1)
        pair_squares = (q_up[:, None] + q_down[None, :]).reshape(-1)
        costs = cost(
            x.sum() + torch.cat([d_up, d_down, pair_sum]), x.pow(2).sum() + torch.cat([q_up, q_down, pair_squares])
        )
        costs[2 * n :][same] = math.inf  # i up and i down is no move
        best = int(costs.argmin())
        if float(costs[best]) >= float(now):
            break
        if best < n:
            x[best] = up[best]
        elif best < 2 * n:
            x[best - n] = down[best - n]
        else:
            i, j = divmod(best - 2 * n, n)
            x[i], x[j] = up[i], down[j]
        out = x.to(out.dtype)
    return out
