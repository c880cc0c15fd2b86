"""Statuses as msprobe spells them, and how several of them combine into one."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class Status(StrEnum):
    """A verdict on an output or an API. A ``str`` so that a status read back from a CSV (``"pass"``) and one
    computed here compare equal and are written as msprobe writes them."""

    PASS = "pass"
    WARNING = "warning"
    ERROR = "error"
    SKIP = "SKIP"


PASS, WARNING, ERROR, SKIP = Status.PASS, Status.WARNING, Status.ERROR, Status.SKIP
_RANK: dict[str, int] = {SKIP: -1, PASS: 0, WARNING: 1, ERROR: 2}


def worst(statuses: Iterable[str]) -> Status:
    """error > warning > pass; SKIP only when nothing was compared (SKIP never hides a graded output)."""
    return Status(max(statuses, key=_RANK.__getitem__, default=SKIP))


def at_or_below(status: str, threshold: str) -> bool:
    """True when ``status`` is as bad as ``threshold`` or worse (the --fail-on gate)."""
    return status != SKIP and _RANK[status] >= _RANK[threshold]
