"""Per-dtype numbers of msprobe's precision standards (REFERENCE §3), in one place for every standard."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from precheck.core.dtypes import is_floating, itemsize, real


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

    @property
    def unit(self) -> float:
        """The unit roundoff u (2^-8 bf16, 2^-11 fp16, 2^-24 fp32): the largest relative error of one rounding
        to nearest, the unit the default standard and the expert advice count roundings in."""
        return 2.0 ** -(self.mantissa_bits + 1)


_LIMITS = {
    "torch.float16": DtypeLimits(2**-10, 2**-16, 2**-10, -14, 10, 1, 2**-8, 2**-11),
    "torch.bfloat16": DtypeLimits(2**-10, 2**-16, 2**-8, -126, 7, 1, 2**-7, 2**-8),
    "torch.float32": DtypeLimits(2**-20, 2**-30, 2**-20, -126, 23, 32, 2**-11, 2**-14),
    # msprobe has no float64 row; these follow the float32 row's pattern, scaled to 52 mantissa bits.
    "torch.float64": DtypeLimits(2**-49, 2**-59, 2**-49, -1022, 52, 32, 2**-40, 2**-43),
}


@dataclass(frozen=True)
class Regime:
    """How the threshold columns split elements: |golden| <= small_value is judged by absolute error against
    atol, the rest by relative error against rtol. The absolute-threshold standard and the accumulative one
    (small_value 1, both tolerances the accumulative bound) split differently."""

    small_value: float
    atol: float
    rtol: float


def absolute_regime(dtype: Any) -> Regime:
    lim = limits_for(dtype)
    return Regime(lim.small_value, lim.small_value_atol, lim.rtol)


def accumulative_regime(dtype: Any) -> Regime:
    bound = limits_for(dtype).accumulative_bound
    return Regime(1.0, bound, bound)


def limits_for(dtype: Any) -> DtypeLimits:
    """Limits of a floating dtype (a torch.dtype or its name); complex dtypes use their component's, narrow
    floats (fp8) use fp16's."""
    name = real(dtype)
    return _LIMITS.get(name, _LIMITS["torch.float16"] if itemsize(name) == 1 else _LIMITS["torch.float32"])


def is_low_precision(dtype: Any) -> bool:
    """fp16, bf16 and narrower: the dtypes msprobe's cascade judges with the looser rule."""
    name = real(dtype)
    return is_floating(name) and itemsize(name) <= 2
