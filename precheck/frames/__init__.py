"""The readers of a run's files into a pandas DataFrame: run_ut's CSVs (``run``), a compare's (``compare``) and
the reasons file beside them (``reasons``). Torch-free, and pandas is imported only when a frame is built.

A layer of its own, under compare and report: a compare's summary and the HTML report both read frames, and
the values the files hold (``precheck.results``) stay in core, which imports no reader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import os

    import pandas

__all__ = ["load"]


def load(path: str | os.PathLike) -> pandas.DataFrame:
    """One run's results as a pandas DataFrame, a row per compared output (precheck/frames/run.py): ``path`` is
    an output folder, a details CSV or a result CSV, precheck's or msprobe's. A compare's file (or a folder
    holding a compare) gives the compare's frame, a row per compared tensor with the same leading columns
    (precheck/frames/compare.py). Public as ``precheck.load``."""
    from precheck.frames.compare import is_compare, load_compare
    from precheck.frames.run import load as load_frame

    return load_compare(path) if is_compare(path) else load_frame(path)
