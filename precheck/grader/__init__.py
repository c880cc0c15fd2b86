"""The grader: the metrics of msprobe's details CSV and the verdicts built on them, importable in any test."""
from precheck.grader.compare import DEFAULT_COSINE, DEFAULT_MAX_ABS, Comparison, compare, judge
from precheck.grader.metrics import Metrics, exact_metrics, float_metrics
from precheck.grader.status import ERROR, PASS, SKIP, WARNING, worst

__all__ = ["compare", "judge", "Comparison", "Metrics", "float_metrics", "exact_metrics", "worst",
           "PASS", "WARNING", "ERROR", "SKIP", "DEFAULT_COSINE", "DEFAULT_MAX_ABS"]
