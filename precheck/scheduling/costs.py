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
from api_registry.reduced import reduced_length
from precheck.dump.records import Case, TensorSpec
from precheck.execution.options import CheckOptions
from precheck.execution.targets import target_for
from precheck.inputs.builder import iter_specs
from precheck.walk import flatten

# Serial cost model, calibrated with benchmarks/bench_run_ut.py on a 2-core machine.
SECONDS_PER_CASE = 4e-3
SECONDS_PER_ELEMENT = 2e-8  # loaded from a file
SECONDS_PER_GENERATED_ELEMENT = 2.5e-7  # rebuilt from statistics (precheck/inputs/synth.py)
SECONDS_PER_COMPILE = 4.0  # torch.compile (inductor, CPU) of one signature, forward and backward
POOL_START_SECONDS = 2.0
# A case's default time limit: TIMEOUT_FLOOR plus TIMEOUT_SAFETY times the seconds the model predicts for it, its
# work at the slowest rate measured, one core without bf16 instructions (a LLaMA-sized LM head: 100 GFLOP, 72 s).
# On a busy machine a case takes several times its prediction; the floor covers what size does not (an API's first
# call, a stall). Measured on the 2,340 calls of the 47 bundled dumps, two runs at once on 2 cores under a load of 5
# to 7: the slowest took 8% of its limit (max_unpool1d, 4.9 s of 60 s), every other one under 1.2%.
TIMEOUT_FLOOR = 60.0
TIMEOUT_SAFETY = 20.0
SLOWEST_FLOPS_PER_SECOND = 1.0e9
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
        seconds += _input_seconds(case, options)
    return seconds


def _input_seconds(case: Case, options: CheckOptions) -> float:
    """Seconds to load a case's input tensors from their files, or rebuild them from their statistics."""
    seconds = 0.0
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
    """``--timeout`` as given, or a generous default derived from the case's predicted cost (its FLOPs, its
    elements to load or rebuild) and compilation. A fixed allowance per input element ignored what a call
    computes: a matmul's time follows its FLOPs, not the size of its inputs."""
    if options.timeout is not None:
        return min(options.timeout, MAX_TIMEOUT)
    predicted = SECONDS_PER_CASE + work(case) / SLOWEST_FLOPS_PER_SECOND + _input_seconds(case, options)
    return min(TIMEOUT_FLOOR + TIMEOUT_SAFETY * predicted + target_for(options).extra_timeout, MAX_TIMEOUT)


# A case past this much work (multiply-adds x 2, forward and backward, or its elements' equivalent) is started
# before the dump's other cases, largest first. A pool's run takes at least its longest case: on a 2-core machine a
# LLaMA-sized LM head (100 GFLOP, 72 s of bf16 matmul on a CPU without bf16 instructions) recorded near the end of
# the step kept one worker busy for a minute after the other had run out of work (-n 2 was 1.34x -n 1); with bf16
# kernels it is the loss after it, a cross_entropy over 512 x 32,000 logits (1.2 s alone at the end of a 9.6 s run).
HEAVY_FLOPS = 2.0**30
_HEAVY_CLASSES = ("matmul", "conv")
# What an element costs any other call, in matmul FLOPs: a pointwise op, a loss or a softmax over n elements takes
# about as long as a matmul of 500 n FLOPs once its float64 golden, its backward and its grading are counted
# (measured on the heavy bf16 step: cross_entropy, 32M elements, 1.2 s; a q/k/v linear, 9.7 GFLOP, 0.46 s).
FLOPS_PER_ELEMENT = 500.0
# Past this many cases only matmuls and convolutions (known by name) are decoded to be sized: decoding every case
# twice would cost a 50,000-record dump more than a tail can; a dump of few records is where one heavy call rules.
SIZE_ALL_UP_TO = 2000


def flops(case: Case) -> float:
    """A matmul-like call's or a convolution's work: 2 x output elements x the length each sums
    (api_registry.reduced), three times with a backward (two more products of the same size); 0 for any other
    call, whose time follows its elements, and for one whose arguments do not say how long its sums are."""
    if api_class(case.api) not in _HEAVY_CLASSES:
        return 0.0
    outputs = [s for s in flatten(case.outputs) if isinstance(s, TensorSpec)]
    reduced = reduced_length(case.api, case.args, case.kwargs)
    if not outputs or reduced is None:
        return 0.0
    return 2.0 * outputs[0].numel * reduced * (3 if case.has_backward else 1)


def work(case: Case) -> float:
    """A case's work in matmul FLOPs: its products' for a matmul or a convolution whose sums are known, its
    elements' for the rest."""
    products = flops(case)
    if products:
        return products
    specs = iter_specs((case.args, case.kwargs, case.outputs, case.grad_outputs))
    return FLOPS_PER_ELEMENT * sum(s.numel for s in specs)


def largest_first(cases: Sequence[Case]) -> Iterator[Case]:
    """The cases in the order a pool should start them: heavy ones first, largest first, then the rest in dump
    order. A dump of up to SIZE_ALL_UP_TO cases is sized whole; a larger one only by its matmul-like and
    convolution records (known by name, without decoding the others). Each case is decoded again when it is
    started, so nothing is held meanwhile."""
    names = getattr(cases, "names", None) or [case.name for case in cases]
    every = len(names) <= SIZE_ALL_UP_TO
    candidates = [i for i, n in enumerate(names) if every or api_class(n.rsplit(".", 1)[0]) in _HEAVY_CLASSES]
    sized = [(work(cases[i]), i) for i in candidates]
    heavy = sorted((pair for pair in sized if pair[0] >= HEAVY_FLOPS), key=lambda pair: (-pair[0], pair[1]))
    first = {i for _, i in heavy}
    yield from (cases[i] for _, i in heavy)
    yield from (cases[i] for i in range(len(cases)) if i not in first)
