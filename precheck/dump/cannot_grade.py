"""Why a call is graded only across ranks and cannot be: one exception for collectives, sends and receives and
whole DTensor calls alike.

A cross-rank call has more ways to be ungradable than a rank's own call (a rank's dump is missing, a shard is torn,
the ranks disagree on what was called), and each becomes SKIP rows with a reason code, never a raise out of the
run. The grading modules raise this where they find such a case and catch it where the call's rows are written.
"""

from __future__ import annotations

from precheck.core.reasons import Reason

__all__ = ["CannotGrade"]


class CannotGrade(Exception):
    """A call graded across ranks that cannot be: its rows are SKIP with this reason (the message) and ``code``."""

    def __init__(self, why: str, code: Reason = Reason.SKIP_INPUTS) -> None:
        super().__init__(why)
        self.code = code
