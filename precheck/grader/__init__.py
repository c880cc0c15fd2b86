"""The grader: the metrics of msprobe's details CSV and the verdicts built on them, importable in any test.

from precheck.grader import grade, assert_precise
assert_precise(my_kernel(x), reference_fp64(x), standard="ulp")

The names below load on first use (PEP 562), so that reading a status or a :class:`Comparison` (the result
model, the commands that only read CSVs) never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from precheck.core.comparison import Comparison, Metrics
    from precheck.core.status import ERROR, PASS, SKIP, WARNING, Status, worst
    from precheck.grader.assertion import assert_precise
    from precheck.grader.choices import DEFAULT_COSINE, DEFAULT_MAX_ABS, STANDARD_CHOICES
    from precheck.grader.honest import honest_run
    from precheck.grader.metrics import exact_metrics, float_metrics
    from precheck.grader.verdict import compare, compare_tree, grade, grade_tree, judge

__all__ = [
    "grade",
    "grade_tree",
    "compare",
    "compare_tree",
    "judge",
    "assert_precise",
    "honest_run",
    "Comparison",
    "Metrics",
    "float_metrics",
    "exact_metrics",
    "worst",
    "Status",
    "PASS",
    "WARNING",
    "ERROR",
    "SKIP",
    "DEFAULT_COSINE",
    "DEFAULT_MAX_ABS",
    "STANDARD_CHOICES",
]
_HOME = {  # where each public name lives: a module of the grader, or of core by its full name
    "grade": "verdict",
    "grade_tree": "verdict",
    "compare": "verdict",  # grade's older name
    "compare_tree": "verdict",  # grade_tree's older name
    "judge": "verdict",
    "assert_precise": "assertion",
    "honest_run": "honest",
    "Comparison": "precheck.core.comparison",
    "Metrics": "precheck.core.comparison",
    "float_metrics": "metrics",
    "exact_metrics": "metrics",
    "worst": "precheck.core.status",
    "Status": "precheck.core.status",
    "PASS": "precheck.core.status",
    "WARNING": "precheck.core.status",
    "ERROR": "precheck.core.status",
    "SKIP": "precheck.core.status",
    "DEFAULT_COSINE": "choices",
    "DEFAULT_MAX_ABS": "choices",
    "STANDARD_CHOICES": "choices",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home if "." in (home := _HOME[name]) else f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
