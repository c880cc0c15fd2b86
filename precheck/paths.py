"""The ``-o`` folder of commands that write files: made, or refused in one line before any work is lost."""

from __future__ import annotations

import os
from pathlib import Path


class OutputError(ValueError):
    """``-o`` cannot be used as a folder (one line, exit code 2)."""


def output_folder(path: str | os.PathLike) -> Path:
    """Make ``path`` a folder to write in, or say in one line why it cannot be one: it names a file, it lies under
    a file (``/dev/null/x``), or the system refuses to make it."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{folder}: exists and is not a folder (-o names a folder to write in)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{folder}: cannot make this folder: {e.strerror or e}") from None
    return folder


def write_problem(e: OSError) -> str:
    """One line for a file that could not be written (which file, and the system's reason)."""
    return f"cannot write {e.filename}: {e.strerror}" if e.filename else f"cannot write: {e}"
