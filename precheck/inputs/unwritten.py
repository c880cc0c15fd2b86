"""A recorded input whose statistics read as memory no call wrote, rather than as a value of the training.

A pipeline stage's receive buffer read before its receive completed, or a buffer narrowed before a collective
fills it, is recorded as whatever the allocator's block held: random bits, which as floats are mostly tiny or
huge. The huge ones say so: a bound past 2^64 (1.8e19) is a value whose square float32 cannot hold (the
recorder's Norm is inf beside a finite Max), which no activation, weight or gradient of a training reaches, and
no constant a program writes is there but the dtype's extreme (``finfo.min`` masks) and round powers of ten
(``-1e30`` masks). A call graded on such inputs is graded at no scale of the training: an absolute threshold such
as the default standard's max abs error (1e-4) then measures the garbage's magnitude, not the kernel, and fails an
exact kernel by its rounding alone (an fp32 linear on 1.7e28 rounds by 1e20). The scale-free verdicts (cosine,
the honest kernel's) still grade it (precheck.execution.check).

The tiny ones (Max 3e-41) are left alone: nothing tells them from small values, and no threshold fails them.
"""

from __future__ import annotations

import math

import torch

from precheck.dump.records import TensorSpec

__all__ = ["UNSQUARABLE", "unwritten"]

UNSQUARABLE = 2.0**64  # ~1.8e19: from here on a value's square overflows float32 (3.4e38)

# The extremes of the float dtypes (a mask of finfo(float32).min kept in bf16 reads as bf16's) and powers of ten:
# what a program writes on purpose, in whichever dtype the tensor holds it.
_EXTREMES = tuple(torch.finfo(d).max for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64))


def unwritten(spec: TensorSpec) -> str:
    """Why ``spec``'s recorded statistics read as memory no call wrote (``reads as ...``), or empty where
    they read as values: a floating tensor with a finite Max or Min past :data:`UNSQUARABLE` that is no
    constant a program writes."""
    if not spec.dtype.is_floating_point or spec.dtype.is_complex:
        return ""
    stats = spec.stats
    bounds = (("Max", stats.max), ("Min", stats.min))
    odd = [f"{name} {value:.3g}" for name, value in bounds if _garbage(value, spec.dtype)]
    if not odd:
        return ""
    norm = f", Norm {stats.norm:g}" if stats.norm is not None and not math.isfinite(stats.norm) else ""
    return (
        f"reads as uninitialised memory, a buffer read before it was written (recorded {' and '.join(odd)}{norm}: "
        f"past {UNSQUARABLE:.2g}, where no value of a training is and no constant a program writes)"
    )


def _garbage(value: float | None, dtype: torch.dtype) -> bool:
    if value is None or not math.isfinite(value) or abs(value) < UNSQUARABLE:
        return False
    held = abs(value)
    if any(held == _held(extreme, dtype) for extreme in _EXTREMES):
        return False
    power = round(math.log10(held))
    return held != _held(10.0**power, dtype)


def _held(value: float, dtype: torch.dtype) -> float:
    """``value`` as ``dtype`` holds it (inf past its range), back as a Python float."""
    return float(torch.tensor(value, dtype=torch.float64).to(dtype))
