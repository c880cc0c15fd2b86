"""The process backend: cases over supervised worker processes, results streamed back as they complete.

A task carries the case (argument specs and file names, never tensors); the worker loads its own inputs. Each
worker checks one case at a time under supervision: a worker that dies (segfault, abort, ``os._exit``, out of
memory) or runs past the case's timeout is replaced, and that case becomes a row saying so (an error row; a
SKIP for a timeout, which grades nothing: results.timed_out), while the run goes on. A busy worker has the next
case queued behind its own, so it starts it without waiting for the run to read its result and answer (1.5 ms
a case, 1.3% of a worker's time on a GPT-2 step); a queued case never started is handed to another worker when
its worker dies, and the last cases are not queued, so no worker waits while another holds two. (joblib's loky pool
cannot do this: one dead worker breaks every task in flight. pebble's ProcessPool can, but not all the rest:
see the README's Architecture section.)
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import signal
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from multiprocessing import reduction
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as connection_wait
from pathlib import Path
from typing import Any

from api_registry.plugins import ENV as PLUGINS_ENV
from api_registry.table import registry
from precheck.dump.records import Case
from precheck.errors import PrecheckError
from precheck.execution.check import check_case
from precheck.execution.options import CheckOptions
from precheck.execution.runner import quiet_replayed
from precheck.results import ApiResult, device_lost
from precheck.scheduling.costs import MAX_TIMEOUT, STARTUP_SECONDS
from precheck.scheduling.forkserver import main_left_out, worker_context
from precheck.scheduling.loop import Body, prepare_worker

READY = "ready"


class WorkerStartError(PrecheckError, RuntimeError):
    """No worker process could start (the environment, not a case): one line, exit code 2."""


class _Inherited:
    """What a worker takes from the run as it is when the worker starts: its stdout and stderr, its environment
    and its import path. A spawned worker got them by being started; one forked from the fork server would get the
    server's, as they were when it started: a run's stderr redirected since (a shell's 2> in library use,
    pytest's capture) would miss the worker's warnings, and PRECHECK_PLUGINS or a device variable set since would
    not reach it. Pickled while the worker's process object is, so the start method passes the descriptors."""

    def __init__(self, handed: tuple = (), environ: dict | None = None, path: list | None = None) -> None:
        self.handed = handed  # (descriptor, its duplicate as the start method passes it), in the worker
        self.environ, self.path = environ, path

    def __reduce__(self):
        handed = tuple((fd, reduction.DupFd(fd)) for fd in (1, 2) if _is_open(fd))
        return _Inherited, (handed, dict(os.environ), list(sys.path))

    def install(self) -> None:
        for fd, dup in self.handed:
            os.dup2(dup.detach(), fd)
        plugins = os.environ.get(PLUGINS_ENV)
        if self.environ is not None:
            os.environ.clear()
            os.environ.update(self.environ)
        if self.path is not None:
            sys.path[:] = self.path
        if os.environ.get(PLUGINS_ENV) != plugins:  # the server's API table was built with other plugins
            registry.cache_clear()


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _worker_main(conn: Connection, data_dir: Path, options: CheckOptions, inherited: _Inherited) -> None:
    # Ctrl-C and SIGTERM are the run's to handle (it stops its workers): this process started with them ignored
    # and leaves the terminal's process group, so a Ctrl-C or a group's SIGTERM never reaches it; what it starts
    # (compiler workers) gets the usual signals.
    with contextlib.suppress(OSError):
        os.setsid()
    _die_with_parent()
    inherited.install()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    prepare_worker()
    _thread_locked_progress_bars()
    warnings.showwarning = quiet_replayed(warnings.showwarning)
    try:
        conn.send(READY)
        while (case := conn.recv()) is not None:
            result = check_case(case, data_dir, options)
            retire = device_lost(result)  # its device context cannot be trusted: the worker is replaced
            conn.send((result, retire))
            if retire:
                return
    except (EOFError, OSError):  # the run is gone (killed): nothing left to do, nothing to say
        return
    # Told to leave: a worker holds no file to flush, and the interpreter's teardown of torch took 0.3 s a worker
    # that the run waited for at its end.
    os._exit(0)


def _thread_locked_progress_bars() -> None:
    """tqdm's first bar in a process makes a multiprocessing lock (a named semaphore), for bars drawn by several
    processes at once; inductor draws one while torch.compile waits for its kernels. A worker's bars are its own,
    and it leaves by os._exit (or is killed), which never unlinks the semaphore: each --target compile worker left
    one, and the run ended with "resource_tracker: There appear to be 2 leaked semaphore objects". A thread lock
    serves a worker's bars and leaves nothing behind."""
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def _die_with_parent() -> None:
    """Linux: this worker gets SIGKILL when its parent dies, however it dies (out of the run's process group, it
    would otherwise outlive a killed run for as long as its case takes). The parent is the run, or the fork
    server, which leaves as soon as the run is gone."""
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(0)


# The most a queued case may take: it waits in the socket's buffer while its worker is busy, so its send must never
# block (macOS gives a Unix socket 8 KiB). A heavy step's cases take 1.1-1.8 KB pickled.
QUEUED_BYTES = 4 * 2**10


@dataclass
class _Worker:
    process: Any
    conn: Connection
    case: Case | None = None  # the case it runs
    deadline: float = math.inf
    queued: Case | None = None  # the case it runs next, sent already and not yet started (nor journaled)


class Supervisor:
    """Worker processes fed one case at a time; a dead or stuck worker costs its case, not the run."""

    def __init__(self, data_dir: Path, body: Body, size: int) -> None:
        self.data_dir, self.body, self.size = data_dir, body, size
        self._large: Case | None = None  # the next case, found too large to be queued
        self.context = worker_context()  # never a fork of this process, which runs torch threads

    def _start(self, wait: bool = True) -> _Worker:
        parent, child = self.context.Pipe()
        args = (child, self.data_dir, self.body.options, _Inherited())
        process = self.context.Process(target=_worker_main, args=args, daemon=True)
        with _signals_ignored_by_children(), main_left_out():
            process.start()
        child.close()
        worker = _Worker(process, parent)
        if wait:
            self._ready(worker)
        return worker

    @staticmethod
    def _ready(worker: _Worker) -> None:
        """Wait until the worker has imported torch, so its start-up never counts against a case's timeout."""
        try:
            if worker.conn.poll(STARTUP_SECONDS) and worker.conn.recv() == READY:
                return
        except (EOFError, OSError):
            pass
        worker.process.kill()
        raise WorkerStartError(
            f"a worker process did not start within {STARTUP_SECONDS:g} s (exit code {worker.process.exitcode})"
        )

    def run(self, cases: Iterable[Case]) -> Iterator[ApiResult]:
        workers: list[_Worker] = []
        try:
            for _ in range(self.size):
                workers.append(self._start(wait=False))  # they import torch in parallel
            for w in workers:
                self._ready(w)
            yield from self._serve(workers, iter(cases))
        finally:  # also on Ctrl-C, SIGTERM or a consumer that stops early: no worker outlives the run
            for w in workers:
                self._tell_to_stop(w)
            for w in workers:
                self._stop(w)

    def _serve(self, workers: list[_Worker], source: Iterator[Case]) -> Iterator[ApiResult]:
        ahead = len(workers) + 1  # cases decoded ahead: enough to tell whether every worker will get another
        pending = deque(itertools.islice(source, ahead))  # the rest stay undecoded in the dump
        while pending or any(w.case for w in workers):
            for i, w in enumerate(workers):
                if w.case is None and pending and not w.process.is_alive():
                    workers[i] = w = self._replace(w)  # died between cases
                if w.case is None and pending:
                    w.case = pending.popleft()
                    w.deadline = time.monotonic() + self.body.start(w.case)
                    w.conn.send(w.case)
                pending.extend(itertools.islice(source, max(0, ahead - len(pending))))
            self._queue(workers, pending, source, ahead)
            busy = [w for w in workers if w.case is not None]
            wait_for = min(w.deadline for w in busy) - time.monotonic()
            ready = set(
                connection_wait(
                    [w.conn for w in busy] + [w.process.sentinel for w in busy],
                    timeout=min(max(0.0, wait_for), MAX_TIMEOUT),
                )
            )
            for i, w in enumerate(workers):
                if w.case is None:
                    continue
                result = self._outcome(i, workers, ready)
                if result is None:
                    continue
                if workers[i] is w:
                    self._next(w)
                elif w.queued is not None:  # replaced: its queued case never started, and goes first
                    pending.appendleft(w.queued)
                yield result

    def _queue(self, workers: list[_Worker], pending: deque, source: Iterator[Case], ahead: int) -> None:
        """Queue a case behind each busy worker's while more cases remain than there are workers (the last ones go
        to whichever worker is free first); a case too large to wait in a socket's buffer is not queued."""
        for w in workers:
            pending.extend(itertools.islice(source, max(0, ahead - len(pending))))
            if w.case is None or w.queued is not None or len(pending) <= len(workers) or pending[0] is self._large:
                continue
            payload = reduction.ForkingPickler.dumps(pending[0])  # what Connection.send writes
            if len(payload) > QUEUED_BYTES:
                self._large = pending[0]  # pickled once: it waits for a free worker
                continue
            case = pending.popleft()
            try:
                w.conn.send_bytes(payload)
            except OSError:  # it died meanwhile: its own case's row says so (_outcome), this one waits
                pending.appendleft(case)
                continue
            w.queued = case

    def _next(self, worker: _Worker) -> None:
        """The worker's case is done: its queued case, which it has started, is its case now (journaled here)."""
        worker.case, worker.queued = worker.queued, None
        if worker.case is not None:
            worker.deadline = time.monotonic() + self.body.start(worker.case)

    def _outcome(self, i: int, workers: list[_Worker], ready: set) -> ApiResult | None:
        """The busy worker ``i``'s result, its case's error row when it died or its SKIP row when it ran out of
        time (it is then replaced in ``workers``), or None while it works."""
        w = workers[i]
        result, retire = None, False
        # Looked at again, not only as the wait saw it: replacing another worker may have taken a while since.
        if w.conn in ready or w.process.sentinel in ready or w.conn.poll() or not w.process.is_alive():
            try:
                result, retire = w.conn.recv() if w.conn.poll() else (None, False)
            except (EOFError, OSError):
                result = None
            if retire:  # a sticky device error: this worker's device is not trusted again
                workers[i] = self._replace(w)
            elif result is None:
                w.process.join(1)
                result = self.body.crashed(w.case, _death(w.process.exitcode))
                workers[i] = self._replace(w)
        elif time.monotonic() >= w.deadline:
            result = self.body.late(w.case)
            workers[i] = self._replace(w)
        return result

    def _replace(self, worker: _Worker) -> _Worker:
        worker.process.kill()
        worker.process.join(5)
        worker.conn.close()
        return self._start()

    @staticmethod
    def _tell_to_stop(worker: _Worker) -> None:
        """An idle worker is told to leave (all of them before any is waited for: they leave together)."""
        if worker.case is None:
            try:
                worker.conn.send(None)
            except (OSError, ValueError):
                pass

    @staticmethod
    def _stop(worker: _Worker) -> None:
        if worker.case is None:  # idle: told to leave; busy (an interrupted run): killed at once
            worker.process.join(2)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(2)
        worker.conn.close()


@contextlib.contextmanager
def _signals_ignored_by_children():
    """Start a child with SIGINT and SIGTERM ignored from its first instruction (Python keeps an inherited
    SIG_IGN for SIGINT), so Ctrl-C during its start-up prints no traceback; signals that arrive meanwhile are held
    for this process, not lost."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stopping)
    saved = {s: signal.signal(s, signal.SIG_IGN) for s in stopping}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping)


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"signal {-exitcode} ({signal.Signals(-exitcode).name})"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"
