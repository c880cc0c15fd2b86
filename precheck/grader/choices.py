"""The standards' names and the default thresholds, torch-free: the command line's grammar and the options of a
run name them before (or without) anything is graded."""

from __future__ import annotations

DEFAULT_COSINE = 0.99
DEFAULT_MAX_ABS = 1e-4
# The default standard's error: a normwise error above this multiple of an honest kernel's (grader/honest.py); the
# report draws it as a line.
NORMWISE_FACTOR = 2.0

# The Message of every row graded by a random op's law (grader/stochastic.py): a second stage lets it stand.
RANDOM_VERDICT = "random op, checked statistically"

# Each name is a function of standards.py (STANDARDS), "auto" routes per API class; tests/test_standards.py holds
# the two lists equal, and register_standard adds a user's standard to both. The command line's choices are this
# list itself.
STANDARD_CHOICES: list[str] = [
    "default",
    "msprobe",
    "absolute",
    "ulp",
    "binary",
    "thousandth",
    "accumulative",
    "benchmark",
    "auto",
]
