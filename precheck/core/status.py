"""How several statuses combine into one; their spelling and order are precheck/schema.py's."""

from __future__ import annotations

from collections.abc import Iterable

from precheck.schema import SEVERITY as _RANK
from precheck.schema import Status

PASS, WARNING, ERROR, SKIP = Status.PASS, Status.WARNING, Status.ERROR, Status.SKIP


def worst(statuses: Iterable[str]) -> Status:
    """error > warning > pass; SKIP only when nothing was compared (SKIP never hides a graded output)."""
    return Status(max(statuses, key=_RANK.__getitem__, default=SKIP))


def at_or_below(status: str, threshold: str) -> bool:
    """True when ``status`` is as bad as ``threshold`` or worse (the --fail-on gate)."""
    return status != SKIP and _RANK[status] >= _RANK[threshold]
