"""How the recorded program is ending, as its exit handlers see it: read by the launcher's hooks (auto) and by a
recorder the program opened itself and never closed (session), which close its step's dump as partial or whole."""

from __future__ import annotations

import sys

__all__ = ["uncaught"]


def uncaught() -> str | None:
    """Why the program ends before its step did: the exception that ends it, which Python has printed and kept in
    sys.last_value before the exit handlers run (None at an ordinary exit, sys.exit included)."""
    ended = getattr(sys, "last_value", None)
    return None if ended is None else f"the program ended by {type(ended).__name__} before the step did"
