"""The ``-o`` folder of commands that write files: made, or refused in one line before any work is lost."""

from __future__ import annotations

import os
import time
from pathlib import Path

from precheck.errors import PrecheckError

MAX_STEMS = 10_000  # outputs started in one second in one folder


class OutputError(PrecheckError, ValueError):
    """``-o`` cannot be used as a folder (one line, exit code 2)."""


def output_folder(path: str | os.PathLike) -> Path:
    """Make ``path`` a folder to write in, or say in one line why it cannot be one: it names a file, it lies under
    a file (``/dev/null/x``), it is a link to nothing, or the system refuses to make it. A dangling link is not
    followed: its target may be a stale or mistyped place, and the system's "File exists" named neither."""
    folder = Path(path)
    if folder.is_symlink() and not folder.exists():
        raise OutputError(f"{folder}: a link to {os.readlink(folder)}, which does not exist (-o names a folder)")
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


def create_new(path: Path) -> bool:
    """Create ``path`` empty if no one has it (O_EXCL: atomic between processes); False when it exists."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except FileExistsError:
        return False
    return True


def claim_stamp(folder: Path, *names: str, stamp: str | None = None) -> str:
    """A stem (``<stamp>`` or ``<stamp>_<n>``; the stamp is now's ``YYYYmmddHHMMSS`` by default) for a command's
    files named ``name.format(stem)`` for each of ``names``, all created here, empty, with O_EXCL: a command
    started in the same second, in this process or another, takes the next stem instead of writing over this
    one's files, and so does a stem of which any one name is taken (the files made for it are removed)."""
    stamp = stamp or time.strftime("%Y%m%d%H%M%S")
    for n in range(1, MAX_STEMS):
        stem = stamp if n == 1 else f"{stamp}_{n}"
        made = []
        for path in (folder / name.format(stem) for name in names):
            if not create_new(path):
                break
            made.append(path)
        else:
            return stem
        for path in made:
            path.unlink(missing_ok=True)
    raise OutputError(f"{folder}: {MAX_STEMS:,} outputs already started at {stamp}")
