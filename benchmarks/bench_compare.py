"""precheck compare against msprobe compare on the same pairs of dumps: whole process, wall clock, best of N.

usage: python benchmarks/bench_compare.py MSPROBE_BIN [--repeat N] [--heavy] [TARGET BENCH ...]
  MSPROBE_BIN: msprobe's command in its throwaway venv, VENV/bin/msprobe, where
  VENV=$(.venv/bin/python tests/data/recipes/msprobe_venv.py) makes the venv
Without pairs it uses the bundled ones (tests/data/compare). ``--heavy`` measures the heavy pairs instead: a
LLaMA-style bf16 training step (benchmarks/heavy_model.py, 1.1 GB of .pt tensors per side) recorded into
$TMPDIR/precheck-heavy, against the same step with a wrong SiLU recorded into $TMPDIR/precheck-heavy-b, and
against itself. Record them with msprobe's venv, from the repository root
(M=".venv/bin/python tests/data/recipes/msprobe_venv.py --"):
    $M tests/data/recipes/make_dump.py heavy_model:llama bf16 tensor $TMPDIR/precheck-heavy
    $M tests/data/recipes/make_dump.py heavy_model:llama_silu_bug bf16 tensor $TMPDIR/precheck-heavy-b
Each pair is timed in one window, msprobe and precheck interleaved run by run (whole processes, wall clock,
best of N); both tools write their CSVs to a fresh folder each time; the ratio is msprobe's time over
precheck's (whole process, the honest-kernel rule's replay included). The replay's own cost is printed apart, from
the summary JSON of one more precheck run: the seconds its grading took (torch's import included, when it needed
torch), the calls it graded and which rule named the first divergent record (precheck.compare.localize). msprobe
also gets to read precheck's CSV back: its merge_result's get_dump_mode must recognise the header (its own tooling
identifies a compare CSV by it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from precheck.core.older_python import zip_strict

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = [
    ("fp32_tensor_gelu_bug", "fp32_tensor"),
    ("bf16_statistics_gelu_bug", "fp32_statistics"),
    ("fp32_md5_gelu_bug", "fp32_md5"),
    ("fp32_tensor_unfused_ln", "fp32_tensor"),
    ("acc_bf16_softmax_bf16", "acc_bf16_clean"),
    ("acc_fp16_linear_fp16", "acc_fp16_clean"),
]
CHECK = """
import sys, pandas as pd
from msprobe.core.compare.merge_result.merge_result import get_dump_mode
mode = get_dump_mode(pd.read_csv(sys.argv[1]), 0)
print(mode or "NOT RECOGNISED")
"""


def _run(argv: list[str]) -> float:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run([*argv, "-o", out], check=True, capture_output=True)
        return time.perf_counter() - start


def timed(argv: list[str], repeat: int) -> float:
    return min(_run(argv) for _ in range(repeat))


def interleaved(first: list[str], second: list[str], repeat: int) -> tuple[float, float]:
    """Best of ``repeat`` for each command, the two alternating, so both see the same machine."""
    runs = [(_run(first), _run(second)) for _ in range(repeat)]
    return min(a for a, _ in runs), min(b for _, b in runs)


def heavy_pairs() -> list[tuple[str, str]]:
    """(target, bench) dump.json pairs of the heavy dumps: the SiLU bug against the clean step, and the clean
    step against itself."""
    found = {}
    for name in ("precheck-heavy", "precheck-heavy-b"):
        dump = next((Path(tempfile.gettempdir()) / name).glob("step0/*/dump.json"), None)
        if dump is None:
            sys.exit(f"no {name} dump in {tempfile.gettempdir()}: record it as this script's docstring says")
        found[name] = str(dump)
    clean, bug = found["precheck-heavy"], found["precheck-heavy-b"]
    return [(bug, clean), (clean, clean)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("msprobe", help="msprobe's command in its venv")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--heavy", action="store_true", help="the heavy LLaMA bf16 pairs (see above)")
    parser.add_argument("pairs", nargs="*", help="TARGET BENCH dump.json pairs (default: the bundled ones)")
    return parser


def main() -> None:
    args = build_parser().parse_intermixed_args()
    data = ROOT / "tests" / "data" / "compare"
    pairs = list(zip_strict(args.pairs[::2], args.pairs[1::2]))
    if args.heavy:
        pairs += heavy_pairs()
    pairs = pairs or [
        (str(data / t / "step0/rank0/dump.json"), str(data / b / "step0/rank0/dump.json")) for t, b in BUNDLED
    ]
    msprobe_python = str(Path(args.msprobe).parent / "python")
    print(f"{'pair':58} {'msprobe s':>10} {'precheck s':>10} {'ratio':>7} {'replay s':>9} {'calls':>5} "
          f"{'rule':>13}  msprobe reads it as")  # fmt: skip
    for target, bench in pairs:
        ms, pc = interleaved(
            [args.msprobe, "compare", "-tp", target, "-gp", bench],
            [sys.executable, "-m", "precheck", "compare", "-target", target, "-bench", bench],
            args.repeat,
        )
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([sys.executable, "-m", "precheck", "compare", "-target", target, "-bench", bench, "-o", out],
                           check=True, capture_output=True)  # fmt: skip
            csv_path = next(Path(out).glob("compare_result_*.csv"))
            mode = subprocess.run([msprobe_python, "-c", CHECK, str(csv_path)], capture_output=True, text=True)
            replay = json.loads(next(Path(out).glob("compare_summary_*.json")).read_text())["localization"]
        name = f"{Path(target).parts[-4]} vs {Path(bench).parts[-4]}"[:58]  # the variant (or dump) folders
        read_as = (mode.stdout.strip().splitlines() or [mode.stderr[-80:]])[-1]
        print(f"{name:58} {ms:10.2f} {pc:10.2f} {ms / pc:6.1f}x {replay['replay_seconds']:9.2f} "
              f"{replay['replayed_calls']:5} {replay['rule']:>13}  {read_as}")  # fmt: skip


if __name__ == "__main__":
    main()
