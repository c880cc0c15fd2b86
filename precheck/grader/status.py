"""Statuses as msprobe spells them, and how several of them combine into one."""

from __future__ import annotations

from collections.abc import Iterable

PASS, WARNING, ERROR, SKIP = "pass", "warning", "error", "SKIP"
_RANK = {SKIP: -1, PASS: 0, WARNING: 1, ERROR: 2}


def worst(statuses: Iterable[str]) -> str:
    """error > warning > pass; SKIP only when nothing was compared (SKIP never hides a graded output)."""
    return max(statuses, key=_RANK.__getitem__, default=SKIP)


def at_or_below(status: str, threshold: str) -> bool:
    """True when ``status`` is as bad as ``threshold`` or worse (the --fail-on gate)."""
    return status != SKIP and _RANK[status] >= _RANK[threshold]
