"""A statistics-only record graded on what it saved: its Max/Min/Mean/Norm against the golden's.

Four numbers can raise a suspicion but not prove an error, so no row here is worse than warning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from precheck.dump.records import TensorSpec
from precheck.grader.comparison import Comparison
from precheck.grader.limits import limits_for
from precheck.grader.status import PASS, WARNING, Status
from precheck.results import DetailRow, Direction

__all__ = ["StatisticsVerdict", "grade_statistics", "statistics_rows"]


@dataclass(frozen=True)
class StatisticsVerdict:
    status: Status
    message: str


def grade_statistics(spec: TensorSpec, golden: torch.Tensor) -> StatisticsVerdict:
    """A statistics-only record: its recorded Max/Min/Mean/Norm against the golden's. Four numbers can raise a
    suspicion but not prove an error, so the status is capped at warning."""
    g = golden.detach().to(torch.float64)
    if g.is_complex():
        g = torch.view_as_real(g)
    finite = g[torch.isfinite(g)]
    if finite.numel() == 0:
        return StatisticsVerdict(WARNING, "statistics only: the golden has no finite value to compare")
    ours = {
        "Max": float(finite.max()),
        "Min": float(finite.min()),
        "Mean": float(finite.mean()),
        "Norm": float(torch.linalg.vector_norm(finite)),
    }
    theirs = {"Max": spec.stats.max, "Min": spec.stats.min, "Mean": spec.stats.mean, "Norm": spec.stats.norm}
    scale = max(ours["Norm"] / math.sqrt(finite.numel()), 1e-30)
    tolerance = max(4 * limits_for(spec.dtype).rtol, 1e-3) if spec.dtype.is_floating_point else 0.0
    off = []
    for name, value in theirs.items():
        if value is None or not math.isfinite(value):
            continue
        error = abs(value - ours[name]) / max(abs(ours[name]), scale)
        if error > tolerance:
            off.append(f"{name} {value:.6g} vs golden {ours[name]:.6g}")
    prefix = "statistics only (graded on Max/Min/Mean/Norm, never worse than warning)"
    if off:
        return StatisticsVerdict(WARNING, f"{prefix}: " + "; ".join(off))
    return StatisticsVerdict(PASS, prefix)


def statistics_rows(api: str, direction: Direction, triples: list[tuple[int, Any, Any]]) -> list[DetailRow]:
    """(place, recorded spec, golden) -> a details row per tensor, graded on its statistics."""
    rows = []
    for i, spec, g in triples:
        if isinstance(spec, TensorSpec) and isinstance(g, torch.Tensor):
            verdict = grade_statistics(spec, g)
            comparison = Comparison(
                verdict.status, verdict.message, None, str(g.dtype), str(spec.dtype), spec.shape, "statistics"
            )
            rows.append(DetailRow(api, direction, i, comparison))
    return rows
