"""The loop body every backend shares, wherever it runs its cases (scheduling/backends.py: in this process, in
supervised worker processes, on a Dask cluster). What a run promises of a case is said here once, so it holds
the same under every ``--backend``: the resume journal hears of a case before it starts, its time limit is
``costs.case_timeout``'s, a case past it is a SKIP row (results.timed_out), a case that killed the worker running
it is that case's error row ("worker crashed: ..."), and every thread that checks cases is prepared alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from api_registry import lookup
from precheck.dump.records import Case
from precheck.execution.options import CheckOptions
from precheck.results import ApiResult, failed, timed_out
from precheck.scheduling.costs import case_timeout

OnStart = Callable[[Case], None]


def prepare_worker() -> None:
    """Ready this thread (a pool's worker, a Dask task, the in-process helper) to check cases. One intra-op
    thread, so a CPU target computes bit for bit the same wherever a case runs (verdicts never depend on -n or
    the backend) and workers split the cores; the API table built now, so no case's time limit pays for it."""
    if torch.get_num_threads() != 1:  # per thread where torch uses OpenMP
        torch.set_num_threads(1)
    lookup("Torch.add")


@dataclass(frozen=True)
class Body:
    """The run's side of one case: told to start, then turned into a row whatever became of it."""

    options: CheckOptions
    on_start: OnStart

    def start(self, case: Case) -> float:
        """Journal ``case`` as started (a resume isolates the cases running when a run died); the seconds it
        may take from now."""
        self.on_start(case)
        return case_timeout(case, self.options)

    def late(self, case: Case) -> ApiResult:
        """The row of a case past its time limit: SKIP, not graded (a busy machine says nothing of precision)."""
        return timed_out(case, case_timeout(case, self.options))

    @staticmethod
    def crashed(case: Case, how: str) -> ApiResult:
        """The row of a case whose worker died running it (``how``: a signal, an exit code, a lost Dask
        worker): its error, while the run goes on."""
        return failed(case, f"worker crashed: {how}")
