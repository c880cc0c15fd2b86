"""Where run_ut's time goes, phase by phase, against the floor of any pre-check (issue 54's first measure).

    python benchmarks/bench_phases.py [DUMP_JSON ...] [--repeat 3]

Each dump (default: the bundled GPT-2 bf16 tensor dump) is run as ``run_ut -n 1`` does, in this process (the
in-process backend, one intra-op thread: what one worker has), with precheck's own functions timed by
exclusive wall time (a phase nested in another is counted once, in the inner one):

- start-up: ``import precheck`` and torch, in a fresh interpreter;
- reading: indexing dump.json and decoding each record;
- loading: reading and checking tensor files;
- golden, target, honest: the float64 run, the replay in the recorded dtypes, the honest kernel (fp32 raised);
- grading: the metric passes and verdicts of the replay's rows; recorded: the recorded outputs' rows;
- CSV: the result and details rows written, the journal;
- the rest: scheduling, preflight, what no phase above names.

Each case's seconds are kept too, and split over two workers in the order a pool starts them (largest first): the
busier worker's share bounds what ``-n 2`` can gain on the dump, start-up aside.

Then the floor (``bench_heavy.py floor``: each call once in its dtypes and once in float64, both backwards, one
cosine and max-abs pass per output) on the same dump with one thread. The table gives each phase's seconds and
share of the run, and the run's ratio to the floor. The default target and ``--target recorded`` both.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT = ROOT / "tests" / "data" / "gpt2_bf16_tensor" / "step0" / "proc8493" / "dump.json"

_SPENT: dict[str, float] = defaultdict(float)
_STACK: list[list[float]] = []  # per open phase: [start, time spent in phases inside it]


def _timed(phase: str, func):
    @functools.wraps(func)
    def run(*args, **kwargs):
        _STACK.append([time.perf_counter(), 0.0])
        try:
            return func(*args, **kwargs)
        finally:
            start, inner = _STACK.pop()
            took = time.perf_counter() - start
            _SPENT[phase] += took - inner
            if _STACK:
                _STACK[-1][1] += took

    return run


def _instrument() -> None:
    """Wrap the functions of each phase where their callers look them up."""
    from precheck import run_ut
    from precheck.dump import records
    from precheck.execution import check, honest_run, targets, training_outputs
    from precheck.grader import rows
    from precheck.inputs import builder
    from precheck.run_files import csv_files

    places = [
        (run_ut, "load_dump", "reading"),
        (records.Cases, "_decoded", "reading"),
        (builder, "load_tensor", "loading"),
        (check, "_golden", "golden"),
        (targets.DeviceTarget, "run", "target"),
        (honest_run.HonestRun, "_side", "honest"),
        (rows.RowGrader, "outputs", "grading"),
        (rows.RowGrader, "grads", "grading"),
        (check, "recorded_rows", "recorded"),
        (csv_files.CsvReport, "add", "CSV"),
        (csv_files.CsvReport, "start", "CSV"),
        (csv_files.CsvReport, "close", "CSV"),
    ]
    del training_outputs  # recorded_rows is looked up in check
    for owner, name, phase in places:
        setattr(owner, name, _timed(phase, getattr(owner, name)))
    from precheck.scheduling import inprocess

    checked = inprocess.check_case

    def per_case(case, data_dir, options):
        start = time.perf_counter()
        try:
            return checked(case, data_dir, options)
        finally:
            _CASES[case.name] = time.perf_counter() - start

    inprocess.check_case = per_case


_CASES: dict[str, float] = {}  # the last run's seconds per case, for the pool's split


def pool_split(dump: Path, seconds: dict[str, float], workers: int = 2) -> tuple[float, float]:
    """(the busiest worker's seconds, the serial seconds) of ``workers`` processes taking the cases in the order
    a pool starts them (scheduling.costs.largest_first), each case as long as it took in one process: what bounds
    ``-n 2``'s speed-up on this dump before any start-up."""
    from precheck.dump.records import load_dump
    from precheck.scheduling.costs import largest_first

    busy = [0.0] * workers
    for case in largest_first(load_dump(dump).cases):
        busy[busy.index(min(busy))] += seconds.get(case.name, 0.0)
    return max(busy), sum(seconds.values())


def startup_seconds() -> float:
    """``import precheck.run_ut`` (and torch with it) in a fresh interpreter."""
    code = "import time; t = time.perf_counter(); import precheck.run_ut; print(time.perf_counter() - t)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return float(done.stdout)


def run_phases(dump: Path, target: str) -> tuple[float, dict[str, float]]:
    """One run_ut -n 1 of ``dump`` in this process: its wall time and seconds per phase."""
    import torch

    from precheck.execution.options import CheckOptions
    from precheck.run_ut import run_ut

    _SPENT.clear()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            run_ut(dump, out, device="cpu", workers=1, backend="inprocess", progress=False, keep_results=False,
                   options=CheckOptions(target=target))  # fmt: skip
            wall = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    phases = dict(_SPENT)
    phases["the rest"] = wall - sum(phases.values())
    return wall, phases


def floor_seconds(dump: Path) -> float:
    """bench_heavy's floor on ``dump`` with one thread, in a fresh process (its import not counted)."""
    code = (
        "import sys, time, torch; sys.path.insert(0, sys.argv[1]); torch.set_num_threads(1)\n"
        "import bench_heavy; t = time.perf_counter(); bench_heavy.floor(__import__('pathlib').Path(sys.argv[2]))\n"
        "print(time.perf_counter() - t)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(HERE), str(dump)], capture_output=True, text=True,
                          check=True, cwd=ROOT)  # fmt: skip
    return float(done.stdout.split()[-1])


PHASES = ("reading", "loading", "golden", "target", "honest", "grading", "recorded", "CSV", "the rest")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dumps", nargs="*", type=Path, default=[DEFAULT], help="dump.json files (default: GPT-2 bf16)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, the median reported (default 3)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    sys.path.insert(0, str(ROOT))
    _instrument()
    print(f"start-up (import precheck.run_ut, torch): {startup_seconds():.2f} s")
    for dump in (d.resolve() for d in args.dumps):
        floor = statistics.median(floor_seconds(dump) for _ in range(args.repeat))
        print(f"\n{dump}: the floor, one thread: {floor:.2f} s")
        print("| target | run_ut -n 1 | / floor | " + " | ".join(PHASES) + " |")
        print("|---" * (len(PHASES) + 3) + "|")
        for target in ("device", "recorded"):
            runs = [run_phases(dump, target) for _ in range(args.repeat)]
            wall = statistics.median(w for w, _ in runs)
            cells = []
            for phase in PHASES:
                seconds = statistics.median(p.get(phase, 0.0) for _, p in runs)
                cells.append(f"{seconds:.2f} s ({seconds / wall:.0%})")
            print(f"| {target} | {wall:.2f} s | {wall / floor:.2f}x | " + " | ".join(cells) + " |")
            busiest, serial = pool_split(dump, _CASES)
            print(f"  ({target}: two workers taking the cases largest first: the busier {busiest:.2f} s of "
                  f"{serial:.2f} s in cases, {serial / busiest:.2f}x over one, start-up aside)")  # fmt: skip


if __name__ == "__main__":
    main()
