"""A transfer graded on what a statistics dump recorded: a received tensor is a copy of the sent one, so its dtype,
shape and statistics are the sent tensor's.

msprobe computes each rank's statistics of the same values the same way, so a copy's Max and Min are equal to the
bit and its Mean and Norm equal within the rounding of a reduction taken in another order (the rule of
precheck.dump.copied_stats, which the step compare shares). A statistic that is not finite where the sent one is
finite (or the reverse, or another non-finite value) is an error: the message says which statistic broke, as
recorded on each side.
"""

from __future__ import annotations

import math

from precheck.core.comparison import Comparison
from precheck.core.reasons import Reason
from precheck.core.status import ERROR, PASS, Status
from precheck.dump.cannot_grade import CannotGrade
from precheck.dump.copied_stats import STATS as _STATS
from precheck.dump.copied_stats import copied_stat
from precheck.dump.decode import TensorSpec

__all__ = ["copied_statistics", "same_statistics"]


def copied_statistics(target: TensorSpec, golden: TensorSpec, source: str) -> Comparison:
    """The verdict on ``target``, recorded as a copy of ``golden`` (``source`` names it: "the tensor rank 0:
    Distributed.isend.0 sent")."""
    if (target.dtype, target.shape) != (golden.dtype, golden.shape):
        why = f"statistics dump: {_shown(target)}, {source} {_shown(golden)}"
        return _verdict(ERROR, why, target, golden, Reason.SHAPE_MISMATCH)
    checked, broken = [], []
    for stat in _STATS:
        got, sent = _stat(target, stat), _stat(golden, stat)
        if got is None or sent is None:
            continue  # not recorded (an empty tensor's, an integer tensor's Mean) or not a number: nothing to check
        if _equal(stat, got, sent, golden):
            checked.append(stat)
        else:
            broken.append(f"{stat} {got!r}, there {sent!r}")
    if broken:
        return _verdict(ERROR, f"statistics dump: differs from {source}: {'; '.join(broken)}", target, golden)
    if not checked and target.numel:
        raise CannotGrade(f"no statistic is recorded both of the tensor and of {source}")
    what = ", ".join(checked) if checked else "empty tensor: dtype and shape"
    return _verdict(PASS, f"statistics dump: {what} equal to {source}'s", target, golden)


def same_statistics(a: TensorSpec, b: TensorSpec) -> bool:
    """Whether two recorded tensors have the same dtype, shape and statistics to the bit (nan equal to nan)."""
    if (a.dtype, a.shape) != (b.dtype, b.shape):
        return False
    return all(_stat(a, s) == _stat(b, s) or _both_nan(_stat(a, s), _stat(b, s)) for s in _STATS)


def _verdict(status: Status, message: str, target: TensorSpec, golden: TensorSpec,
             reason: Reason = Reason.STATISTICS) -> Comparison:  # fmt: skip
    return Comparison(status, message, None, golden_dtype=str(golden.dtype), target_dtype=str(target.dtype),
                      shape=target.shape, standard="statistics", reason=reason)  # fmt: skip


def _stat(spec: TensorSpec, stat: str) -> float | None:
    value = getattr(spec.stats, stat.lower())
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _both_nan(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and math.isnan(a) and math.isnan(b)


def _equal(stat: str, got: float | None, sent: float | None, golden: TensorSpec) -> bool:
    """Whether a received statistic is the sent one (precheck.dump.copied_stats)."""
    return got is not None and sent is not None and copied_stat(stat, got, sent, _stat(golden, "Norm"), golden.numel)


def _shown(spec: TensorSpec) -> str:
    return f"{str(spec.dtype).removeprefix('torch.')} {tuple(spec.shape)}"
