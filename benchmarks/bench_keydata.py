"""precheck keydata against msprobe's key-data comparator (msprobe.core.SingleComparator, which MindSpeed-RL and
verl users run on their key_data_dump) on the same pairs: whole process, wall clock, best of N.

usage: python benchmarks/bench_keydata.py MSPROBE_PYTHON [--repeat N] [--steps S]
  MSPROBE_PYTHON: the python of a throwaway venv with msprobe (pip install torch==2.13.0 mindstudio-probe)
It compares the bundled pairs (tests/data/keydata) and a longer run recorded on the spot with
benchmarks/keydata_record.py (S steps, clean against log-probabilities rounded early). msprobe writes one .xlsx per
name and says nothing of where the runs part; precheck writes one CSV and the first step and item that part.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_compare import timed  # the same whole-process timing: a fresh -o folder per run

ROOT = Path(__file__).resolve().parents[1]
KD = ROOT / "tests" / "data" / "keydata"
MSPROBE = (  # argv: TARGET BENCH -o OUT, as bench_compare.timed passes them
    "import sys\nfrom msprobe.core import SingleComparator\n"
    "SingleComparator.compare(sys.argv[1], sys.argv[2], sys.argv[4], 2)\n"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("msprobe_python", help="the python of a venv with msprobe")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50, help="steps of the longer run recorded here")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pairs = [(KD / "log_prob_bf16", KD / "clean", "bundled, log_prob rounded early (3 steps)"),
                 (KD / "top_k_sampling", KD / "clean", "bundled, top-k sampling (3 steps)")]  # fmt: skip
        for variant in ("clean", "log_prob_bf16"):
            record = [args.msprobe_python, str(ROOT / "benchmarks" / "keydata_record.py"), f"{tmp}/{variant}", variant]
            subprocess.run([*record, "--steps", str(args.steps)], check=True, capture_output=True)
        pairs.append((Path(tmp) / "log_prob_bf16", Path(tmp) / "clean", f"recorded, {args.steps} steps"))
        print("| pair | msprobe SingleComparator | precheck keydata | ratio |\n|---|---|---|---|")
        for target, bench, label in pairs:
            ours = timed([sys.executable, "-m", "precheck", "keydata", "-target", str(target), "-bench", str(bench)],
                         args.repeat)  # fmt: skip
            theirs = timed([args.msprobe_python, "-c", MSPROBE, str(target), str(bench)], args.repeat)
            print(f"| {label} | {theirs:.2f} s | {ours:.2f} s | {theirs / ours:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
