"""A tensor task's files written off the step's path: the copy is taken at the call (an in-place call after it must
not reach the file), ``torch.save`` runs on a thread of its own.

torch.save was half of precheck record's overhead on a ResNet-18 tensor step (bench_record.py's profile: 496
files, the zip writer and the pickling), and the step does not need the file, only the copy. At most
``MAX_PENDING`` bytes of copies wait for the writer: past that the step waits, so memory stays bounded. A step's
files are all on disk before its dump.json is closed (:meth:`TensorFiles.flush`).
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import torch

__all__ = ["TensorFiles"]

MAX_PENDING = 256 * 2**20  # bytes of copies waiting to be saved


class TensorFiles:
    """Saves tensors as msprobe saves them (``torch.save`` of a fresh contiguous copy), in the background."""

    def __init__(self, max_pending: int = MAX_PENDING) -> None:
        self.max_pending = max_pending
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0
        self._done = threading.Condition()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def save(self, tensor: torch.Tensor, path: Path) -> None:
        copy = tensor.detach().clone().contiguous()
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
        """Wait until every file asked for is on disk; an OSError of the writer (a full disk) is raised here."""
        with self._done:
            self._done.wait_for(lambda: self._pending == 0)
        if self._error is not None:
            error, self._error = self._error, None
            raise error

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
                elif self._error is None:
                    torch.save(copy, path)
            except BaseException as e:  # the step learns of it at the next flush, not by a dead thread
                self._error = e
            finally:
                del copy, job
                with self._done:
                    self._pending -= size
                    self._done.notify_all()
