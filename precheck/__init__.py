"""precheck: API precision pre-check and test generation for PyTorch.

Library entry points: :func:`precheck.run_ut.run_ut` (the main job), :mod:`precheck.grader` (metrics and
verdicts for your own tests), :func:`precheck.dump.records.load_dump` (msprobe dumps as ordered cases).
"""

__version__ = "0.1.0"
