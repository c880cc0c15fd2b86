"""One seam over the ways to run cases (as joblib's backends are): in this process, in supervised worker
processes, or on a Dask cluster, chosen by ``--backend auto|inprocess|process|dask``; ``auto`` asks the cost
model (scheduling/costs.py) whether a pool pays off. Every backend yields one result per case in completion
order through the same loop body (scheduling/loop.py: the start told to the resume journal, the time limit, the
rows of a case that crashed its worker or ran past its limit); they differ only in where a case runs and how a
dead or stuck runner is replaced. In-process hands what it must not run (after a stuck case, calls that may crash
it) to a pool here, at the seam.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import ClassVar

from precheck.dump.records import Case
from precheck.errors import OptionError
from precheck.execution.options import BACKENDS, CheckOptions, check_scheduler
from precheck.results import ApiResult
from precheck.scheduling.costs import largest_first, use_pool
from precheck.scheduling.dask_cluster import Shipped, on_dask
from precheck.scheduling.inprocess import in_process
from precheck.scheduling.loop import Body, OnStart
from precheck.scheduling.process import Supervisor
from precheck.scheduling.tls import Tls


class Backend(ABC):
    """Where a run's cases run: a subclass names itself (``name``, what ``backend=`` asks for) and yields one
    result per case (``_run``); :func:`register_backend` makes it one of run_ut's backends."""

    name: ClassVar[str]

    def __init__(
        self, data_dir: Path, options: CheckOptions, workers: int, scheduler: str | None = None, tls: Tls | None = None
    ) -> None:
        self.data_dir, self.options, self.workers, self.scheduler, self.tls = data_dir, options, workers, scheduler, tls

    def processes(self, cases: Sequence[Case]) -> int:
        """How many processes hold a case at once: each one's share of the memory (--max-memory's default)."""
        return max(1, min(self.workers, len(cases)))

    def run(self, cases: Sequence[Case], on_start: OnStart) -> Iterator[ApiResult]:
        """One result per case, in completion order; ``on_start`` hears of each case before it starts."""
        return self._run(cases, Body(self.options, on_start))

    def stream(self, cases: Iterable[Case], on_start: OnStart, ship: Shipped | None = None) -> Iterator[ApiResult]:
        """One result per case of a stream whose end is not known yet (precheck record --check): cases run in the
        order they come, with no plan over the whole. ``ship`` gives a case's tensor files, sent with it where it
        runs on another machine (Dask); the other backends read them where they lie."""
        return self._stream(cases, Body(self.options, on_start), ship)

    @abstractmethod
    def _run(self, cases: Sequence[Case], body: Body) -> Iterator[ApiResult]:
        """One result per case, each run through ``body`` (the loop body every backend shares)."""

    def _stream(self, cases: Iterable[Case], body: Body, ship: Shipped | None) -> Iterator[ApiResult]:
        return self._run(cases, body)  # type: ignore[arg-type]  # in-process and Dask take cases as they come

    def _pool(self, cases: Iterable[Case], size: int, body: Body) -> Iterator[ApiResult]:
        return Supervisor(self.data_dir, body, size).run(cases)


class InProcess(Backend):
    name = "inprocess"

    def processes(self, cases: Sequence[Case]) -> int:
        return 1

    def _run(self, cases: Sequence[Case], body: Body) -> Iterator[ApiResult]:
        rest = yield from in_process(cases, self.data_dir, body)
        if rest.width:  # after a case that left this process's helper stuck, or calls that may crash it
            yield from self._pool(rest.cases, min(self.workers, rest.width), body)


class Processes(Backend):
    name = "process"

    def _run(self, cases: Sequence[Case], body: Body) -> Iterator[ApiResult]:
        return self._pool(largest_first(cases), self.processes(cases), body)

    def _stream(self, cases: Iterable[Case], body: Body, ship: Shipped | None) -> Iterator[ApiResult]:
        return self._pool(cases, max(1, self.workers), body)


class Dask(Backend):
    name = "dask"

    def processes(self, cases: Sequence[Case]) -> int:
        return super().processes(cases) if use_pool(cases, self.workers, self.options) else 1

    def _run(self, cases: Sequence[Case], body: Body) -> Iterator[ApiResult]:
        return self._stream(cases, body, None)

    def _stream(self, cases: Iterable[Case], body: Body, ship: Shipped | None) -> Iterator[ApiResult]:
        return on_dask(cases, self.data_dir, self.scheduler, body, ship, self.tls)  # type: ignore[arg-type]


_KINDS: dict[str, type[Backend]] = {}


def register_backend(kind: type[Backend]) -> type[Backend]:
    """``kind`` becomes the backend its ``name`` asks for (``run_ut(..., backend=name)``); usable as a class
    decorator. Its cases run through the loop body the others share, so its rows are theirs."""
    _KINDS[kind.name] = kind
    if kind.name not in BACKENDS:
        BACKENDS.append(kind.name)  # the command line's choices, torch-free
    return kind


for _kind in (InProcess, Processes, Dask):
    register_backend(_kind)


def check_backend(name: str, scheduler: str | None = None) -> None:
    """OptionError for a backend no one registered, or a scheduler it does not go with: an online check makes it
    when the recorder is made, so the user's error is theirs at once, not a hook's in the middle of a step."""
    if name != "auto" and name not in _KINDS:
        raise OptionError(f"unknown backend {name!r} (choose from {', '.join(['auto', *_KINDS])})")
    check_scheduler(name, scheduler)


def backend_for(
    name: str,
    cases: Sequence[Case],
    data_dir: Path,
    options: CheckOptions,
    workers: int,
    scheduler: str | None = None,
    isolate: bool = False,
    tls: Tls | None = None,
) -> Backend:
    """The backend ``name`` asks for; ``auto``: a Dask cluster when a scheduler is given, else worker processes
    when they pay off; ``isolate`` (cases suspected of killing a run) asks for worker processes whatever their
    number, unless the run is on a cluster. ``tls``: the TLS files of a ``tls://`` scheduler."""
    check_backend(name, scheduler)
    if name == "auto":
        name = "dask" if scheduler else "process" if isolate or use_pool(cases, workers, options) else "inprocess"
    check_scheduler(name, scheduler)
    if isolate and name == "inprocess":
        name = "process"
    return _KINDS[name](data_dir, options, workers, scheduler, tls)
