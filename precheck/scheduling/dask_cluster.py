"""The Dask backend: cases as tasks of a Dask cluster whose workers see the dump's path (``precheck[dask]``)."""

from __future__ import annotations

import itertools
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from precheck.dump.records import Case
from precheck.errors import OptionError
from precheck.execution.check import check_case
from precheck.execution.options import CheckOptions
from precheck.results import ApiResult, failed
from precheck.scheduling.costs import START_POLL_SECONDS, STARTUP_SECONDS
from precheck.scheduling.loop import Body, prepare_worker
from precheck.scheduling.plain import Refused, from_plain, to_plain
from precheck.scheduling.tls import Tls, security

Shipped = Callable[[Case], dict[str, bytes]]  # a case's tensor files, by name, sent with it


def _check_remote(
    case: Case, data_dir: Path, options: CheckOptions, topic: str, files: dict[str, bytes] | None = None
) -> str:
    """One case on a Dask worker, with the thread discipline of a local worker; its result as plain JSON text
    (scheduling/plain.py), never an object the run would have to unpickle, its failure included. It tells the run
    (an event on ``topic``) when the check itself starts: the case's timeout counts from then, never the time the
    task spent queued, behind a worker's restart or in a fresh worker's first import of torch."""
    from distributed import get_worker

    prepare_worker()
    worker = get_worker()
    worker.log_event(topic, worker.get_current_task())
    try:
        return to_plain(_check_here(case, data_dir, options, files))
    except Exception as e:  # as text too: an exception would reach the run pickled
        return to_plain(failed(case, f"dask task failed: {type(e).__name__}: {str(e)[:300]}"))


def _check_here(case: Case, data_dir: Path, options: CheckOptions, files: dict[str, bytes] | None) -> ApiResult:
    """``files``: the case's tensor files sent with it, for a worker that cannot see ``data_dir``; they live in
    the worker's memory (a tmpfs where it has one) for the case's check only."""
    if files is None:
        return check_case(case, data_dir, options)
    shm = Path("/dev/shm")
    here = Path(tempfile.mkdtemp(prefix="precheck-case-", dir=shm if shm.is_dir() else None))
    try:
        for name, data in files.items():
            if Path(name).name != name:  # a bare file name, as the recorder makes them
                raise ValueError(f"not a tensor file name: {name[:80]!r}")
            (here / name).write_bytes(data)
        return check_case(case, here, options)
    finally:
        shutil.rmtree(here, ignore_errors=True)


def on_dask(
    cases: Sequence[Case],
    data_dir: Path,
    scheduler: str,
    body: Body,
    ship: Shipped | None = None,
    tls: Tls | None = None,
) -> Iterator[ApiResult]:
    """Cases as tasks of a Dask cluster whose workers see the dump's path, as many at a time as the cluster has
    threads: a case is journalled as started when it starts, and memory does not grow with the dump. A task whose
    worker dies while running it alone is the case's "worker crashed" row, as in a pool, and is not run again
    (Dask would retry it on three more workers, killing them too); one that runs past its timeout is a SKIP row,
    and its worker is restarted, since a thread cannot be stopped. ``ship`` gives a case's tensor files to send
    with it (an online check: the workers need not see this machine's files)."""
    try:
        from distributed import wait
    except ImportError:
        raise OptionError("--backend dask needs the dask extra: pip install 'precheck[dask]'") from None
    data_dir = data_dir.parent.resolve() / data_dir.name  # absolute for remote workers; a link stays a link
    todo = iter(cases)
    with _client(scheduler, tls) as client:
        window = max(1, sum(client.nthreads().values()))
        topic = f"precheck-started-{client.id}"
        started: dict[Any, float] = {}  # task key -> when its check started, by this process's clock
        client.subscribe_topic(topic, lambda event: started.__setitem__(event[1], time.monotonic()))
        crashed: dict[Any, str] = {}  # task key -> the worker that died running it alone
        client.subscribe_topic("all", lambda event: _note_crash(event[1], started, crashed))
        running: dict[Any, tuple[Case, float, float]] = {}  # future -> (its case, when submitted, its time limit)

        def deadline(future: Any) -> float:  # a task no worker starts (all lost) still ends, STARTUP_SECONDS later
            _, submitted, seconds = running[future]
            return started.get(future.key, submitted + STARTUP_SECONDS) + seconds

        try:
            while True:
                for case in itertools.islice(todo, window - len(running)):
                    seconds = body.start(case)
                    files = ship(case) if ship is not None else None
                    future = client.submit(_check_remote, case, data_dir, body.options, topic, files, pure=False)
                    running[future] = (case, time.monotonic(), seconds)
                if not running:
                    return
                # a task's start arrives as an event: look again at least every START_POLL_SECONDS to see it
                wait_for = min(min(map(deadline, running)) - time.monotonic(), START_POLL_SECONDS)
                try:
                    done, _ = wait(list(running), timeout=max(wait_for, 0.01), return_when="FIRST_COMPLETED")
                except TimeoutError:
                    done = set()
                for future in done:
                    case, *_ = running.pop(future)
                    yield _result(client, future, case)
                for future in [f for f in running if f.key in crashed]:
                    case, *_ = running.pop(future)
                    future.cancel()  # Dask would run it again on the next workers, to kill them too
                    yield body.crashed(case, f"Dask's worker {crashed.pop(future.key)} died running it")
                now = time.monotonic()
                for future in [f for f in running if deadline(f) <= now]:
                    case, *_ = running.pop(future)
                    for key in _restart_worker_of(client, future):  # its other tasks start again elsewhere
                        started.pop(key, None)
                    yield body.late(case)
        finally:  # else the scheduler's next event to it (this client leaving) is a CRITICAL log line
            client.unsubscribe_topic("all")


