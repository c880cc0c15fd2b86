"""Why precheck has its own process pool and not joblib's loky: one dead worker costs loky every task in flight.

    python -m venv /tmp/jl && /tmp/jl/bin/pip install joblib && /tmp/jl/bin/python benchmarks/loky_worker_loss.py

N tasks of 0.2 s on 2 loky workers; one task ends its worker as a segfaulting kernel would (os._exit). precheck's
pool turns that task into its own error row and replaces the worker (tests/test_survive.py); loky raises
TerminatedWorkerError and the results of every other task not yet returned are gone.
"""

from __future__ import annotations

import argparse
import os
import time


def _task(i: int, killer: int) -> int:
    time.sleep(0.2)
    if i == killer:
        os._exit(139)
    return i


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=20, help="tasks in the run (default 20)")
    parser.add_argument("--killer", type=int, default=7, help="the task that ends its worker (default 7)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    from joblib import Parallel, delayed  # not a dependency of precheck: run it in a venv that has joblib

    done = []
    try:
        calls = (delayed(_task)(i, args.killer) for i in range(args.tasks))
        done.extend(Parallel(n_jobs=2, return_as="generator_unordered")(calls))
    except Exception as e:  # loky's TerminatedWorkerError, named in the output
        print(f"{type(e).__name__}: {str(e).splitlines()[0][:100]}")
    healthy = args.tasks - 1
    print(f"results returned: {len(done)} of {healthy} healthy tasks; lost: {healthy - len(done)}")


if __name__ == "__main__":
    main()
