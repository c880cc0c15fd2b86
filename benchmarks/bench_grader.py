"""Cost of grading one output: compare() against the floor, a plain cosine + max-abs pass over the same tensors.

    python benchmarks/bench_grader.py [--sizes 1e4,1e5,1e6,4e6,1e7] [--repeat 7]

The floor is what any check must do at least: the target in float64, one dot product and two norms, and the
largest absolute difference, as a user would write it (full-size temporaries) and in buffers made once ("warm":
no page faults, the pure compute floor). compare() computes all 17 details
columns and the verdict; the goal is a small constant multiple of the floor at every size. Calls of the two are
interleaved and each is timed ``--repeat`` times, the minimum kept (other processes only ever add time), with one
intra-op thread as in a pool worker. Times are the thread's CPU time (on a busy machine wall time also counts the
time other processes held the core); the wall-time ratio is printed beside it. Page faults are the minor faults
of one call (getrusage), the smallest seen: fresh full-size temporaries fault in every page they touch.

To compare with another version of the grader, run this script with that checkout first on PYTHONPATH; the
first line printed names the grader's file.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable

import torch

from precheck.grader import compare
from precheck.grader import metrics as grader_metrics


def floor_pass(target: torch.Tensor, golden: torch.Tensor) -> tuple[float, float]:
    t, g = target.double(), golden.double()
    cosine = torch.dot(t, g) / (torch.linalg.vector_norm(t) * torch.linalg.vector_norm(g))
    return float(cosine), float((t - g).abs().max())


def warm_floor(target: torch.Tensor, golden: torch.Tensor, t: torch.Tensor, d: torch.Tensor) -> tuple[float, float]:
    """The same pass in buffers made once (``t``, ``d``: float64, the size of the output): no page faults."""
    t.copy_(target)
    cosine = torch.dot(t, golden) / (torch.linalg.vector_norm(t) * torch.linalg.vector_norm(golden))
    return float(cosine), float(torch.sub(t, golden, out=d).abs_().max())


def measure(call: Callable[[], object]) -> tuple[float, float, int]:
    """CPU seconds, wall seconds and minor page faults of one call."""
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cpu, wall = time.thread_time(), time.perf_counter()
    call()
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    return cpu, wall, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1e4,1e5,1e6,4e6,1e7", help="elements per output, comma-separated")
    parser.add_argument("--repeat", type=int, default=7, help="timed calls of each, interleaved (minimum kept)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(
        f"grader: {grader_metrics.__file__} (standard default, 1 thread, CPU ms, min of {args.repeat} "
        "interleaved calls)"
    )
    print(
        f"{'dtype':9} {'elements':>9} {'grade ms':>9} {'ns/elt':>7} {'floor ms':>9} {'ns/elt':>7} {'ratio':>6} "
        f"{'wall ratio':>10} {'warm ns':>7} {'ratio':>6} {'faults':>7} {'floor faults':>12}"
    )
    for dtype in (torch.bfloat16, torch.float32):
        for n in (int(float(s)) for s in args.sizes.split(",")):
            golden = torch.randn(n, dtype=torch.float64)
            target = golden.to(dtype)
            grade, floor, warm = [], [], []
            t64, d64 = torch.empty(n, dtype=torch.float64), torch.empty(n, dtype=torch.float64)
            for _ in range(args.repeat + 1):  # the first round warms up both
                grade.append(measure(lambda t=target, g=golden: compare(t, g)))
                floor.append(measure(lambda t=target, g=golden: floor_pass(t, g)))
                warm.append(measure(lambda t=target, g=golden, a=t64, b=d64: warm_floor(t, g, a, b)))
            w_s = min(r[0] for r in warm[1:])
            g_s, f_s = (min(r[0] for r in runs[1:]) for runs in (grade, floor))
            g_wall, f_wall = (min(r[1] for r in runs[1:]) for runs in (grade, floor))
            g_faults, f_faults = (min(r[2] for r in runs[1:]) for runs in (grade, floor))
            print(
                f"{str(dtype)[6:]:9} {n:9d} {g_s * 1e3:9.2f} {g_s / n * 1e9:7.2f} {f_s * 1e3:9.2f} "
                f"{f_s / n * 1e9:7.2f} {g_s / f_s:6.2f} {g_wall / f_wall:10.2f} {w_s / n * 1e9:7.2f} {g_s / w_s:6.2f} "
                f"{g_faults:7d} {f_faults:12d}"
            )


if __name__ == "__main__":
    main()
