"""Why a row got its verdict, as a code: the report's advice, api_precision_compare's second stage and the console
read these, never the Message, whose prose is for people and may change with any release.

Torch-free: the commands that only read results (report, api_precision_compare) import it. A run keeps each
details row's code, the standard that judged it and the honest multiple in a file beside its CSVs
(precheck/report/reasons.py); the msprobe CSVs themselves are unchanged.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """What decided a row. A ``str`` so a code read back from a run's reasons file compares equal to this."""

    PASSED = "passed"  # the standard's rule held
    EMPTY = "empty"  # an output without elements
    # The default standard (grader/honest.py): the user's rule failed, the dtype's rounding explains it (warning) ...
    WITHIN_ROUNDING = "within_rounding"  # every element within one rounding
    HONEST_EXPLAINS = "honest_explains"  # no worse than an honest kernel of the dtype
    # ... or the target is materially worse than an honest kernel (error), by the first measure that says so.
    HONEST_NORMWISE = "honest_normwise"
    HONEST_WORST_ELEMENT = "honest_worst_element"
    HONEST_LEAN = "honest_lean"
    RULE_FAILED = "rule_failed"  # a metrics-only standard (Comparison.standard names it) failed
    NONFINITE_MISMATCH = "nonfinite_mismatch"  # inf/nan where the golden holds another value
    EXACT_MISMATCH = "exact_mismatch"  # integer or bool elements that differ
    VALUE_MISMATCH = "value_mismatch"  # a non-tensor output unequal to the golden's
    TYPE_MISMATCH = "type_mismatch"  # a tensor on one side only
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_KIND = "dtype_kind"  # floating point on one side only: msprobe's check_dtype_comparable
    STRUCTURE_MISMATCH = "structure_mismatch"  # output or gradient counts, keys, a gradient on one side only
    RANDOM_LAW = "random_law"  # a random op judged by the law of its outputs (grader/stochastic.py)
    STATISTICS = "statistics"  # graded on a dump's recorded statistics only (grader/statistics.py)
    TARGET_FAILED = "target_failed"  # the API crashed or its target run failed: one error row
    SKIPPED = "skipped"  # not graded; the Message says why
    TIMED_OUT = "timed_out"  # not graded: the check ran past its time limit


HONEST = frozenset(
    {Reason.WITHIN_ROUNDING, Reason.HONEST_EXPLAINS, Reason.HONEST_NORMWISE, Reason.HONEST_WORST_ELEMENT,
     Reason.HONEST_LEAN}
)  # fmt: skip
"""The codes of the default standard's honest-kernel verdict (not a rule's)."""
BEYOND_ROUNDING = frozenset({Reason.HONEST_NORMWISE, Reason.HONEST_WORST_ELEMENT, Reason.HONEST_LEAN})
"""Errors: the target is materially worse than an honest kernel of its dtype."""
