"""An online check's store of tensor files: shared memory (a tmpfs, ``/dev/shm``) under a byte budget.

A call's tensors stay in the store from the call until its case is checked, and a call that awaits its backward
keeps its forward's there until the backward runs: a whole forward pass's inputs, outputs and weights can wait at
once, which the checkers' bounded queue does not limit. Docker gives a container 64 MB of ``/dev/shm``, and a
tmpfs that fills fails torch.save halfway ("unexpected pos"), inside the user's call. So the store takes at most
``budget`` bytes; a tensor beyond it, or whose save fails for any reason (ENOSPC), leaves nothing in the store,
and its call becomes a SKIP row that says why. The user's call never sees it: the recorder must not change the run.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

import torch

from precheck.execution.runner import one_line
from precheck.recording.encode import save_copy

__all__ = ["DEFAULT_SHARE", "Store"]

DEFAULT_SHARE = 0.5  # of the tmpfs's free space at start: the default budget (a DataLoader's workers use it too)
_FILE_OVERHEAD = 4096  # a file's zip records beside its data, and the tmpfs page its end takes


class Store:
    """A folder in shared memory for the tensor files of the calls an online check has not checked yet."""

    def __init__(self, budget: int | None = None, prefix: str = "precheck-record-") -> None:
        """``budget``: bytes of tensor files held at once (None: ``DEFAULT_SHARE`` of the free space); ``prefix``:
        the folder's name starts so (precheck record finds what a killed run left by it)."""
        shm = Path("/dev/shm")
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=shm if shm.is_dir() else None))
        self.budget = int(shutil.disk_usage(self.path).free * DEFAULT_SHARE) if budget is None else budget
        self._lock = threading.Lock()  # saves come from the step's and autograd's threads, releases from the checker's
        self._used = 0
        self._sizes: dict[str, int] = {}
        self._refused: dict[str, str] = {}  # file name -> why it is not in the store

    def save(self, tensor: torch.Tensor, path: Path) -> None:
        """Save ``tensor`` as the recorder saves it, if it fits the budget; never raises."""
        size = tensor.numel() * tensor.element_size() + _FILE_OVERHEAD
        with self._lock:
            over = self._used + size - self.budget
            if over > 0:
                self._refused[path.name] = f"{path.name} is {over} bytes over its budget of {self.budget} bytes"
                return
            self._used += size  # taken before the save: another thread's save counts it
        try:
            save_copy(tensor, path)
        except Exception as e:  # a full tmpfs, a store removed: the call goes on, its case says why
            path.unlink(missing_ok=True)  # what a failed save wrote holds the space it failed for
            with self._lock:
                self._used -= size
                self._refused[path.name] = f"saving {path.name} failed: {one_line(e)}"
            return
        with self._lock:
            self._sizes[path.name] = size

    def refused(self, names: list[str]) -> str | None:
        """Why a call whose tensor files are ``names`` cannot be checked from the store; None when all are in it."""
        with self._lock:
            why = next((self._refused[name] for name in names if name in self._refused), None)
        if why is None:
            return None
        return (
            f"its tensors did not fit the check's store ({self.path.parent}): {why}; give it more with "
            "--store-size (precheck.record's store_size), or the container a larger /dev/shm"
        )

    def release(self, names: list[str], keep_in: Path | None = None) -> None:
        """The files ``names`` leave the store: moved to ``keep_in``, deleted without it."""
        for name in names:
            path = self.path / name
            if keep_in is not None and path.is_file():
                shutil.move(path, keep_in / name)
            else:
                path.unlink(missing_ok=True)
            with self._lock:
                self._used -= self._sizes.pop(name, 0)
                self._refused.pop(name, None)

    def close(self) -> None:
        """Remove the store and whatever is left in it (a step that ended has nothing left; an interrupted one may)."""
        shutil.rmtree(self.path, ignore_errors=True)
