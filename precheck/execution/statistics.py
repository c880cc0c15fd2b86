"""A statistics-only record graded on what it saved: its Max/Min/Mean/Norm against the golden's.

Four numbers can raise a suspicion but not prove an error, so no row here is worse than warning, but for one
that is proof: a NaN or inf statistic says the output held one, and where the golden's statistic is finite that
is an error, as run_ut grades a tensor (an inf where the golden's, rounded to the dtype, is that inf too is the
dtype's overflow: a warning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from precheck.core.comparison import Comparison
from precheck.core.reasons import Reason
from precheck.core.status import ERROR, PASS, SKIP, WARNING, Status
from precheck.dump.records import TensorSpec
from precheck.grader.limits import limits_for
from precheck.inputs.synth import max_below_min, odd_moments
from precheck.results import DetailRow, Direction
from precheck.walk import flatten

__all__ = [
    "StatisticsVerdict",
    "contradiction",
    "crossed",
    "grade_statistics",
    "recorded_output_notes",
    "statistics_rows",
]


@dataclass(frozen=True)
class StatisticsVerdict:
    status: Status
    message: str
    reason: Reason = Reason.STATISTICS


def grade_statistics(spec: TensorSpec, golden: torch.Tensor) -> StatisticsVerdict:
    """A statistics-only record: its recorded Max/Min/Mean/Norm against the golden's. Four numbers can raise a
    suspicion but not prove an error, so the status is capped at warning (but for a NaN or inf statistic the
    golden does not explain: :func:`_nonfinite`). A complex output is graded on its
    modulus: msprobe records a complex tensor's Max/Min/Mean of ``abs`` (pytorch_processor), and casting it to a
    real dtype would silently drop the imaginary part."""
    g = golden.detach()
    g = (g.abs() if g.is_complex() else g).to(torch.float64)
    summed = _summed_by_msprobe(spec, g)
    nonfinite = _nonfinite(spec, g, summed)
    if nonfinite is not None:
        return nonfinite
    finite = g[torch.isfinite(g)]
    if finite.numel() == 0:
        return StatisticsVerdict(WARNING, "statistics only: the golden has no finite value to compare")
    ours = {
        "Max": float(finite.max()),
        "Min": float(finite.min()),
        "Mean": float(finite.mean()),
        "Norm": float(torch.linalg.vector_norm(finite)),
    }
    theirs = _statistics(spec)
    scale = max(ours["Norm"] / math.sqrt(finite.numel()), 1e-30)
    tolerance = max(4 * limits_for(spec.dtype).rtol, 1e-3) if spec.dtype.is_floating_point else 0.0
    off, compared = [], {name: value for name, value in theirs.items() if value is not None and math.isfinite(value)}
    if not compared:  # "pass" means graded: four blank or infinite numbers grade nothing
        why = (
            "left blank"
            if all(value is None for value in theirs.values())
            else "blank, or an infinite sum msprobe made"
        )
        return StatisticsVerdict(
            SKIP, f"statistics only: not graded, none of Max/Min/Mean/Norm recorded to compare ({why})",
            Reason.SKIP_RECORDED_OUTPUT,
        )  # fmt: skip
    for name, value in compared.items():
        error = abs(value - ours[name]) / max(abs(ours[name]), scale)
        if error > tolerance:
            off.append(f"{name} {value:.6g} vs golden {ours[name]:.6g}")
    prefix = "statistics only (graded on Max/Min/Mean/Norm, never worse than warning)"
    if off:
        return StatisticsVerdict(WARNING, f"{prefix}: " + "; ".join(off))
    return StatisticsVerdict(PASS, prefix)


def _statistics(spec: TensorSpec) -> dict[str, float | None]:
    return {"Max": spec.stats.max, "Min": spec.stats.min, "Mean": spec.stats.mean, "Norm": spec.stats.norm}


def _nonfinite(spec: TensorSpec, g: torch.Tensor, summed: list[str]) -> StatisticsVerdict | None:
    """The verdict on a recorded NaN or inf statistic where the golden's (over its whole tensor) is finite: an
    error, or a warning where the golden explains each as an overflow of the recorded dtype (its statistic, or
    the statistic of the golden rounded to that dtype, is that inf or NaN); None when there is none (the finite
    statistics are graded as before). ``summed``: the infinite Mean or Norm that msprobe's own sum makes of the
    golden's values (:func:`_summed_by_msprobe`), no overflow of the tensor: left ungraded."""
    if g.numel() == 0:
        return None
    rounding = spec.dtype.to_real() if spec.dtype.is_complex else spec.dtype
    rounded = g.to(rounding).to(torch.float64) if rounding.is_floating_point else g
    errors: list[str] = []
    overflows: list[str] = []
    for name, value in _statistics(spec).items():
        ours = _STATISTIC[name](g)
        if not isinstance(value, (int, float)) or math.isfinite(value) or not math.isfinite(ours):
            continue
        if name in summed:
            continue
        said = f"{name} {value} vs golden {ours:.6g}"
        explained = (
            (_STATISTIC[name](rounded), float(torch.tensor(ours).to(rounding))) if rounding.is_floating_point else ()
        )
        (overflows if any(_same(value, e) for e in explained) else errors).append(said)
    if errors:
        message = "statistics: a non-finite value the golden does not hold: " + "; ".join(errors + overflows)
        return StatisticsVerdict(ERROR, message, Reason.NONFINITE_MISMATCH)
    if overflows:
        top = torch.finfo(rounding).max
        message = f"statistics: overflow, {'; '.join(overflows)}, the golden beyond {rounding}'s range ({top:.6g})"
        return StatisticsVerdict(WARNING, message, Reason.OVERFLOW)
    return None


