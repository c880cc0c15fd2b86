"""The grader: the metrics of msprobe's details CSV and the verdicts built on them, importable in any test.

from precheck.grader import compare, assert_precise
assert_precise(my_kernel(x), reference_fp64(x), standard="ulp")
"""

from precheck.grader.assertion import assert_precise
from precheck.grader.compare import Comparison, compare, compare_tree, judge
from precheck.grader.metrics import Metrics, exact_metrics, float_metrics
from precheck.grader.standards import CHOICES as STANDARD_CHOICES
from precheck.grader.standards import DEFAULT_COSINE, DEFAULT_MAX_ABS
from precheck.grader.status import ERROR, PASS, SKIP, WARNING, worst

__all__ = [
    "compare",
    "compare_tree",
    "assert_precise",
    "judge",
    "Comparison",
    "Metrics",
    "float_metrics",
    "exact_metrics",
    "worst",
    "PASS",
    "WARNING",
    "ERROR",
    "SKIP",
    "DEFAULT_COSINE",
    "DEFAULT_MAX_ABS",
    "STANDARD_CHOICES",
]
