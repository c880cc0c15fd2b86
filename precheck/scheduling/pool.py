"""Schedule cases over supervised worker processes and stream results back as they complete.

A task carries the case (argument specs and file names, never tensors); the worker loads its own inputs. Each
worker checks one case at a time under supervision: a worker that dies (segfault, abort, ``os._exit``, out of
memory) or runs past the case's timeout is replaced, and that case becomes an error row saying so, while the
run goes on. (joblib's loky pool cannot do this: one dead worker breaks every task in flight.)

Starting a pool costs about two seconds on a 2-core machine (every worker imports torch), so a dump whose
estimated serial cost is below that runs in this process instead: a small dump never pays for a pool it does not
need. There each case runs on a helper thread that the run waits for at most the case's timeout: a case past it
is an error row, its thread is left behind (a hung C kernel cannot be interrupted) and the remaining cases run in
worker processes. An API that crashes the process takes an in-process run down; the resume journal (report.py)
names the APIs that were running then, and a resume checks those in worker processes (``isolate``).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as connection_wait
from pathlib import Path
from typing import Any

import torch

from api_registry import lookup
from precheck.dump.records import Case
from precheck.execution.check import check_case
from precheck.execution.options import CheckOptions
from precheck.execution.targets import target_for
from precheck.grader.status import ERROR
from precheck.inputs.builder import iter_specs
from precheck.results import ApiResult, failed

# Serial cost model, calibrated with benchmarks/bench_run_ut.py on a 2-core machine.
SECONDS_PER_CASE = 4e-3
SECONDS_PER_ELEMENT = 2e-8  # loaded from a file
SECONDS_PER_GENERATED_ELEMENT = 2.5e-7  # rebuilt from statistics (precheck/inputs/synth.py)
SECONDS_PER_COMPILE = 4.0  # torch.compile (inductor, CPU) of one signature, forward and backward
POOL_START_SECONDS = 2.0
DEFAULT_TIMEOUT = 120.0  # seconds per API before the scaling by size
MAX_TIMEOUT = 86400.0  # a day: the most any wait is told (the OS refuses larger timestamps)
START_POLL_SECONDS = 0.5  # how late a Dask task's start may be seen (its timeout runs from then)


MAX_WORKERS_PER_CORE = 4  # more only adds processes that wait for a core (and memory shares that shrink)


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def worker_count(requested: int | None) -> int:
    """``-n`` as given, at least 1 and at most MAX_WORKERS_PER_CORE per core; the cores when not given."""
    cores = default_workers()
    return cores if requested is None else max(1, min(requested, MAX_WORKERS_PER_CORE * cores))


def started_workers(cases: Sequence[Case], workers: int, options: CheckOptions, isolate: bool = False) -> int:
    """How many processes will hold a case at once: the memory share of each (--max-memory's default)."""
    if isolate or use_pool(cases, workers, options):
        return max(1, min(workers, len(cases)))
    return 1


def estimated_serial_seconds(cases: Sequence[Case], options: CheckOptions, enough: float = math.inf) -> float:
    """Seconds the cases would take one after the other; counting stops once ``enough`` is reached, so a large
    dump is not decoded twice to learn that it is large."""
    seconds = len(cases) * SECONDS_PER_CASE
    compiles = target_for(options).compiles
    signatures = set()
    for case in cases:
        if seconds >= enough:
            break
        if compiles and not case.problem and case.signature() not in signatures:
            signatures.add(case.signature())
            seconds += SECONDS_PER_COMPILE
        for spec in iter_specs((case.args, case.kwargs, case.grad_outputs)):
            generated = options.force_random or spec.data_name is None
            seconds += spec.numel * (SECONDS_PER_GENERATED_ELEMENT if generated else SECONDS_PER_ELEMENT)
    return seconds


def use_pool(cases: Sequence[Case], workers: int, options: CheckOptions = CheckOptions()) -> bool:
    """A pool pays off when the work it saves exceeds what it costs to start."""
    if workers <= 1 or len(cases) < 2:
        return False
    share = 1 - 1 / min(workers, len(cases))  # of the serial time that a pool saves
    return estimated_serial_seconds(cases, options, POOL_START_SECONDS / share + 1) * share > POOL_START_SECONDS


def case_timeout(case: Case, options: CheckOptions) -> float:
    """``--timeout`` as given, or a generous default scaled by the case's size (and compilation)."""
    if options.timeout is not None:
        return min(options.timeout, MAX_TIMEOUT)
    elements = sum(spec.numel for spec in iter_specs((case.args, case.kwargs, case.grad_outputs)))
    return min(DEFAULT_TIMEOUT + elements / 1e6 + target_for(options).extra_timeout, MAX_TIMEOUT)


def run_cases(
    cases: Sequence[Case],
    data_dir: Path,
    options: CheckOptions,
    workers: int,
    on_start: Callable[[Case], None] = lambda case: None,
    scheduler: str | None = None,
    isolate: bool = False,
) -> Iterator[ApiResult]:
    """Yield one ApiResult per case, in completion order. ``on_start`` is told before a case starts;
    ``scheduler`` (a Dask scheduler address) spreads the cases over that cluster instead of local workers;
    ``isolate`` runs them in worker processes however few they are (cases suspected of killing a run)."""
    if not len(cases):
        return
    if scheduler is not None:
        yield from _on_dask(cases, data_dir, options, scheduler, on_start)
    elif isolate or use_pool(cases, workers, options):
        yield from _Supervisor(data_dir, options, min(workers, len(cases))).run(cases, on_start)
    else:
        yield from _in_process(cases, data_dir, options, workers, on_start)


def _in_process(
    cases: Sequence[Case], data_dir: Path, options: CheckOptions, workers: int, on_start: Callable[[Case], None]
) -> Iterator[ApiResult]:
    """The cases on a helper thread of this process, each waited for at most its timeout. One past it is an
    error row; its thread is abandoned (it may be stuck in a C kernel that nothing can interrupt, a daemon
    thread that dies with the process) and the cases after it run in worker processes."""
    # One intra-op thread here too, so a CPU target computes bit for bit what a pool worker computes: the
    # verdicts never depend on -n. Work small enough to run here gains little from threads anyway.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    inline = _Inline(data_dir, options)
    try:
        source = iter(cases)
        for i, case in enumerate(source):
            on_start(case)
            timeout = case_timeout(case, options)
            result = inline.check(case, timeout)
            if result is None:
                yield failed(case, f"timed out after {timeout:g} s")
                left = len(cases) - i - 1
                if left:
                    yield from _Supervisor(data_dir, options, min(workers, left)).run(source, on_start)
                return
            yield result
    finally:
        inline.close()
        torch.set_num_threads(threads)


class _Inline:
    """A helper thread that checks one case at a time for the thread that waits on it."""

    def __init__(self, data_dir: Path, options: CheckOptions) -> None:
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.replies: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, args=(data_dir, options), name="precheck-check")
        self.thread.daemon = True
        self.thread.start()

    def _serve(self, data_dir: Path, options: CheckOptions) -> None:
        torch.set_num_threads(1)  # the thread count is per thread where torch uses OpenMP
        while (case := self.requests.get()) is not None:
            try:
                self.replies.put((check_case(case, data_dir, options), None))
            except BaseException as e:  # SystemExit from an API ends the run, as it would in this thread
                self.replies.put((None, e))

    def check(self, case: Case, timeout: float) -> ApiResult | None:
        """The case's result, or None when it took longer than ``timeout`` (this helper is then stuck)."""
        self.requests.put(case)
        try:
            result, error = self.replies.get(timeout=min(timeout, MAX_TIMEOUT))
        except queue.Empty:
            return None
        if error is not None:
            raise error
        return result

    def close(self) -> None:
        self.requests.put(None)