_SUMMED = {"Mean": torch.mean, "Norm": torch.linalg.vector_norm}


def _summed_by_msprobe(spec: TensorSpec, g: torch.Tensor) -> list[str]:
    """The recorded infinite Mean and Norm that msprobe's own sum gives the golden's values, finite in the recorded
    dtype: it sums in that dtype, so a mask of its lowest value is recorded with a Mean of -inf. The tensor did not
    overflow; --target recorded graded such a mask's output an error ("a non-finite value the golden does not
    hold")."""
    recorded = _statistics(spec)
    infinite = [name for name in _SUMMED if isinstance(value := recorded[name], float) and math.isinf(value)]
    if not infinite or not spec.dtype.is_floating_point or spec.dtype.is_complex or g.numel() == 0:
        return []
    held = g.to(spec.dtype)
    if not bool(torch.isfinite(held).all()):
        return []
    return [name for name in infinite if float(_SUMMED[name](held)) == recorded[name]]


_STATISTIC = {
    "Max": lambda t: float(t.max()),
    "Min": lambda t: float(t.min()),
    "Mean": lambda t: float(t.mean()),
    "Norm": lambda t: float(torch.linalg.vector_norm(t)),
}


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _kind(dtype: torch.dtype) -> str:
    """What a dtype holds, whatever its width (a bf16 record, a CPU run in float32): bool, integer, floating or
    complex."""
    if dtype == torch.bool:
        return "bool"
    return "complex" if dtype.is_complex else "floating" if dtype.is_floating_point else "integer"


def contradiction(spec: Any, made: Any, dtypes: bool = False) -> str:
    """Why a recorded output cannot be the output the call made: another shape, another kind of dtype (``dtypes``:
    where ``made`` is the call's own run, not the float64 golden's), or a Max below its Min; empty when it can be."""
    if not isinstance(spec, TensorSpec):
        return ""
    if isinstance(made, torch.Tensor) and tuple(made.shape) != tuple(spec.shape):
        return f"shape {spec.shape}, the call makes {tuple(made.shape)}"
    if dtypes and isinstance(made, torch.Tensor) and _kind(made.dtype) != _kind(spec.dtype):
        return f"dtype {spec.dtype}, the call makes {made.dtype}"
    return max_below_min(spec.stats)


def crossed(spec: Any) -> bool:
    """A recorded output whose Max is below its Min: no tensor has its statistics, so they are not graded."""
    return isinstance(spec, TensorSpec) and bool(max_below_min(spec.stats))


def recorded_output_notes(outputs: Any, made: list, dtypes: bool = False) -> list[str]:
    """What the recorded outputs say that the call (``made``) contradicts, or that contradicts itself (an infinite
    Mean or Norm beside finite bounds), one note per output, for the row's Message."""
    notes = []
    for i, (spec, value) in enumerate(zip(flatten(outputs), made)):
        if not isinstance(spec, TensorSpec):
            continue
        found = "; ".join(filter(None, [contradiction(spec, value, dtypes), *odd_moments(spec)]))
        if found:
            notes.append(f"recorded output {i}: {found}")
    return notes


def statistics_rows(api: str, direction: Direction, triples: list[tuple[int, Any, Any]]) -> list[DetailRow]:
    """(place, recorded spec, golden) -> a details row per tensor, graded on its statistics."""
    rows = []
    for i, spec, g in triples:
        if isinstance(spec, TensorSpec) and isinstance(g, torch.Tensor):
            verdict = grade_statistics(spec, g)
            comparison = Comparison(
                verdict.status,
                verdict.message,
                None,
                golden_dtype=str(g.dtype),
                target_dtype=str(spec.dtype),
                shape=spec.shape,
                standard="statistics",
                reason=verdict.reason,
            )
            rows.append(DetailRow(api, direction, i, comparison))
    return rows
