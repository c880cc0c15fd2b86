"""precheck run_ut against msprobe acc_check on MindSpore dumps: whole process, wall clock, best of N, and what
each tool made of the records (rows per status).

usage: python benchmarks/bench_mindspore.py MINDSPORE_PYTHON [--repeat N] [DUMP_JSON ...]
  MINDSPORE_PYTHON: a Python with mindspore 2.10 and mindstudio-probe 26.2 (numpy<2); it runs msprobe's acc_check
  through tests/data/recipes/msprobe_ms_cpu.py, and precheck's MindSpore worker for statistics dumps.
Without dumps it uses the bundled ones (tests/data/mindspore: fp32/fp16/bf16, tensor and statistics). The ratio
is msprobe's time over precheck's.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "mindspore"
RUNNER = ROOT / "tests" / "data" / "recipes" / "msprobe_ms_cpu.py"


def timed(argv: list[str], repeat: int, env: dict[str, str]) -> tuple[float, Counter]:
    """Best wall time of ``argv -o OUT`` and the (forward, backward) statuses of its result CSV."""
    best, statuses = float("inf"), Counter()
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            subprocess.run([*argv, "-o", out], check=True, capture_output=True, env=env)
            best = min(best, time.perf_counter() - start)
            (result,) = Path(out).glob("accuracy_checking_result_*.csv")
            with open(result, encoding="utf-8-sig", newline="") as f:
                statuses = Counter(f"{r[1]}/{r[2] or '-'}" for r in list(csv.reader(f))[1:])
    return best, statuses


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mindspore_python", help="a Python with MindSpore and msprobe")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("dumps", nargs="*", type=Path, help="MindSpore dump.json files (default: the bundled ones)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    dumps = args.dumps or sorted(DATA.glob("*/step0/*/dump.json"))
    env = {**os.environ, "PRECHECK_MINDSPORE_PYTHON": args.mindspore_python}
    print(f"{'dump':18} {'msprobe s':>9} {'precheck s':>10} {'ratio':>6}  statuses (forward/backward)")
    for dump in dumps:
        name = dump.parents[2].name if dump.parents[2].parent == DATA else str(dump)
        precheck = [sys.executable, "-m", "precheck", "run_ut", "-api_info", str(dump), "-q"]
        ours, our_rows = timed(precheck, args.repeat, env)
        theirs, their_rows = timed(
            [args.mindspore_python, str(RUNNER), "acc_check", "-api_info", str(dump)], args.repeat, env
        )
        print(f"{name:18} {theirs:9.2f} {ours:10.2f} {theirs / ours:5.1f}x")
        print(f"{'':18} msprobe:  {sum(their_rows.values())} rows {dict(sorted(their_rows.items()))}")
        print(f"{'':18} precheck: {sum(our_rows.values())} rows {dict(sorted(our_rows.items()))}")


if __name__ == "__main__":
    main()