def _check_remote(case: Case, data_dir: Path, options: CheckOptions, topic: str) -> ApiResult:
    """One case on a Dask worker, with the thread discipline of a local worker. It tells the run (an event on
    ``topic``) when the check itself starts: the case's timeout counts from then, never the time the task spent
    queued, behind a worker's restart or in a fresh worker's first import of torch."""
    from distributed import get_worker

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    lookup("Torch.add")  # build the API table now, as a local worker does before it is ready
    worker = get_worker()
    worker.log_event(topic, worker.get_current_task())
    return check_case(case, data_dir, options)


def _on_dask(
    cases: Sequence[Case], data_dir: Path, options: CheckOptions, scheduler: str, on_start: Callable[[Case], None]
) -> Iterator[ApiResult]:
    """Cases as tasks of a Dask cluster whose workers see the dump's path, as many at a time as the cluster has
    threads: a case is journalled as started when it starts, and memory does not grow with the dump. A task that
    keeps killing its workers comes back as the case's error row (Dask retries it on other workers first); one
    that runs past its timeout is an error row, and its worker is restarted, since a thread cannot be stopped."""
    try:
        from distributed import Client, wait
    except ImportError:
        raise ValueError("--backend dask needs the dask extra: pip install 'precheck[dask]'") from None
    data_dir = data_dir.parent.resolve() / data_dir.name  # absolute for remote workers; a link stays a link
    todo = iter(cases)
    with Client(scheduler) as client:
        window = max(1, sum(client.nthreads().values()))
        topic = f"precheck-started-{client.id}"
        started: dict[Any, float] = {}  # task key -> when its check started, by this process's clock
        client.subscribe_topic(topic, lambda event: started.__setitem__(event[1], time.monotonic()))
        running: dict[Any, tuple[Case, float]] = {}  # future -> (its case, when it was submitted)

        def deadline(future: Any) -> float:  # a task no worker starts (all lost) still ends, STARTUP_SECONDS later
            case, submitted = running[future]
            return started.get(future.key, submitted + STARTUP_SECONDS) + case_timeout(case, options)

        while True:
            for case in itertools.islice(todo, window - len(running)):
                on_start(case)
                future = client.submit(_check_remote, case, data_dir, options, topic, pure=False)
                running[future] = (case, time.monotonic())
            if not running:
                return
            # a task's start arrives as an event: look again at least every START_POLL_SECONDS to see it
            wait_for = min(min(map(deadline, running)) - time.monotonic(), START_POLL_SECONDS)
            try:
                done, _ = wait(list(running), timeout=max(wait_for, 0.01), return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            for future in done:
                case, _ = running.pop(future)
                try:
                    yield future.result()
                except Exception as e:  # the cluster's failure is this case's row, never the run's end
                    yield failed(case, f"dask task failed: {type(e).__name__}: {str(e)[:300]}")
            now = time.monotonic()
            for future in [f for f in running if deadline(f) <= now]:
                case, _ = running.pop(future)
                for key in _restart_worker_of(client, future):  # its other tasks start again elsewhere
                    started.pop(key, None)
                yield failed(case, f"timed out after {case_timeout(case, options):g} s")


def _restart_worker_of(client: Any, future: Any) -> list[Any]:
    """Stop a stuck task the only way Dask can: restart the worker running it (its nanny starts a fresh one;
    Dask reschedules that worker's other tasks). The keys of that worker's tasks, which start over."""
    processing = client.processing()
    workers = [address for address, keys in processing.items() if future.key in keys]
    future.cancel()
    try:
        if workers:
            client.restart_workers(workers)
    except Exception:  # a worker without a nanny cannot be restarted: the cancelled task's thread stays busy
        return []
    return [key for address in workers for key in processing[address]]


READY = "ready"
STARTUP_SECONDS = 300.0


class WorkerStartError(RuntimeError):
    """No worker process could start (the environment, not a case): one line, exit code 2."""


# Device errors after which a process's device context cannot be trusted: its worker is replaced.
STICKY_ERRORS = ("CUDA error", "device-side assert", "CUBLAS_STATUS", "NPU error", "ACL error", "out of memory")


def _worker_main(conn: Connection, data_dir: Path, options: CheckOptions) -> None:
    # Ctrl-C and SIGTERM are the run's to handle (it stops its workers): this process started with them ignored
    # and leaves the terminal's process group, so a Ctrl-C or a group's SIGTERM never reaches it; what it starts
    # (compiler workers) gets the usual signals.
    with contextlib.suppress(OSError):
        os.setsid()
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    torch.set_num_threads(1)  # workers split the cores between them
    lookup("Torch.add")  # build the API table now, so no case's timeout pays for it
    try:
        conn.send(READY)
        while (case := conn.recv()) is not None:
            result = check_case(case, data_dir, options)
            retire = result.forward == ERROR and any(s in result.message for s in STICKY_ERRORS)
            conn.send((result, retire))
            if retire:
                return
    except (EOFError, OSError):  # the run is gone (killed): nothing left to do, nothing to say
        return


def _die_with_parent() -> None:
    """Linux: this worker gets SIGKILL when the run dies, however it dies (out of the run's process group, it
    would otherwise outlive a killed run for as long as its case takes)."""
    parent = multiprocessing.parent_process()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent.pid:  # the run died before the request took effect
        os._exit(0)


@dataclass
class _Worker:
    process: Any
    conn: Connection
    case: Case | None = None
    deadline: float = math.inf


class _Supervisor:
    """Worker processes fed one case at a time; a dead or stuck worker costs its case, not the run."""

    def __init__(self, data_dir: Path, options: CheckOptions, size: int) -> None:
        self.data_dir, self.options, self.size = data_dir, options, size
        self.context = multiprocessing.get_context("spawn")  # never fork a process that runs torch threads

    def _start(self, wait: bool = True) -> _Worker:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=_worker_main, args=(child, self.data_dir, self.options), daemon=True)
        with _signals_ignored_by_children():
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

    def run(self, cases: Iterable[Case], on_start: Callable[[Case], None]) -> Iterator[ApiResult]:
        workers: list[_Worker] = []
        try:
            for _ in range(self.size):
                workers.append(self._start(wait=False))  # they import torch in parallel
            for w in workers:
                self._ready(w)
            yield from self._serve(workers, iter(cases), on_start)
        finally:  # also on Ctrl-C, SIGTERM or a consumer that stops early: no worker outlives the run
            for w in workers:
                self._stop(w)

    def _serve(self, workers: list[_Worker], source: Iterator[Case], on_start: Callable[[Case], None]):
        pending = deque(itertools.islice(source, 1))  # the next case; the rest stay undecoded in the dump
        while pending or any(w.case for w in workers):
            for i, w in enumerate(workers):
                if w.case is None and pending and not w.process.is_alive():
                    workers[i] = w = self._replace(w)  # died between cases
                if w.case is None and pending:
                    w.case = pending.popleft()
                    pending.extend(itertools.islice(source, 1))
                    on_start(w.case)
                    w.deadline = time.monotonic() + case_timeout(w.case, self.options)
                    w.conn.send(w.case)
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
                if result is not None:
                    workers[i].case = None
                    yield result

    def _outcome(self, i: int, workers: list[_Worker], ready: set) -> ApiResult | None:
        """The busy worker ``i``'s result, its case's error row when it died or ran out of time (it is then
        replaced in ``workers``), or None while it works."""
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
                result = failed(w.case, _death(w.process.exitcode))
                workers[i] = self._replace(w)
        elif time.monotonic() >= w.deadline:
            result = failed(w.case, f"timed out after {case_timeout(w.case, self.options):g} s")
            workers[i] = self._replace(w)
        return result

    def _replace(self, worker: _Worker) -> _Worker:
        worker.process.kill()
        worker.process.join(5)
        worker.conn.close()
        return self._start()

    @staticmethod
    def _stop(worker: _Worker) -> None:
        if worker.case is None:  # idle: told to leave; busy (an interrupted run): killed at once
            try:
                worker.conn.send(None)
            except (OSError, ValueError):
                pass
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
            return f"worker crashed: signal {-exitcode} ({signal.Signals(-exitcode).name})"
        except ValueError:
            return f"worker crashed: signal {-exitcode}"
    return f"worker crashed: exit code {exitcode}"
