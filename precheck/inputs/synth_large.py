"""The large-tensor half of statistics synthesis (``synth``): the same guarantees, at a cost linear in the size.

Above ``LARGE`` elements the small path's exactness machinery (float64 Beta draws refitted round after round, a
full permutation, then up to 20 full float64 passes to keep the sum through rounding) cost 13 s of one core and
8 float64 copies of the tensor per 10M elements. Here:
- the body is drawn in float32 (float64 only where the tensor's dtype needs it) by inverse transform through the
  quantile function of a Beta sample of ``_TABLE`` values, interpolated linearly: the same law, continuous values,
  one random index and one random fraction per element;
- the mean and variance are met by an affine map of the values strictly inside the bounds, computed from two
  float64-accumulated sums (a few in-place passes; one round unless many values sit on a bound);
- rounding to the dtype is unbiased at this size, so keeping the sum moves only as many elements as its residual
  needs, taken from the front of the (already random) order, block by block.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from precheck.compat import nextafter

LARGE = 1 << 16  # above this many elements; below, the exact small path (and the pinned CSVs) stay as they are
_TABLE = 1 << 16  # Beta draws whose quantile function the body follows (indexed by uint16)
_BLOCK = 1 << 16  # elements per block of a chunked pass
_FIT_ROUNDS = 32


def sums(values: np.ndarray) -> tuple[float, float]:
    """Sum and sum of squares, accumulated in float64 through numpy's buffered casts: no float64 copy, and no
    BLAS or intra-op threads (a worker has one core; their spinning cost 100x on a busy machine)."""
    total = float(np.sum(values, dtype=np.float64))
    return total, float(np.einsum("i,i->", values, values, dtype=np.float64))


def beta_body(
    r: int, mx: float, mn: float, a: float, v: float, rng: np.random.Generator, work: type
) -> tuple[np.ndarray, bool]:
    """``r`` values in [mn, mx] of dtype ``work`` following the Beta law with mean ``a`` and variance ``v``, their
    mean and variance met up to ``work``'s rounding (see ``fit``)."""
    width = mx - mn
    p = (a - mn) / width
    s = p * (1 - p) * width * width / v - 1  # alpha + beta of the Beta law with this mean and variance
    q = np.sort(rng.beta(max(p * s, 1e-3), max((1 - p) * s, 1e-3), size=_TABLE + 1))
    base = np.clip(mn + width * q - a, mn - a, mx - a)  # centred on the mean: sums of squares do not cancel
    slope = np.diff(base).astype(work)
    index = rng.integers(0, _TABLE, size=r, dtype=np.uint16)
    y = rng.random(r, dtype=np.float32).astype(work, copy=False)
    y *= slope[index]
    y += base[:-1].astype(work)[index]
    del index
    met = fit(y, v, mn - a, mx - a)
    y += a
    np.clip(y, mn, mx, out=y)  # adding the mean back may round one ulp past a bound
    return y, met


def fit(y: np.ndarray, v: float, lo: float, hi: float) -> bool:
    """Map the values of ``y`` strictly inside [lo, hi] affinely, in place, so that all of ``y`` has mean 0 and
    variance ``v``; values on a bound stay there, values pushed past one are clipped onto it and the next round
    refits the rest. Whether both were met (to 1e-6 of the bounds' scale and 1e-5 relative)."""
    r = y.size
    lo, hi = float(y.dtype.type(lo)), float(y.dtype.type(hi))  # the bounds as y's values hold them
    scale = max(abs(lo), abs(hi))
    for _ in range(_FIT_ROUNDS):
        total, squares = sums(y)
        mean, var = total / r, squares / r - (total / r) ** 2
        if abs(mean) <= 1e-6 * scale and abs(var - v) <= 1e-5 * v:
            return True
        free = y > lo
        free &= y < hi
        n_free = int(np.count_nonzero(free))
        n_hi = int(np.count_nonzero(y >= hi))
        n_lo = r - n_free - n_hi
        if n_free < 2:
            return False
        # What the free values must hold so that, with those on the bounds, the whole meets the target.
        free_mean = (total - n_hi * hi - n_lo * lo) / n_free
        free_var = (squares - n_hi * hi * hi - n_lo * lo * lo) / n_free - free_mean**2
        want_mean = -(n_hi * hi + n_lo * lo) / n_free
        want_var = (r * v - n_hi * hi * hi - n_lo * lo * lo) / n_free - want_mean**2
        if not lo < want_mean < hi or want_var <= 0 or free_var <= 0:
            y *= 0.95  # the bounds hold too much: release some toward the mean
            np.clip(y, lo, hi, out=y)
            continue
        np.subtract(y, free_mean, out=y, where=free)
        np.multiply(y, math.sqrt(want_var / free_var), out=y, where=free)
        np.add(y, want_mean, out=y, where=free)
        np.clip(y, lo, hi, out=y)
    return False


