"""One seam over the ways to run cases (as joblib's backends are): in this process, in supervised worker
processes, or on a Dask cluster, chosen by ``--backend auto|inprocess|process|dask``; ``auto`` asks the cost
model (scheduling/costs.py) whether a pool pays off. Every backend yields one result per case in completion
order, tells ``on_start`` before a case starts (the resume journal), and turns a case that crashes or runs past
its timeout into that case's row (an error row; a SKIP for a timeout: results.timed_out).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import ClassVar

from precheck.dump.records import Case
from precheck.execution.options import BACKENDS, CheckOptions
from precheck.results import ApiResult
from precheck.scheduling.costs import largest_first, use_pool
from precheck.scheduling.dask_cluster import on_dask
from precheck.scheduling.inprocess import in_process
from precheck.scheduling.process import Supervisor

OnStart = Callable[[Case], None]


class Backend:
    name: ClassVar[str]

    def __init__(self, data_dir: Path, options: CheckOptions, workers: int, scheduler: str | None = None) -> None:
        self.data_dir, self.options, self.workers, self.scheduler = data_dir, options, workers, scheduler

    def processes(self, cases: Sequence[Case]) -> int:
        """How many processes hold a case at once: each one's share of the memory (--max-memory's default)."""
        return max(1, min(self.workers, len(cases)))

    def run(self, cases: Sequence[Case], on_start: OnStart) -> Iterator[ApiResult]:
        raise NotImplementedError


class InProcess(Backend):
    name = "inprocess"

    def processes(self, cases: Sequence[Case]) -> int:
        return 1

    def run(self, cases: Sequence[Case], on_start: OnStart) -> Iterator[ApiResult]:
        return in_process(cases, self.data_dir, self.options, self.workers, on_start)


class Processes(Backend):
    name = "process"

    def run(self, cases: Sequence[Case], on_start: OnStart) -> Iterator[ApiResult]:
        return Supervisor(self.data_dir, self.options, self.processes(cases)).run(largest_first(cases), on_start)


class Dask(Backend):
    name = "dask"

    def processes(self, cases: Sequence[Case]) -> int:
        return super().processes(cases) if use_pool(cases, self.workers, self.options) else 1

    def run(self, cases: Sequence[Case], on_start: OnStart) -> Iterator[ApiResult]:
        if self.scheduler is None:
            raise ValueError("--backend dask needs --scheduler ADDRESS")
        return on_dask(cases, self.data_dir, self.options, self.scheduler, on_start)


_KINDS = {kind.name: kind for kind in (InProcess, Processes, Dask)}


def backend_for(
    name: str,
    cases: Sequence[Case],
    data_dir: Path,
    options: CheckOptions,
    workers: int,
    scheduler: str | None = None,
    isolate: bool = False,
) -> Backend:
    """The backend ``name`` asks for; ``auto``: a Dask cluster when a scheduler is given, else worker processes
    when they pay off; ``isolate`` (cases suspected of killing a run) asks for worker processes whatever their
    number, unless the run is on a cluster."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
    if name == "auto":
        name = "dask" if scheduler else "process" if isolate or use_pool(cases, workers, options) else "inprocess"
    elif isolate and name == "inprocess":
        name = "process"
    return _KINDS[name](data_dir, options, workers, scheduler)


def run_cases(
    cases: Sequence[Case],
    data_dir: Path,
    options: CheckOptions,
    workers: int,
    on_start: OnStart = lambda case: None,
    backend: str = "auto",
    scheduler: str | None = None,
    isolate: bool = False,
) -> Iterator[ApiResult]:
    """Yield one ApiResult per case, in completion order, from the backend ``backend`` names."""
    if not len(cases):
        return
    yield from backend_for(backend, cases, data_dir, options, workers, scheduler, isolate).run(cases, on_start)
