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
from collections.abc import Iterator, Sequence

from api_registry.classes import api_class
from precheck.dump.record_names import api_of
from precheck.dump.records import Case
from precheck.execution.limits import HEAVY_CLASSES, SECONDS_PER_CASE, case_limit, input_seconds, work
from precheck.execution.limits import MAX_TIMEOUT as MAX_TIMEOUT  # the longest wait the scheduler tells the OS
from precheck.execution.options import CheckOptions
from precheck.execution.targets import target_for

# Calibrated with benchmarks/bench_run_ut.py on a 2-core machine, as precheck/execution/limits.py's model.
SECONDS_PER_COMPILE = 4.0  # torch.compile (inductor, CPU) of one signature, forward and backward
POOL_START_SECONDS = 2.0
START_POLL_SECONDS = 0.5  # how late a Dask task's start may be seen (its timeout runs from then)
STARTUP_SECONDS = 300.0  # how long a worker may take to start (import torch) before the run gives up on it


MAX_WORKERS_PER_CORE = 4  # more only adds processes that wait for a core (and memory shares that shrink)


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_max_memory(workers: int) -> int:
    """Half the machine's memory, shared among the workers actually started (each may hold a case at once)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 16 * 2**30
    return total // (2 * workers)


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
        seconds += input_seconds(case, options)
    return seconds


def use_pool(cases: Sequence[Case], workers: int, options: CheckOptions = CheckOptions()) -> bool:
    """A pool pays off when the work it saves exceeds what it costs to start."""
    if workers <= 1 or len(cases) < 2:
        return False
    share = 1 - 1 / min(workers, len(cases))  # of the serial time that a pool saves
    return estimated_serial_seconds(cases, options, POOL_START_SECONDS / share + 1) * share > POOL_START_SECONDS


# A case past this much work (multiply-adds x 2, forward and backward, or its elements' equivalent) is started
# before the dump's other cases, largest first. A pool's run takes at least its longest case: on a 2-core machine a
# LLaMA-sized LM head (100 GFLOP, 72 s of bf16 matmul on a CPU without bf16 instructions) recorded near the end of
# the step kept one worker busy for a minute after the other had run out of work (-n 2 was 1.34x -n 1); with bf16
# kernels it is the loss after it, a cross_entropy over 512 x 32,000 logits (1.2 s alone at the end of a 9.6 s run).
HEAVY_FLOPS = 2.0**30
# Past this many cases only matmuls and convolutions (known by name) are decoded to be sized: decoding every case
# twice would cost a 50,000-record dump more than a tail can; a dump of few records is where one heavy call rules.
SIZE_ALL_UP_TO = 2000


def case_timeout(case: Case, options: CheckOptions) -> float:
    """How long ``case`` may take: precheck/execution/limits.py's ``case_limit`` with what the target's kind adds
    (a compiled call's compilation)."""
    return case_limit(case, options, target_for(options).extra_timeout)


def largest_first(cases: Sequence[Case]) -> Iterator[Case]:
    """The cases in the order a pool should start them: heavy ones first, largest first, then the rest in dump
    order. A dump of up to SIZE_ALL_UP_TO cases is sized whole; a larger one only by its matmul-like and
    convolution records (known by name, without decoding the others). Each case is decoded again when it is
    started, so nothing is held meanwhile."""
    names = getattr(cases, "names", None) or [case.name for case in cases]
    every = len(names) <= SIZE_ALL_UP_TO
    candidates = [i for i, n in enumerate(names) if every or api_class(api_of(n)) in HEAVY_CLASSES]
    sized = [(work(cases[i]), i) for i in candidates]
    heavy = sorted((pair for pair in sized if pair[0] >= HEAVY_FLOPS), key=lambda pair: (-pair[0], pair[1]))
    first = {i for _, i in heavy}
    yield from (cases[i] for _, i in heavy)
    yield from (cases[i] for i in range(len(cases)) if i not in first)
