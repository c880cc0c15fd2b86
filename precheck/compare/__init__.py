"""Comparing two dumps of the same step: msprobe's compare CSV, the first record where the runs part, and the
pre-check of the records found there. Imports no torch (precheck.compare.suspects runs run_ut when asked)."""
