"""What running a set of cases costs, estimated before any runs: the serial seconds (calibrated on a 2-core
machine), whether a pool of worker processes pays off, how many processes hold a case at once (each one's memory
share), and how long one case may take.

Starting a pool costs about two seconds on a 2-core machine (every worker imports torch), so a dump whose
estimated serial cost is below that runs in this process instead: a small dump never pays for a pool it does not
need (``--backend auto``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from precheck.dump.records import Case
from precheck.execution.options import CheckOptions
from precheck.execution.targets import target_for
from precheck.inputs.builder import iter_specs

# Serial cost model, calibrated with benchmarks/bench_run_ut.py on a 2-core machine.
SECONDS_PER_CASE = 4e-3
SECONDS_PER_ELEMENT = 2e-8  # loaded from a file
SECONDS_PER_GENERATED_ELEMENT = 2.5e-7  # rebuilt from statistics (precheck/inputs/synth.py)
SECONDS_PER_COMPILE = 4.0  # torch.compile (inductor, CPU) of one signature, forward and backward
POOL_START_SECONDS = 2.0
DEFAULT_TIMEOUT = 120.0  # seconds per API before the scaling by size
MAX_TIMEOUT = 86400.0  # a day: the most any wait is told (the OS refuses larger timestamps)
START_POLL_SECONDS = 0.5  # how late a Dask task's start may be seen (its timeout runs from then)
STARTUP_SECONDS = 300.0  # how long a worker may take to start (import torch) before the run gives up on it


MAX_WORKERS_PER_CORE = 4  # more only adds processes that wait for a core (and memory shares that shrink)


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def worker_count(requested: int | None) -> int:
    """``-n`` as given, at least 1 and at most MAX_WORKERS_PER_CORE per core; the cores when not given."""
    cores = default_workers()
    return cores if requested is None else max(1, min(requested, MAX_WORKERS_PER_CORE * cores))


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
