"""Whether a recorded tensor's statistics are those of a copy of another recorded tensor, torch-free: run_ut's step
grades a received tensor by it (precheck.ranks.p2p_stats) and the step compare tells which message a receive's
record holds by it (precheck.compare.steps).

msprobe computes each rank's statistics of the same values the same way, so a copy's Max and Min are equal to the
bit and its Mean and Norm equal within the rounding of a reduction taken in another order (a few float32 eps of
their scale); a non-finite statistic is a copy's only where the other is the same non-finite value.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["STATS", "copied_stat", "recorded_copy"]

STATS = ("Max", "Min", "Mean", "Norm")
_EPS32 = 2.0**-23
_ROUNDING = 8  # eps of the statistic's scale a reduction in another order may move a Mean or a Norm


def copied_stat(stat: str, got: float, sent: float, norm: float | None, numel: int) -> bool:
    """Whether statistic ``stat`` of a copy reads ``got`` where the tensor copied (``numel`` elements, its Norm
    ``norm``) read ``sent``: the same non-finite value, Max and Min to the bit, Mean and Norm within a reduction's
    rounding."""
    if not (math.isfinite(got) and math.isfinite(sent)):
        return got == sent or (math.isnan(got) and math.isnan(sent))
    if stat in ("Max", "Min"):
        return got == sent
    rms = norm / math.sqrt(numel) if norm is not None and math.isfinite(norm) and numel else 0.0
    scale = abs(sent) if stat == "Norm" else abs(sent) + rms
    return abs(got - sent) <= _ROUNDING * _EPS32 * scale


def recorded_copy(got: Any, sent: Any) -> bool:
    """Whether the recorded tensor ``got`` (msprobe's dict of a tensor: dtype, shape, Max, Min, Mean, Norm) reads as a
    copy of ``sent``: the same dtype and shape, and every statistic recorded of both a copy's, at least one."""
    if not (isinstance(got, dict) and isinstance(sent, dict)) or "shape" not in sent:
        return False
    if (got.get("dtype"), got.get("shape")) != (sent.get("dtype"), sent.get("shape")):
        return False
    numel = _numel(sent.get("shape"))
    norm = _number(sent.get("Norm"))
    pairs = [(s, _number(got.get(s)), _number(sent.get(s))) for s in STATS]
    known = [(s, a, b) for s, a, b in pairs if a is not None and b is not None]
    return bool(known) and numel is not None and all(copied_stat(s, a, b, norm, numel) for s, a, b in known)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _numel(shape: Any) -> int | None:
    if not (isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in shape)):
        return None
    return math.prod(shape)
