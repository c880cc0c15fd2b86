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

import numpy as np
import torch

from precheck.dump import TensorSpec

_CORRECTION_ROUNDS = 60


def rng_for(seed: int, case_name: str, where: str) -> np.random.Generator:
    """An independent random stream per (run seed, API, argument)."""
    digest = hashlib.sha256(f"{seed}\x00{case_name}\x00{where}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:16], "little"))


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def synthesize(spec: TensorSpec, rng: np.random.Generator, int_floor: int | None = None) -> tuple[torch.Tensor, str]:
    """A tensor matching ``spec``'s shape, dtype and statistics, and a note (empty when all were met).

    ``int_floor``: for integer arguments whose negative Min is a sentinel (cross-entropy's ignore_index), values
    other than the sentinel are drawn from [int_floor, Max] so every class id stays valid.
    """
    n = spec.numel
    if n == 0:
        return torch.empty(spec.shape, dtype=spec.dtype), ""
    if spec.dtype == torch.bool:
        values, note = _bools(n, spec, rng)
    elif spec.dtype.is_floating_point or spec.dtype.is_complex:
        values, note = _floats(n, spec, rng)
    else:
        values, note = _integers(n, spec, rng, int_floor)
    return values.reshape(spec.shape), note


def _bools(n: int, spec: TensorSpec, rng: np.random.Generator) -> tuple[torch.Tensor, str]:
    s = spec.stats
    any_true = bool(s.max) if s.max is not None else True
    any_false = not s.min if s.min is not None else True
    share = s.mean if _finite(s.mean) else (0.5 if any_true and any_false else float(any_true))
    k = round(share * n)
    k = min(max(k, 1 if any_true else 0), n - 1 if any_false else n)
    out = np.zeros(n, dtype=bool)
    out[rng.permutation(n)[:k]] = True
    return torch.from_numpy(out), ""


def _integers(n: int, spec: TensorSpec, rng: np.random.Generator, floor: int | None) -> tuple[torch.Tensor, str]:
    s = spec.stats
    info = torch.iinfo(spec.dtype)
    hi = int(s.max) if _finite(s.max) else min(info.max, 100)
    lo = int(s.min) if _finite(s.min) else max(info.min, 0)
    note = "" if _finite(s.max) and _finite(s.min) else "integer bounds missing: drawn in [%d, %d]" % (lo, hi)
    if hi < lo:
        lo, hi = hi, lo
        note = "Max below Min: bounds swapped"
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
        hi, lo = _finite_bounds(s.max, s.min)
        values, _ = _moment_matched(m_fin, hi, lo, None, None, rng)
        note = f"statistics hold inf/nan: placed {len(specials)} non-finite value(s), the rest drawn in [{lo:g}, {hi:g}]"
        full = np.empty(n)
        order = rng.permutation(n)
        full[order[:len(specials)]] = specials
        full[order[len(specials):]] = values
        out = torch.from_numpy(full).to(real_dtype)
    elif not (_finite(s.max) and _finite(s.min)):
        values, _ = _moment_matched(n, *_finite_bounds(s.max, s.min), s.mean, s.norm, rng)
        out, note = torch.from_numpy(values).to(real_dtype), "Max/Min not recorded: bounds guessed from Mean/Norm"
    else:
        values, note = _moment_matched(n, s.max, s.min, s.mean, s.norm, rng)
        target_sum = n * s.mean if _finite(s.mean) else float(values.sum())
        out = _round_keeping_sum(torch.from_numpy(values), real_dtype, target_sum)
    return out.to(spec.dtype), note


def _finite_bounds(mx: float | None, mn: float | None) -> tuple[float, float]:
    """Bounds for the finite part when the recorded ones are not finite: mirror the known one, or [-1, 1]."""
    hi = mx if _finite(mx) else None
    lo = mn if _finite(mn) else None
    if hi is None and lo is None:
        return 1.0, -1.0
    if hi is None:
        hi = max(abs(lo), 1.0)
    if lo is None:
        lo = -max(abs(hi), 1.0)
    return (hi, lo) if hi >= lo else (lo, hi)


def _moment_matched(n: int, mx: float, mn: float, mean: float | None, norm: float | None,
                    rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """``n`` float64 values in random order: Max and Min once each, the rest matching the moments."""
    if n == 1:
        value = mx if mx == mn else (mean if _finite(mean) and mn <= mean <= mx else mx)
        note = "" if mx == mn else "one element cannot hold different Max and Min: used Max"
        return np.array([value]), note
    if mx == mn:
        ok = (mean is None or math.isclose(mean, mx, rel_tol=1e-3, abs_tol=1e-12)) and \
             (norm is None or math.isclose(norm, abs(mx) * math.sqrt(n), rel_tol=1e-3, abs_tol=1e-12))
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
        if abs(a_clamped - a) > 1e-9 * scale or abs(v_clamped - v) > 1e-6 * max(v_max, abs(v), 1e-300):
            note = ("infeasible statistics (Mean/Norm cannot be met inside [Min, Max]): "
                    "closest feasible tensor built")
        a, v = a_clamped, v_clamped
    body = _bounded_sample(r, mx, mn, a, v, rng)
    values = np.concatenate([[mx, mn], body])
    return values[rng.permutation(n)], note


def _bounded_sample(r: int, mx: float, mn: float, a: float, v: float, rng: np.random.Generator) -> np.ndarray:
    """``r`` values in [mn, mx] with mean ``a`` and variance ``v`` (population), as exactly as float64 allows."""
    if r == 0:
        return np.empty(0)
    width = mx - mn
    p = (a - mn) / width
    if v <= 0 or p <= 0 or p >= 1:
        return np.full(r, a)
    s = p * (1 - p) * width * width / v - 1   # alpha + beta of the Beta law with this mean and variance
    y = mn + width * rng.beta(max(p * s, 1e-3), max((1 - p) * s, 1e-3), size=r) if s > 0 else \
        np.where(rng.random(r) < p, mx, mn).astype(float)
    target_sd = math.sqrt(v)
    for _ in range(_CORRECTION_ROUNDS):
        sd = y.std()
        y = a + (y - y.mean()) * (target_sd / sd) if sd > 0 else np.full(r, a)
        np.clip(y, mn, mx, out=y)
        if abs(y.mean() - a) <= 1e-12 * (abs(a) + width) and abs(y.std() - target_sd) <= 1e-9 * (target_sd + 1e-300):
            break
    return y


def _round_keeping_sum(values: torch.Tensor, dtype: torch.dtype, target_sum: float) -> torch.Tensor:
    """Round float64 ``values`` to ``dtype``, then move some elements to their other neighbour so that the sum
    (hence the mean) is kept. Elements at the placed Max and Min never move, nor does anything cross them."""
    out = values.to(dtype)
    hi, lo = values.max(), values.min()
    residual = target_sum - float(out.double().sum())
    for _ in range(20):   # each pass settles the residual to below the next smaller step size
        if residual == 0:
            break
        if dtype.is_floating_point:
            other = torch.nextafter(out, torch.full_like(out, math.copysign(math.inf, residual)))
        else:
            other = out + (1 if residual > 0 else -1)
        step = (other.double() - out.double()).abs()
        movable = (out.double() != hi) & (out.double() != lo) & (other.double() <= hi) & (other.double() >= lo) \
            & (step > 0) & (step <= abs(residual))
        if not bool(movable.any()):
            break
        idx = movable.nonzero().reshape(-1)
        order = torch.argsort(step[idx], descending=True, stable=True)
        take = int(torch.searchsorted(torch.cumsum(step[idx][order], 0), abs(residual), right=True))
        chosen = idx[order[:max(take, 1)]]
        out[chosen] = other[chosen]
        residual = target_sum - float(out.double().sum())
    return out
