"""precheck: API precision pre-check and test generation for PyTorch.

Library entry points: :func:`precheck.run_ut.run_ut` (the main job), :mod:`precheck.grader` (metrics and
verdicts for your own tests), :func:`precheck.dump.records.load_dump` (msprobe dumps as ordered cases),
:func:`precheck.record` (a training step recorded as msprobe records it, without msprobe).
"""

from typing import Any

from precheck.version import __version__

__all__ = ["__version__", "load", "record"]


def __getattr__(name: str) -> Any:
    """``precheck.record`` imports torch only when used: the commands that read CSVs import precheck too."""
    if name == "record":
        from precheck.recording.api import record

        return record
    if name == "load":
        from precheck.frames import load

        return load
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
