"""Per-dtype numbers of msprobe's precision standards (REFERENCE §3), in one place for every standard."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DtypeLimits:
    small_value: float  # |golden| at or below this is judged by absolute error
    small_value_atol: float  # absolute error allowed in the small-value regime
    rtol: float  # relative error allowed by the absolute-threshold standard
    min_eb: int  # smallest exponent of a normal number (ULP of subnormals)
    mantissa_bits: int
    ulp_threshold: float  # an element "above threshold" has more ULP error than this
    accumulative_bound: float  # reductions: the error bound of the accumulative standard
    ratio_floor: float  # benchmark standard: a reference error below this counts as this


_LIMITS = {
    torch.float16: DtypeLimits(2**-10, 2**-16, 2**-10, -14, 10, 1, 2**-8, 2**-11),
    torch.bfloat16: DtypeLimits(2**-10, 2**-16, 2**-8, -126, 7, 1, 2**-7, 2**-8),
    torch.float32: DtypeLimits(2**-20, 2**-30, 2**-20, -126, 23, 32, 2**-11, 2**-14),
    # msprobe has no float64 row; these follow the float32 row's pattern, scaled to 52 mantissa bits.
    torch.float64: DtypeLimits(2**-49, 2**-59, 2**-49, -1022, 52, 32, 2**-40, 2**-43),
}


@dataclass(frozen=True)
class Regime:
    """How the threshold columns split elements: |golden| <= small_value is judged by absolute error against
    atol, the rest by relative error against rtol. The absolute-threshold standard and the accumulative one
    (small_value 1, both tolerances the accumulative bound) split differently."""

    small_value: float
    atol: float
    rtol: float


def absolute_regime(dtype: torch.dtype) -> Regime:
    lim = limits_for(dtype)
    return Regime(lim.small_value, lim.small_value_atol, lim.rtol)


def accumulative_regime(dtype: torch.dtype) -> Regime:
    bound = limits_for(dtype).accumulative_bound
    return Regime(1.0, bound, bound)


def limits_for(dtype: torch.dtype) -> DtypeLimits:
    """Limits of a floating dtype; complex dtypes use their component's, narrow floats (fp8) use fp16's."""
    if dtype.is_complex:
        dtype = dtype.to_real()
    return _LIMITS.get(dtype, _LIMITS[torch.float16] if dtype.itemsize == 1 else _LIMITS[torch.float32])


def is_low_precision(dtype: torch.dtype) -> bool:
    """fp16, bf16 and narrower: the dtypes msprobe's cascade judges with the looser rule."""
    if dtype.is_complex:
        dtype = dtype.to_real()
    return dtype.is_floating_point and dtype.itemsize <= 2
