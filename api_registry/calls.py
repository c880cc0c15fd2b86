"""Reading one argument of a recorded call, whether the user passed it by position or by name.

Every per-call rule of the registry (is this dropout call random, along which dim did this sort run) needs it;
the defaults are the API's own, so a call that left the argument out reads the value the API used.
"""

from __future__ import annotations

from typing import Any


def arg(args: tuple, kwargs: dict, pos: int | None, name: str, default: Any = None) -> Any:
    """The argument at position ``pos`` or keyword ``name``; ``pos`` None: keyword-only."""
    if name in kwargs:
        return kwargs[name]
    return args[pos] if pos is not None and len(args) > pos else default
