"""A file a dump names, opened the one way run_ut and compare both open it.

A dump comes from someone else's machine: a record's ``data_name`` may leave the dump's folder (``..``, an
absolute path, a symbolic link pointing out), and a link can be swapped in between a check and a read (2 of 3000
tries got outside bytes read, graded and saved). So the name is checked on its resolved path, then the file is
opened once, one component at a time from the checked data folder with ``O_NOFOLLOW`` (a link swapped in anywhere
on the way fails the open), its type and size are taken from that descriptor, and only that descriptor is read.
Nothing here imports torch: ``precheck compare`` opens files through it too.
"""

from __future__ import annotations

import errno
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
# O_NONBLOCK: a FIFO named by a record is refused by its type, not waited on for a writer.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


class Refused(ValueError):
    """The named file is not one of the dump's regular files, or cannot be opened; the message names it and says
    why (run_ut's SKIP reason, compare's row note)."""


class Missing(Refused):
    """The named file is not in the dump's data folder (a dump.json copied without its dump_tensor_data/):
    its own type, so run_ut's SKIP row says so as a code (Reason.SKIP_MISSING_FILE) and the run's summary
    names the fix."""


@dataclass
class DataFile:
    """A dump's file, open: read only through ``file`` (the descriptor whose type and size were checked), never
    by its name again."""

    path: Path  # where it was found, for messages
    file: BinaryIO
    size: int

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> DataFile:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def shown(data_name: str) -> str:
    """``data_name`` as messages name it: cut after 200 characters (every output escapes control characters)."""
    return data_name if len(data_name) <= 200 else f"{data_name[:200]}... ({len(data_name)} characters)"


def resolve(data_dir: Path, data_name: str) -> Path:
    """The file of ``data_name`` inside ``data_dir``; names that would leave the directory (``..``, absolute
    paths, symbolic links pointing out, a ``data_dir`` that is itself a link out of the dump's directory) are
    Refused, and so are names no file can have (NUL bytes, too long)."""
    return _located(data_dir, data_name)[1]


def _located(data_dir: Path, data_name: str) -> tuple[Path, Path]:
    """(the data folder, the file) as resolved paths, once the file is checked to lie inside the folder."""
    try:
        root = data_dir.resolve()
        path = (data_dir / data_name).resolve()
    except (OSError, ValueError, RuntimeError) as e:  # NUL byte, name too long, symlink loop
        raise Refused(f"{shown(data_name)}: refused, not a usable file name ({reason(e)})") from None
    if data_dir.parent.resolve() not in root.parents:
        # dump_tensor_data itself a link out of the dump: its files are not the dump's, like a linked file's.
        raise Refused(f"{shown(data_name)}: refused, {data_dir.name} is a link out of the dump directory")
    if path == root:
        raise Refused(f"{shown(data_name)}: refused, names the dump directory itself, not a file in it")
    if root not in path.parents:
        raise Refused(f"{shown(data_name)}: refused, the path leaves the dump directory")
    return root, path


def open_file(data_dir: Path, data_name: str) -> DataFile:
    """``data_name``'s file in ``data_dir`` (checked by :func:`resolve`), open for reading; Refused when it is
    missing, not a regular file, or its path changed after the check (a link swapped in)."""
    root, path = _located(data_dir, data_name)
    name = shown(data_name)
    try:
        fd = _open_beneath(root, path.relative_to(root).parts)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            raise Missing(f"{name}: file not found in {data_dir}") from None
        if e.errno == errno.ELOOP:
            raise Refused(f"{name}: refused, a symbolic link on its path (it changed after it was checked)") from None
        raise Refused(f"{name}: cannot access: {reason(e)}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise Refused(f"{name}: refused, not a regular file")
    os.set_blocking(fd, True)
    return DataFile(path, open(fd, "rb"), info.st_size)


def open_regular(path: Path) -> BinaryIO:
    """``path`` open for reading if it is a regular file. A file beside a dump or a run (stack.json, dump.json, a
    sidecar) comes from anyone: it is opened without blocking and checked on that descriptor, so a FIFO (which
    would wait for a writer forever) or a device such as /dev/zero (which never ends) is Refused by its type
    without a wait or a read. FileNotFoundError and other OSErrors are the caller's to word."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Refused(f"{path}: not a regular file")
    os.set_blocking(fd, True)
    return open(fd, "rb")


def _open_beneath(root: Path, parts: tuple[str, ...]) -> int:
    """A descriptor of ``root/parts``, each folder opened from the one before and nothing followed: ``root`` and
    ``parts`` are resolved, so any link met on the way was swapped in after the check."""
    fd = os.open(root, _DIR)
    for part in parts[:-1]:
        try:
            inner = os.open(part, _DIR, dir_fd=fd)
        finally:
            os.close(fd)
        fd = inner
    try:
        return os.open(parts[-1], _FILE, dir_fd=fd)
    finally:
        os.close(fd)


def load_npy(data: DataFile, *, mapped: bool = False) -> np.ndarray:
    """The numbers of an open ``.npy`` file, its header checked before numpy allocates what it declares: numbers
    only (a structured or object array is no tensor, and pickles are never loaded), every declared byte in the
    file (a 192-byte file may declare 10^12 elements); ValueError says why not. ``mapped``: mapped from the
    descriptor rather than read (np.load maps only by name, which a swapped link could redirect)."""
    f = data.file
    version = np.lib.format.read_magic(f)
    if version not in _NPY_HEADERS:
        raise ValueError(f"a .npy of format version {version[0]}.{version[1]}, not 1.0 or 2.0")
    shape, fortran, dtype = _NPY_HEADERS[version](f)
    if dtype.kind not in "biufc":
        raise ValueError(f"an array of dtype {dtype}, not numbers")
    start = f.tell()
    declared, held = math.prod(shape) * dtype.itemsize, data.size - start
    if declared > held:
        raise ValueError(f"its header declares {shape} {dtype} ({declared} bytes), the file holds {held} after it")
    if mapped:
        return np.memmap(f, dtype=dtype, mode="r", offset=start, shape=shape, order="F" if fortran else "C")
    f.seek(0)
    return np.load(f, allow_pickle=False)


def reason(e: BaseException) -> str:
    """The first line of an error's text (its type where it has none), cut for a message."""
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]
