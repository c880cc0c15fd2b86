"""The records of asynchronous torch.distributed calls (``async_op=True``, isend, irecv, batch_isend_irecv),
completed once their work is done.

Such a call returns before the collective has run: its tensors, read then, hold the input, a partly reduced
buffer or the result, as the backend's thread has got on (a correct all_reduce recorded so was graded error in 3
to 9 of 10 runs). Its output is read when its work completes: in the program's ``Work.wait()``, before that
returns (msprobe reads it there too), or, for a program that waits otherwise (the work's future, as DDP's comm
hooks do; a barrier), in the future's callback as the work completes, which msprobe never does (its record keeps
the tensors as they were when the call returned). A work still running at the step's end is waited for there.
``Work.wait`` is replaced only while a recording is installed, and put back after where it is still precheck's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["Pending", "works_of"]


def _work_class() -> type | None:
    dist = torch.distributed
    if not dist.is_available():
        return None
    return getattr(dist, "Work", None) or getattr(torch._C._distributed_c10d, "Work", None)


def works_of(out: Any) -> list:
    """The works a torch.distributed call returned (one, or batch_isend_irecv's list); empty for a call that ran."""
    cls = _work_class()
    found = out if isinstance(out, list) else [out]
    return found if cls is not None and found and all(isinstance(w, cls) for w in found) else []


class _Entry:
    """One record waiting for its works."""

    def __init__(self, works: list, fill: Callable[[], None]) -> None:
        self.works, self.fill = works, fill
        self.left = {id(w) for w in works}
        self.claimed = False  # its fill has been taken by a thread (at most one ever runs it)
        self.filled = threading.Event()


class Pending:
    """Records waiting for their works, each completed once: by the first of ``Work.wait()`` on its last work, the
    work's future's callback, or :meth:`finish`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_work: dict[int, _Entry] = {}
        self._cls: type | None = None
        self._original: Callable | None = None
        self._wait: Callable | None = None

    def install(self) -> None:
        """``Work.wait`` completes the records of the works it waits for before it returns."""
        cls = _work_class()
        if cls is None or self._cls is not None:
            return
        original, pending = cls.wait, self

        def wait(work: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(work, *args, **kwargs)
            if pending._by_work:
                pending._done(work, waiting=True)
            return result

        wait.__name__, wait.__doc__, wait.__wrapped__ = "wait", original.__doc__, original  # type: ignore[attr-defined]
        cls.wait = wait  # type: ignore[method-assign]
        self._cls, self._original, self._wait = cls, original, wait

    def uninstall(self) -> None:
        """``Work.wait`` as it was, where it is still this one's (a later patch of the program's stays)."""
        if self._cls is not None and vars(self._cls).get("wait") is self._wait:
            self._cls.wait = self._original  # type: ignore[method-assign]
        self._cls = self._original = self._wait = None

    def add(self, works: list, fill: Callable[[], None]) -> None:
        """``fill`` once every one of ``works`` has completed."""
        entry = _Entry(works, fill)
        with self._lock:
            for work in works:
                self._by_work[id(work)] = entry
        for work in works:
            try:
                work.get_future().then(lambda _, w=work: self._done(w, waiting=False))
            except Exception:  # noqa: S112 - a backend without futures: its wait() or the step's end completes it
                continue

    def _done(self, work: Any, waiting: bool) -> None:
        """``work`` has completed: its record is filled here if it was the last of its works; a ``wait()`` whose
        record another thread is filling returns only once it is filled (the program may then change the tensor)."""
        with self._lock:
            entry = self._by_work.get(id(work))
            if entry is None or not any(w is work for w in entry.works):
                return
            entry.left.discard(id(work))
            mine = not entry.left and not entry.claimed
            entry.claimed = entry.claimed or mine
        if mine:
            self._fill(entry)
        elif waiting and not entry.left:
            entry.filled.wait()

    def _fill(self, entry: _Entry) -> None:
        try:
            entry.fill()
        finally:
            with self._lock:
                for work in entry.works:
                    if self._by_work.get(id(work)) is entry:
                        del self._by_work[id(work)]
            entry.filled.set()

    def finish(self, lost: Callable[[Exception], None]) -> None:
        """Complete every record still waiting (the step ends): its works waited for here, as the program would
        have; a work that fails to complete leaves its record as read now, and ``lost`` is told why. Called
        without the recorder's lock: a future's callback filling a record takes it."""
        with self._lock:
            entries = list({id(e): e for e in self._by_work.values()}.values())
            mine = [e for e in entries if not e.claimed]
            for entry in mine:
                entry.claimed = True
        for entry in mine:
            for work in entry.works:
                try:
                    (self._original or type(work).wait)(work)
                except Exception as e:  # the program's own failure is its to see at its wait(), not here
                    lost(e)
            self._fill(entry)
        for entry in entries:
            entry.filled.wait()
