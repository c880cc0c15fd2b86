"""Cost of grading one output: compare() on tensors of growing size, in nanoseconds per element.

    python benchmarks/bench_grader.py [--sizes 1000 10000 ...] [--threads 1]

Every metric of the details CSV is computed in one vectorised float64 pass; the per-element cost should be flat
once the fixed per-call cost is amortised.
"""

from __future__ import annotations

import argparse
import time

import torch

from precheck.grader import compare


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**3, 10**4, 10**5, 10**6, 10**7])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    torch.manual_seed(0)
    print(
        f"{'dtype':10} {'elements':>10} {'ms/call':>9} {'ns/element':>11}   (standard default, {args.threads} thread)"
    )
    torch.set_num_threads(args.threads)
    for dtype in (torch.bfloat16, torch.float32):
        for n in args.sizes:
            golden = torch.randn(n, dtype=torch.float64)
            target = golden.to(dtype)
            repeat = max(3, 10**6 // n)
            compare(target, golden)
            start = time.perf_counter()
            for _ in range(repeat):
                compare(target, golden)
            seconds = (time.perf_counter() - start) / repeat
            print(f"{str(dtype)[6:]:10} {n:10d} {seconds * 1e3:9.3f} {seconds / n * 1e9:11.1f}")


if __name__ == "__main__":
    main()
