"""precheck compare against msprobe compare on the same pairs of dumps: whole process, wall clock, best of N.

usage: python benchmarks/bench_compare.py MSPROBE_BIN [--repeat N] [TARGET BENCH ...]
  MSPROBE_BIN: msprobe's command in its throwaway venv (e.g. /tmp/msprobe/bin/msprobe)
Without pairs it uses the bundled ones (tests/data/compare). Both tools write their CSVs to a fresh folder each
time; the ratio is msprobe's time over precheck's. msprobe also gets to read precheck's CSV back: its
merge_result's get_dump_mode must recognise the header (its own tooling identifies a compare CSV by it).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = [
    ("fp32_tensor_gelu_bug", "fp32_tensor"),
    ("bf16_statistics_gelu_bug", "fp32_statistics"),
    ("fp32_md5_gelu_bug", "fp32_md5"),
    ("fp32_tensor_unfused_ln", "fp32_tensor"),
]
CHECK = """
import sys, pandas as pd
from msprobe.core.compare.merge_result.merge_result import get_dump_mode
mode = get_dump_mode(pd.read_csv(sys.argv[1]), 0)
print(mode or "NOT RECOGNISED")
"""


def timed(argv: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            subprocess.run([*argv, "-o", out], check=True, capture_output=True)
            best = min(best, time.perf_counter() - start)
    return best


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("msprobe", help="msprobe's command in its venv")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("pairs", nargs="*", help="TARGET BENCH dump.json pairs (default: the bundled ones)")
    return parser


def main() -> None:
    args = build_parser().parse_intermixed_args()
    data = ROOT / "tests" / "data" / "compare"
    pairs = list(zip(args.pairs[::2], args.pairs[1::2], strict=True)) or [
        (str(data / t / "step0/rank0/dump.json"), str(data / b / "step0/rank0/dump.json")) for t, b in BUNDLED
    ]
    msprobe_python = str(Path(args.msprobe).parent / "python")
    print(f"{'pair':58} {'msprobe s':>10} {'precheck s':>10} {'ratio':>7}  msprobe reads it as")
    for target, bench in pairs:
        ms = timed([args.msprobe, "compare", "-tp", target, "-gp", bench], args.repeat)
        pc = timed([sys.executable, "-m", "precheck", "compare", "-target", target, "-bench", bench], args.repeat)
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([sys.executable, "-m", "precheck", "compare", "-target", target, "-bench", bench, "-o", out],
                           check=True, capture_output=True)  # fmt: skip
            csv_path = next(Path(out).glob("compare_result_*.csv"))
            mode = subprocess.run([msprobe_python, "-c", CHECK, str(csv_path)], capture_output=True, text=True)
        name = f"{Path(target).parts[-4]} vs {Path(bench).parts[-4]}"[:58]
        read_as = (mode.stdout.strip().splitlines() or [mode.stderr[-80:]])[-1]
        print(f"{name:58} {ms:10.2f} {pc:10.2f} {ms / pc:6.1f}x  {read_as}")


if __name__ == "__main__":
    main()
