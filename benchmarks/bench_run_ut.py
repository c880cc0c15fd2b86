"""Time precheck run_ut on the shared dumps and, given a venv with msprobe, the incumbent on the same dumps.

    python benchmarks/bench_run_ut.py [DUMP_JSON ...] [--msprobe-venv /path/to/venv] [--repeat 3]

Default dumps: the bundled GPT-2 bf16 tensor and statistics steps and the MLP fp32 step (tests/data).

Two numbers per tool and dump:
- whole process: wall time of the command a user types, interpreter start-up and imports included;
- throughput once started: APIs per second, start-up excluded. For precheck, run_ut() timed inside a process that
  has already imported it. For msprobe, whose start-up cannot be separated from outside, the marginal rate:
  (N - 1) APIs / (wall of the full dump - wall of a one-API copy of it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
DEFAULT_DUMPS = [
    next((DATA / name).glob("step0/*/dump.json"))
    for name in ("gpt2_bf16_tensor", "gpt2_bf16_statistics", "mlp_fp32_tensor")
]
MSPROBE_CPU = DATA / "recipes" / "msprobe_cpu.py"


def count_forward(dump: Path) -> int:
    data = json.loads(dump.read_text())["data"]
    return sum(1 for k in data if k.endswith(".forward") and not k.startswith("Module."))


def wall(cmd: list[str], repeat: int) -> float:
    """Median wall time of a command; a failing command aborts the benchmark with its stderr."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            sys.exit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return statistics.median(times)


def precheck_numbers(dump: Path, repeat: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as out:
        whole = wall([sys.executable, "-m", "precheck", "run_ut", "-api_info", str(dump), "-o", out, "-q"], repeat)
    # Throughput: a fresh process per measurement (no warm caches from an earlier run), start-up excluded.
    code = (
        "import sys, time, tempfile; from precheck.run_ut import run_ut; t = time.perf_counter(); "
        "s = run_ut(sys.argv[1], tempfile.mkdtemp()); print(len(s.results) / (time.perf_counter() - t))"
    )
    rates = [
        float(
            subprocess.run([sys.executable, "-c", code, str(dump)], capture_output=True, text=True, check=True)
            .stdout.strip()
            .splitlines()[-1]
        )
        for _ in range(repeat)
    ]
    return whole, statistics.median(rates)


def one_api_copy(dump: Path, into: Path) -> Path:
    """A copy of the dump holding only its first forward record (and that record's backward)."""
    doc = json.loads(dump.read_text())
    first = next(k for k in doc["data"] if k.endswith(".forward") and not k.startswith("Module."))
    stem = first.removesuffix(".forward")
    doc["data"] = {k: v for k, v in doc["data"].items() if k in (first, stem + ".backward")}
    into.mkdir(parents=True, exist_ok=True)
    (into / "dump.json").write_text(json.dumps(doc))
    if (dump.parent / "dump_tensor_data").exists():
        os.symlink(dump.parent / "dump_tensor_data", into / "dump_tensor_data")
    return into / "dump.json"


def msprobe_numbers(dump: Path, venv: Path, runner: Path, repeat: int) -> tuple[float, float]:
    python = str(venv / "bin" / "python")
    with tempfile.TemporaryDirectory() as tmp:
        whole = wall([python, str(runner), "acc_check", "-api_info", str(dump), "-o", tmp + "/full"], repeat)
        single = one_api_copy(dump, Path(tmp) / "one")
        one = wall([python, str(runner), "acc_check", "-api_info", str(single), "-o", tmp + "/one_out"], repeat)
    n = count_forward(dump)
    return whole, (n - 1) / (whole - one) if whole > one else float("nan")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dumps", nargs="*", type=Path, default=DEFAULT_DUMPS, metavar="DUMP_JSON")
    parser.add_argument("--msprobe-venv", type=Path, default=None, help="a venv with mindstudio-probe: time it too")
    parser.add_argument(
        "--msprobe-cpu", type=Path, default=MSPROBE_CPU, help="the script that runs msprobe's acc_check on the CPU"
    )
    parser.add_argument("--repeat", type=int, default=3)
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.msprobe_venv and not args.msprobe_cpu.is_file():
        parser.error(f"--msprobe-cpu {args.msprobe_cpu}: no such file")
    print(
        f"{'dump':24} {'APIs':>5} {'precheck s':>10} {'APIs/s':>8} {'msprobe s':>10} {'APIs/s':>8} "
        f"{'wall x':>7} {'rate x':>7}"
    )
    for dump in args.dumps:
        name = dump.parts[-4]
        n = count_forward(dump)
        whole, rate = precheck_numbers(dump, args.repeat)
        line = f"{name:24} {n:5d} {whole:10.2f} {rate:8.1f}"
        if args.msprobe_venv:
            m_whole, m_rate = msprobe_numbers(dump, args.msprobe_venv, args.msprobe_cpu, args.repeat)
            line += f" {m_whole:10.2f} {m_rate:8.2f} {m_whole / whole:7.1f} {rate / m_rate:7.1f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