def two_valued(r: int, mx: float, mn: float, p: float, rng: np.random.Generator, work: type) -> np.ndarray:
    """``r`` values, round(p * r) of them ``mx`` and the rest ``mn``, in random order (a mask, a clamp at both
    ends): Bernoulli draws, then the surplus of one value turned into the other at the first places it sits."""
    k = int(round(p * r))
    high = rng.random(r, dtype=np.float32) < p
    surplus = int(np.count_nonzero(high)) - k
    side = surplus > 0
    start = 0
    while surplus:
        block = high[start : start + _BLOCK]
        places = np.flatnonzero(block == side)[: abs(surplus)]
        block[places] = not side
        surplus -= len(places) if side else -len(places)
        start += _BLOCK
    return np.where(high, work(mx), work(mn))


def place_bounds(body: np.ndarray, mx: float, mn: float, rng: np.random.Generator) -> np.ndarray:
    """The body with Max and Min added at two random places (the body's order is random already: two swaps)."""
    values = np.concatenate([np.array([mx, mn], dtype=body.dtype), body])
    for i in range(2):
        j = int(rng.integers(i, values.size))
        values[i], values[j] = values[j], values[i]
    return values


def round_keeping_sum(values: torch.Tensor, dtype: torch.dtype, target_sum: float) -> torch.Tensor:
    """Round ``values`` to ``dtype`` (to nearest), then move elements to their neighbour toward the sum's
    residual, from the front of the random order, until the mean is well inside its promise (1e-2 of what
    synth's docstring allows). Elements at the placed Max and Min never move, nor does anything cross them."""
    hi, lo = float(values.numpy().max()), float(values.numpy().min())
    floating = dtype.is_floating_point
    out = values.to(dtype) if floating else values.round_().to(dtype)
    total, squares = sums(out.numpy() if dtype.itemsize >= 4 else out.float().numpy())
    residual = target_sum - total
    eps = torch.finfo(dtype).eps if floating else 0.0
    tol = 1e-2 * max(1e-3 * abs(target_sum), eps * math.sqrt(out.numel() * squares)) if floating else 0.999
    start, size = 0, _BLOCK
    while abs(residual) > tol and start < out.numel():
        block = out[start : start + size]
        up = residual > 0
        other = (
            nextafter(block, torch.tensor(math.inf if up else -math.inf, dtype=dtype))
            if floating
            else (block + (1 if up else -1))
        )
        here, there = block.double(), other.double()
        step = (there - here).abs()
        movable = (here != hi) & (here != lo) & (there <= hi) & (there >= lo) & (step > 0) & (step <= abs(residual))
        idx = movable.nonzero().reshape(-1)
        take = int(torch.searchsorted(torch.cumsum(step[idx], 0), abs(residual), right=True))
        chosen = idx[:take]
        block[chosen] = other[chosen]
        residual -= math.copysign(float(step[chosen].sum()), residual)
        start, size = start + size, 2 * size
    return out
