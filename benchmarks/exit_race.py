"""Exit aborts of programs whose async collectives carry Python callbacks on their futures, counted over many runs.

gloo runs a future's callbacks on its own thread after the program's ``Work.wait()`` has returned, taking the GIL
for each and again to release it. A program that ends right after its last wait races them: a thread that takes
the GIL once the interpreter is finalizing is ended by ``pthread_exit`` (CPython before 3.14), whose unwinding
through torch's callback guard aborts the process ("terminate called without an active exception", exit 134).
precheck record puts such a callback on every async collective it records (recording/pending.py), and waits at a
step's end until gloo's threads have let them go. This script runs a tiny one-rank gloo program many times,
several at once (the race shows on a loaded machine):

- ``bare``: the program's own Python callback on each all_reduce's future, no precheck (the mechanism);
- ``recorded``: the same program without its callback, recorded by ``precheck.record`` (precheck's callbacks).

    python benchmarks/exit_race.py [--runs 60] [--parallel 3]

2026-11-29, 2-core EPYC, 3 at once: bare 4 aborts of 60 runs (8 of about 200 in an earlier window); recorded 0
of 60 (and 0 of 180 before the step's-end wait: precheck's own step end gives the callbacks time on this machine;
the wait makes it a promise, which tests/test_record_at_exit.py holds with the GIL kept from gloo's thread).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROGRAM = """
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
recorded = sys.argv[2] == "recorded"
if recorded:
    import precheck
    precheck.record(sys.argv[1] + ".dump").start()
t = torch.ones(100_000)
for _ in range(50):
    work = dist.all_reduce(t, async_op=True)
    if not recorded:
        work.get_future().then(lambda _, w=work: None)
work.wait()
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=60, help="runs of each program")
    parser.add_argument("--parallel", type=int, default=3, help="runs at once")
    parser.add_argument("--modes", nargs="+", choices=["bare", "recorded"], default=["bare", "recorded"])
    return parser


def aborted(mode: str, scratch: Path, i: int) -> bool:
    """Whether one run ended in the abort (any other failure ends the benchmark)."""
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(scratch / f"{mode}{i}"), mode], capture_output=True, text=True, timeout=120
    )
    if done.returncode == 0:
        return False
    if "terminate called" in done.stderr:
        return True
    sys.exit(f"{mode} run {i}: exit {done.returncode}\n{done.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(args.parallel) as pool:
        for mode in args.modes:
            count = sum(pool.map(lambda i, m=mode: aborted(m, Path(scratch), i), range(args.runs)))
            print(f"{mode}: {count} aborted of {args.runs} runs ({args.parallel} at once)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
