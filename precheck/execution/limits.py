"""What one case costs and how long it may take, estimated before it runs: its work in FLOPs (a matmul's or a
convolution's products, any other call's elements) and the seconds to load or rebuild its inputs, calibrated on a
2-core machine. The scheduler sizes and orders whole runs with it (precheck/scheduling/costs.py); a target that
stops a call itself (MindSpore's worker) reads its case's limit here, below the scheduler.
"""

from __future__ import annotations

import math

from api_registry.classes import api_class, base_name
from api_registry.reduced import reduced_length
from api_registry.size_args import arg_at, count_of, shape_of
from precheck.dump.records import Case, TensorSpec
from precheck.execution.options import CheckOptions
from precheck.inputs.builder import iter_specs
from precheck.walk import flatten

# Serial cost model, calibrated with benchmarks/bench_run_ut.py on a 2-core machine.
SECONDS_PER_CASE = 4e-3
SECONDS_PER_ELEMENT = 2e-8  # loaded from a file
SECONDS_PER_GENERATED_ELEMENT = 2.5e-7  # rebuilt from statistics (precheck/inputs/synth.py)
# A case's default time limit: TIMEOUT_FLOOR plus TIMEOUT_SAFETY times the seconds the model predicts for it, its
# work at the slowest rate measured, one core without bf16 instructions (a LLaMA-sized LM head: 100 GFLOP, 72 s).
# On a busy machine a case takes several times its prediction; the floor covers what size does not (an API's first
# call, a stall). Measured on the 2,340 calls of the 47 bundled dumps, two runs at once on 2 cores under a load of 5
# to 7: the slowest took 8% of its limit (max_unpool1d, 4.9 s of 60 s), every other one under 1.2%.
TIMEOUT_FLOOR = 60.0
TIMEOUT_SAFETY = 20.0
SLOWEST_FLOPS_PER_SECOND = 1.0e9
MAX_TIMEOUT = 86400.0  # a day: the most any wait is told (the OS refuses larger timestamps)
HEAVY_CLASSES = ("matmul", "conv")  # the calls whose work is their products (api_registry.classes)
# What an element costs any other call, in matmul FLOPs: a pointwise op, a loss or a softmax over n elements takes
# about as long as a matmul of 500 n FLOPs once its float64 golden, its backward and its grading are counted
# (measured on the heavy bf16 step: cross_entropy, 32M elements, 1.2 s; a q/k/v linear, 9.7 GFLOP, 0.46 s).
FLOPS_PER_ELEMENT = 500.0


def input_seconds(case: Case, options: CheckOptions) -> float:
    """Seconds to load a case's input tensors from their files, or rebuild them from their statistics."""
    seconds = 0.0
    for spec in iter_specs((case.args, case.kwargs, case.grad_outputs)):
        generated = options.force_random or spec.data_name is None
        seconds += spec.numel * (SECONDS_PER_GENERATED_ELEMENT if generated else SECONDS_PER_ELEMENT)
    return seconds


def case_limit(case: Case, options: CheckOptions, extra_seconds: float) -> float:
    """``--timeout`` as given, or a generous default derived from the case's predicted cost (its FLOPs, its
    elements to load or rebuild) and compilation. A fixed allowance per input element ignored what a call
    computes: a matmul's time follows its FLOPs, not the size of its inputs. ``extra_seconds``: what the target's
    kind adds (Target.extra_timeout)."""
    if options.timeout is not None:
        return min(options.timeout, MAX_TIMEOUT)
    predicted = SECONDS_PER_CASE + work(case) / SLOWEST_FLOPS_PER_SECOND + input_seconds(case, options)
    return min(TIMEOUT_FLOOR + TIMEOUT_SAFETY * predicted + extra_seconds, MAX_TIMEOUT)


def flops(case: Case) -> float:
    """A matmul-like call's or a convolution's work: 2 x output elements x the length each sums
    (api_registry.reduced), three times with a backward (two more products of the same size); 0 for any other
    call, whose time follows its elements, and for one whose arguments do not say how long its sums are."""
    if api_class(case.api) not in HEAVY_CLASSES:
        return 0.0
    outputs = [s for s in flatten(case.outputs) if isinstance(s, TensorSpec)]
    reduced = reduced_length(case.api, case.args, case.kwargs)
    if not outputs or reduced is None:
        return 0.0
    return 2.0 * outputs[0].numel * reduced * (3 if case.has_backward else 1)


def powers(case: Case) -> float:
    """``matrix_power(A, n)``'s work: about 2 log2(n) products of A's size (n squarings and the multiplies of its
    set bits), so an exponent of 2**62 is 124 matmuls, not one of A's elements; 0 for any other call."""
    if not base_name(case.api)[1].endswith("matrix_power"):
        return 0.0
    shape = shape_of(arg_at(case.args, case.kwargs, 0, "input")) or ()
    exponent = count_of(arg_at(case.args, case.kwargs, 1, "n", 1))
    if len(shape) < 2 or exponent < 2:
        return 0.0
    products = 2 * math.log2(exponent)  # inf for an infinite exponent: the longest limit, never a crash
    return 2.0 * math.prod(shape) * shape[-1] * products * (3 if case.has_backward else 1)


def work(case: Case) -> float:
    """A case's work in matmul FLOPs: its products' for a matmul or a convolution whose sums are known, or a
    matrix power's, its elements' for the rest."""
    products = flops(case) or powers(case)
    if products:
        return products
    specs = iter_specs((case.args, case.kwargs, case.outputs, case.grad_outputs))
    return FLOPS_PER_ELEMENT * sum(s.numel for s in specs)
