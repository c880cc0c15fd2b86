"""Per-dtype numbers of msprobe's precision standards (REFERENCE §3), in one place for every standard."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DtypeLimits:
    small_value: float        # |golden| at or below this is judged by absolute error
    small_value_atol: float   # absolute error allowed in the small-value regime
    rtol: float               # relative error allowed by the absolute-threshold standard
    min_eb: int               # smallest exponent of a normal number (ULP of subnormals)
    mantissa_bits: int
    ulp_threshold: float      # an element "above threshold" has more ULP error than this


_LIMITS = {
    torch.float16: DtypeLimits(2**-10, 2**-16, 2**-10, -14, 10, 1),
    torch.bfloat16: DtypeLimits(2**-10, 2**-16, 2**-8, -126, 7, 1),
    torch.float32: DtypeLimits(2**-20, 2**-30, 2**-20, -126, 23, 32),
    # msprobe has no float64 row; these follow the float32 row's pattern, scaled to 52 mantissa bits.
    torch.float64: DtypeLimits(2**-49, 2**-59, 2**-49, -1022, 52, 32),
}


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