def _client(scheduler: str, tls: Tls | None) -> Any:
    """A client of the scheduler: one it cannot reach, or not as its TLS asks, is the user's error in one line."""
    from distributed import Client

    logging.getLogger("distributed.protocol.core").addFilter(_REFUSAL_TOLD)  # once: a filter is added once
    try:
        return Client(scheduler, security=security(scheduler, tls))
    except (OSError, TypeError, ValueError) as e:  # TypeError: a tls:// address and no certificate (Dask's words)
        raise OptionError(f"cannot connect to the Dask scheduler {scheduler}: {str(e)[:300]}") from None


class _RefusalTold(logging.Filter):
    """distributed logs a traceback for data it refuses to read (a pickled result, which _result asks it to
    refuse): the case's row says it in one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (isinstance(error, TypeError) and "but only able to deserialize" in str(error))


_REFUSAL_TOLD = _RefusalTold()


def _result(client: Any, future: Any, case: Case) -> ApiResult:
    """A finished task's result, asked of the cluster as msgpack data and taken only as plain text: a worker that
    sends anything else (a pickle: Dask's default for a task's result) is refused before it is read. The cluster's
    failure is this case's row, never the run's end."""
    if future.status != "finished":  # an error Dask made (KilledWorker): _check_remote raises none
        return failed(case, f"dask task failed: {type(future.exception()).__name__}: {str(future.exception())[:300]}")
    try:
        answer = client.sync(client.scheduler.gather, keys=[future.key], deserializers=["msgpack"])
    except TypeError as e:  # distributed's refusal of data serialized otherwise ("Data serialized with pickle ...")
        return failed(case, f"dask worker's result refused: not plain data ({str(e)[:300]})")
    if answer.get("status") != "OK":
        return failed(case, "dask task failed: its result was lost with its worker")
    try:
        return from_plain(answer["data"].get(future.key), case)
    except Refused as e:
        return failed(case, f"dask worker's result refused: {e}")


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


def _note_crash(event: Any, started: dict[Any, float], crashed: dict[Any, str]) -> None:
    """A worker that left unasked (it crashed: Dask does not say how) while running one task: that task crashed it,
    as a pool's worker that dies is its case's. Tasks that shared a dead worker are left to Dask's retries; their
    timeouts count again from their next start, not from the start the crash ended."""
    if not isinstance(event, dict) or event.get("action") != "remove-worker" or event.get("expected"):
        return
    processing = list(event.get("processing-tasks") or ())
    for key in processing:
        started.pop(key, None)
    if len(processing) == 1:
        crashed[processing[0]] = event.get("worker", "?")
