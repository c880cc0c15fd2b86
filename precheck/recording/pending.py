"""The records of asynchronous torch.distributed calls (``async_op=True``, isend, irecv, batch_isend_irecv),
completed once their work is done.

Such a call returns before the collective has run: its tensors, read then, hold the input, a partly reduced
buffer or the result, as the backend's thread has got on (a correct all_reduce recorded so was graded error in 3
to 9 of 10 runs). Its output is read when its work completes: in the program's ``Work.wait()``, before that
returns (msprobe reads it there too); in the future ``Work.get_future()`` gives the program (DDP's comm hooks
wait on it), which completes once the record is filled; or, for a program that waits otherwise (a barrier), in a
callback as the work completes. msprobe does neither: its record keeps the tensors as they were when the call
returned. A work still running at the step's end is waited for there, but one without a future (gloo's send and
recv), whose second wait() never returns: the program may wait for it after the step. ``Work.wait`` and
``Work.get_future`` are replaced only while a recording is installed, and put back after where they are still
precheck's.

precheck's callbacks run on the backend's thread, which takes the GIL for them, and again to release them (torch's
guard of a Python callable, and the child future's Python value). A thread that takes the GIL once the interpreter
is finalizing is ended by ``pthread_exit`` (CPython before 3.14), whose unwinding through that guard's destructor
aborts the process: "terminate called without an active exception", exit 134, after the program's last line (the
program's ``wait()`` returns before its future's callbacks run, so a program that ends right after it races its
own exit; 8 of ~200 bare gloo runs of that shape aborted). The step's end therefore waits until the backend's
threads hold none of precheck's callbacks (:class:`_Held`).
"""

from __future__ import annotations

import threading
import weakref
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


SETTLE_SECONDS = 10.0  # the most a step's end waits for the backend's threads to let precheck's callbacks go


class _Returned:
    """What precheck's callback gives its future: an object whose release is seen (the future's value is let go on
    the backend's thread too)."""

    __slots__ = ("__weakref__",)


class _Held:
    """precheck's callbacks (and their values) a backend's thread may still hold: each is counted until it is
    released."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._refs: set[weakref.ref] = set()

    def track(self, thing: Any) -> Any:
        """``thing``, counted as held until it is released."""
        with self._changed:
            self._refs.add(weakref.ref(thing, self._released))
        return thing

    def _released(self, ref: weakref.ref) -> None:
        with self._changed:
            self._refs.discard(ref)
            self._changed.notify_all()

    def count(self) -> int:
        return len(self._refs)

    def wait(self, timeout: float) -> bool:
        """Whether every one was released within ``timeout`` seconds (the GIL is let go while waiting)."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._refs, timeout)


class _Entry:
    """One record waiting for its works."""

    def __init__(self, works: list, fill: Callable[[], None]) -> None:
        self.works, self.fill = works, fill
        self.left = {id(w) for w in works}
        self.futureless: set[int] = set()  # works without a future (gloo's send and recv): never waited by precheck
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
        self._saved: dict[str, tuple[Callable, Callable]] = {}  # Work's method -> (torch's, precheck's)
        self.held = _Held()  # precheck's future callbacks not yet let go by the backend's thread

    def install(self) -> None:
        """``Work.wait`` completes the records of the works it waits for before it returns, and the future of
        ``Work.get_future`` completes after them."""
        cls = _work_class()
        if cls is None or self._cls is not None:
            return
        wait, get_future, pending = cls.wait, cls.get_future, self

        def waited(work: Any, *args: Any, **kwargs: Any) -> Any:
            result = wait(work, *args, **kwargs)
            if pending._by_work:
                pending._done(work, waiting=True)
            return result

        def future(work: Any) -> Any:
            found = get_future(work)
            if id(work) not in pending._by_work:
                return found
            return found.then(pending.held.track(lambda done: (pending._done(work, waiting=True), done.value())[1]))

        for name, original, patch in (("wait", wait, waited), ("get_future", get_future, future)):
            patch.__name__, patch.__doc__ = name, original.__doc__
            patch.__wrapped__ = original  # type: ignore[attr-defined]
            setattr(cls, name, patch)
            self._saved[name] = (original, patch)
        self._cls, self._original = cls, wait

    def uninstall(self) -> None:
        """``Work``'s methods as they were, where they are still this one's (a later patch of the program's stays)."""
        for name, (original, patch) in self._saved.items():
            if self._cls is not None and vars(self._cls).get(name) is patch:
                setattr(self._cls, name, original)
        self._saved.clear()
        self._cls = self._original = None

    def add(self, works: list, fill: Callable[[], None]) -> None:
        """``fill`` once every one of ``works`` has completed."""
        entry = _Entry(works, fill)
        with self._lock:
            for work in works:
                self._by_work[id(work)] = entry
        get_future = self._saved["get_future"][0] if "get_future" in self._saved else type(works[0]).get_future
        for work in works:
            try:
                get_future(work).then(self._completed(work))
            except Exception:  # a backend without futures (gloo's p2p): its wait() or the step's end completes it
                entry.futureless.add(id(work))

    def _completed(self, work: Any) -> Callable[[Any], _Returned]:
        """The callback that completes ``work``'s record as its future completes, counted until released."""

        def completed(_: Any) -> _Returned:
            self._done(work, waiting=False)
            return self.held.track(_Returned())

        return self.held.track(completed)

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
        """Complete every record still waiting (the step ends): its works not yet seen complete waited for here,
        as the program would have. Not a work without a future (gloo's send and recv: no future, is_completed()
        always False), whose wait() is not idempotent: a second one waits for another message, for ever, so the
        program's own wait after the step's end (a send waited late, as overlapped pipelines do), or this one of a
        work it had waited, hung the training; its record is read as it is now. A work that fails to complete
        leaves its record as read now, and ``lost`` is told why. Called without the recorder's lock: a future's
        callback filling a record takes it."""
        with self._lock:
            entries = list({id(e): e for e in self._by_work.values()}.values())
            mine = [e for e in entries if not e.claimed]
            for entry in mine:
                entry.claimed = True
            running = {id(e): [w for w in e.works if id(w) in e.left and id(w) not in e.futureless] for e in mine}
        for entry in mine:
            for work in running[id(entry)]:
                try:
                    (self._original or type(work).wait)(work)
                except Exception as e:  # the program's own failure is its to see at its wait(), not here
                    lost(e)
            self._fill(entry)
        for entry in entries:
            entry.filled.wait()
        self.held.wait(SETTLE_SECONDS)  # every future is done: its callbacks are let go within moments
