"""Schedule cases over a joblib (loky) worker pool and stream results back as they complete.

A task carries the case (argument specs and file names, never tensors); the worker loads its own inputs. Starting
a pool costs about two seconds on a 2-core machine (every worker imports torch), so a dump whose estimated serial
cost is below that runs in this process instead: a small dump never pays for a pool it does not need.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import torch

from precheck.check import ApiResult, CheckOptions, check_case
from precheck.dump import Case
from precheck.inputs import iter_specs

# Serial cost model, calibrated with benchmarks/bench_run_ut.py on a 2-core machine.
SECONDS_PER_CASE = 4e-3
SECONDS_PER_ELEMENT = 2e-8             # loaded from a file
SECONDS_PER_GENERATED_ELEMENT = 2.5e-7  # rebuilt from statistics (precheck/synth.py)
SECONDS_PER_COMPILE = 4.0              # torch.compile (inductor, CPU) of one signature, forward and backward
POOL_START_SECONDS = 2.0


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def estimated_serial_seconds(cases: list[Case], options: CheckOptions) -> float:
    seconds = len(cases) * SECONDS_PER_CASE
    if options.target == "compile":
        seconds += SECONDS_PER_COMPILE * len({case.signature() for case in cases if not case.problem})
    for case in cases:
        for spec in iter_specs((case.args, case.kwargs, case.grad_outputs)):
            generated = options.force_random or spec.data_name is None
            seconds += spec.numel * (SECONDS_PER_GENERATED_ELEMENT if generated else SECONDS_PER_ELEMENT)
    return seconds


def use_pool(cases: list[Case], workers: int, options: CheckOptions = CheckOptions()) -> bool:
    """A pool pays off when the work it saves exceeds what it costs to start."""
    if workers <= 1 or len(cases) < 2:
        return False
    serial = estimated_serial_seconds(cases, options)
    return serial - serial / min(workers, len(cases)) > POOL_START_SECONDS


def _check_in_worker(case: Case, data_dir: Path, options: CheckOptions) -> ApiResult:
    # Workers split the cores between them; intra-op threads on top of that would oversubscribe.
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    return check_case(case, data_dir, options)


def run_cases(cases: list[Case], data_dir: Path, options: CheckOptions, workers: int) -> Iterator[ApiResult]:
    """Yield one ApiResult per case, in completion order."""
    if not use_pool(cases, workers, options):
        # One intra-op thread here too, so a CPU target computes bit for bit what a pool worker computes: the
        # verdicts never depend on -n. Work small enough to run here gains little from threads anyway.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for case in cases:
                yield check_case(case, data_dir, options)
        finally:
            torch.set_num_threads(threads)
        return
    from joblib import Parallel, delayed
    parallel = Parallel(n_jobs=min(workers, len(cases)), backend="loky", return_as="generator_unordered")
    yield from parallel(delayed(_check_in_worker)(case, data_dir, options) for case in cases)
