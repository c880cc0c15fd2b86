"""A tensor task's files written off the step's path: the copy is taken at the call (an in-place call after it must
not reach the file), ``torch.save`` runs on a thread of its own.

torch.save was half of precheck record's overhead on a ResNet-18 tensor step (bench_record.py's profile: 496
files, the zip writer and the pickling), and the step does not need the file, only the copy. At most
``MAX_PENDING`` bytes of copies wait for the writer: past that the step waits, so memory stays bounded. A step's
files are all on disk before its dump.json is closed (:meth:`TensorFiles.flush`).

A file that cannot be saved (a tensor torch.save refuses, a full disk) is that file's loss alone: it is named in
:attr:`TensorFiles.failed` with why, for the step's dump.json to drop its name and say so, and the writer goes on
with the next (one failure used to stop every later file of the step, which dump.json still named). Each file is
written beside its name and renamed into place, so none is ever torn.
"""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path

import torch

from precheck.execution.runner import one_line
from precheck.recording.encode import copy_of

__all__ = ["TensorFiles"]

MAX_PENDING = 256 * 2**20  # bytes of copies waiting to be saved


class TensorFiles:
    """Saves tensors as msprobe saves them (``torch.save`` of a fresh contiguous copy), in the background."""

    def __init__(self, max_pending: int = MAX_PENDING) -> None:
        self.max_pending = max_pending
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0
        self._done = threading.Condition()
        self.failed: dict[str, str] = {}  # file name -> why it is not on disk
        self._thread: threading.Thread | None = None

    def save(self, tensor: torch.Tensor, path: Path) -> None:
        copy = copy_of(tensor)
        size = copy.numel() * copy.element_size()
        with self._done:
            self._done.wait_for(lambda: self._pending == 0 or self._pending + size <= self.max_pending)
            self._pending += size
        if self._thread is None:
            # named precheck-*: the recorder records no call of precheck's own threads
            self._thread = threading.Thread(target=self._write, name="precheck-files", daemon=True)
            self._thread.start()
        self._queue.put((copy, path, size))

    def discard(self, paths: list[Path]) -> None:
        """Remove the files ``paths`` once the writer has saved them (a call that raised after its inputs were
        saved)."""
        for path in paths:
            self._queue.put((None, path, 0))

    def flush(self) -> None:
        """Wait until every file asked for is on disk, or named in :attr:`failed`."""
        with self._done:
            self._done.wait_for(lambda: self._pending == 0)

    def close(self) -> None:
        """Flush, and end the writer."""
        try:
            self.flush()
        finally:
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join()
                self._thread = None

    def _write(self) -> None:
        while (job := self._queue.get()) is not None:
            copy, path, size = job
            try:
                if copy is None:
                    path.unlink(missing_ok=True)
                    self.failed.pop(path.name, None)  # the name is the next call's (it takes the raised call's number)
                else:
                    _save(copy, path)
            except BaseException as e:  # this file's loss alone: the step's dump.json drops its name and says why
                self.failed[path.name] = one_line(e)
            finally:
                del copy, job
                with self._done:
                    self._pending -= size
                    self._done.notify_all()


def _save(copy: torch.Tensor, path: Path) -> None:
    """``torch.save`` to a file beside ``path``, renamed to it once whole: a failed or interrupted save leaves no
    torn file under the name dump.json reads."""
    part = path.with_name(f"{path.name}.part")
    try:
        torch.save(copy, part)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
