"""Every metric of the details CSV, computed in one vectorised float64 pass over a target and its golden.

Non-finite values are handled once, up front: positions where both sides hold the same inf or nan agree, every
other non-finite position counts in ``inf_nan_err_ratio``, and all error statistics are taken over the positions
where both sides are finite. A metric that is not defined for the output is None (a blank cell).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from precheck.grader.limits import Regime, absolute_regime, limits_for

_EPS = torch.finfo(torch.float64).eps


@dataclass(frozen=True)
class Metrics:
    cosine: float | None = None
    max_abs_err: float | None = None
    rel_within_1e2: float | None = None  # 双百指标: share with relative error < 1e-2 (small values: see below)
    rel_within_1e3: float | None = None  # 双千指标
    rel_within_1e4: float | None = None  # 双万指标
    binary_mismatch: float | None = None  # share not equal to the golden rounded to the target dtype
    error_balance: float | None = None
    rmse: float | None = None
    small_value_err_ratio: float | None = None
    max_rel_err: float | None = None
    mean_rel_err: float | None = None
    inf_nan_err_ratio: float | None = None
    rel_err_ratio: float | None = None
    abs_err_ratio: float | None = None
    ulp_max: float | None = None
    ulp_mean: float | None = None
    ulp_above_ratio: float | None = None
    # Where the largest absolute error lies (flat index into the compared tensor), for messages.
    worst_index: int | None = None
    nonfinite_mismatches: int = 0
    first_nonfinite_mismatch: int | None = None
    golden_max_abs: float | None = None  # largest finite |golden|: is the output zero at the dtype's scale?

    def columns(self) -> list[float | None]:
        """The 17 metric columns of the details CSV, in its order."""
        return [getattr(self, f.name) for f in fields(self)][:17]


def _flat64(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu()
    if t.is_complex():
        t = torch.view_as_real(t.to(torch.complex128).resolve_conj())  # fft outputs can be conjugate views
    return t.to(torch.float64).reshape(-1)


def _share(mask: torch.Tensor, n: int) -> float:
    return float(mask.sum()) / n if n else 0.0


def float_metrics(
    target: torch.Tensor, golden: torch.Tensor, target_dtype: torch.dtype, regime: Regime | None = None
) -> Metrics:
    """All metrics of a floating output; ``target_dtype`` sets the small-value, rtol and ULP rules, ``regime``
    the split of the threshold columns (default: the absolute-threshold standard's)."""
    t, g = _flat64(target), _flat64(golden)
    n = t.numel()
    if n == 0:
        return Metrics()
    lim = limits_for(target_dtype)
    regime = regime or absolute_regime(target_dtype)
    t_fin, g_fin = torch.isfinite(t), torch.isfinite(g)
    both_nan = torch.isnan(t) & torch.isnan(g)
    agree = (t == g) | both_nan
    bad_nonfinite = ~(t_fin & g_fin) & ~agree
    n_bad = int(bad_nonfinite.sum())
    first_bad = int(bad_nonfinite.nonzero()[0, 0]) if n_bad else None
    rounded = _flat64(golden.detach().cpu().to(target_dtype)) if target_dtype != torch.float64 else g
    binary_mismatch = _share(~((t == rounded) | both_nan), n)

    finite = t_fin & g_fin
    index = finite.nonzero().reshape(-1)
    tf, gf = t[finite], g[finite]
    m = tf.numel()
    # As msprobe: the share of non-finite positions (on either side) that do not agree.
    common = dict(
        binary_mismatch=binary_mismatch,
        inf_nan_err_ratio=_share(bad_nonfinite, n - int((t_fin & g_fin).sum())),
        nonfinite_mismatches=n_bad,
        first_nonfinite_mismatch=first_bad,
    )
    if m == 0:
        return Metrics(**common)
    diff = tf - gf
    abs_err = diff.abs()
    abs_g = gf.abs()
    rel = abs_err / (abs_g + _EPS)
    worst = int(abs_err.argmax())
    small = abs_g <= lim.small_value
    normal = ~small
    n_small, n_normal = int(small.sum()), int(normal.sum())
    t_small = abs_g <= regime.small_value  # the threshold columns' own split
    t_normal = ~t_small
    eb = torch.clamp(torch.floor(torch.log2(abs_g)), min=lim.min_eb)  # log2(0) = -inf is clamped to min_eb
    ulp = abs_err * 2.0**lim.mantissa_bits * torch.exp2(-eb)  # split: 2^(52 + 1022) would overflow
    rel_normal = rel[normal]
    # Tiny goldens cannot hold a relative precision (an fp16 subnormal has few bits): in the small-value regime
    # an element counts as within every relative bound when its absolute error is within the regime's atol.
    small_ok = small & (abs_err <= lim.small_value_atol)
    return Metrics(
        cosine=_cosine(tf, gf),
        max_abs_err=float(abs_err[worst]),
        rel_within_1e2=_share((rel < 1e-2) | small_ok, m),
        rel_within_1e3=_share((rel < 1e-3) | small_ok, m),
        rel_within_1e4=_share((rel < 1e-4) | small_ok, m),
        error_balance=abs(int((diff > 0).sum()) - int((diff < 0).sum())) / m,
        rmse=math.sqrt(float((diff * diff).mean())),
        small_value_err_ratio=_share(small & (abs_err > lim.small_value_atol), n_small),
        max_rel_err=float(rel_normal.max()) if n_normal else 0.0,
        mean_rel_err=float(rel_normal.mean()) if n_normal else 0.0,
        rel_err_ratio=_share(t_normal & (rel > regime.rtol), int(t_normal.sum())),
        abs_err_ratio=_share(t_small & (abs_err > regime.atol), int(t_small.sum())),
        ulp_max=float(ulp.max()),
        ulp_mean=float(ulp.mean()),
        ulp_above_ratio=_share(ulp > lim.ulp_threshold, m),
        worst_index=int(index[worst]),
        golden_max_abs=float(abs_g.max()),
        **common,
    )


def _cosine(t: torch.Tensor, g: torch.Tensor) -> float | None:
    """Cosine after scaling each side by its own max-abs (so huge values cannot overflow the dot product)."""
    if t.numel() < 2:
        return None
    t_max, g_max = float(t.abs().max()), float(g.abs().max())
    if t_max == 0 or g_max == 0:
        return 1.0 if t_max == g_max else 0.0
    a, b = t / t_max, g / g_max
    value = float(torch.dot(a, b) / (torch.linalg.vector_norm(a) * torch.linalg.vector_norm(b)))
    return max(-1.0, min(1.0, value))


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
