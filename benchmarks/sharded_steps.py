"""Sharded training steps (issue 44's corpus, tests/data/sharded/): precheck run_ut on each step folder against
msprobe's acc_check on the same step, rank by rank.

    python benchmarks/sharded_steps.py [--venv VENV] [-n WORKERS] [STEP ...]

STEP is a folder of tests/data/sharded/ (default: every step tests/data/sharded/make_sharded_steps.py records).
precheck runs once on the step folder (every rank, its collectives graded across them), on the CPU. With --venv (a
venv with mindstudio-probe 26.2 and torch 2.13: ``VENV=$(.venv/bin/python tests/data/recipes/msprobe_venv.py)``)
msprobe's acc_check runs on each rank's dump.json in turn through msprobe_cpu.py (--runner, default
tests/data/recipes/msprobe_cpu.py; the incumbent has no step folder: one process a rank). For each side it prints
the whole wall time (all ranks, process start included), its CPU seconds (user and system: on a loaded machine wall
time is mostly waiting for a core), and the API rows of all ranks: graded (pass, warning or error in the forward),
SKIP, and error (forward or backward); then the commonest SKIP reasons of precheck. The target is this machine's
CPU.
"""

from __future__ import annotations

import argparse
import collections
import resource
import sys
import tempfile
from pathlib import Path

from bench_real import _result
from process_tree import measure, run_measured

HERE = Path(__file__).resolve().parent
SHARDED = HERE.parent / "tests" / "data" / "sharded"
RUNNER = HERE.parent / "tests" / "data" / "recipes" / "msprobe_cpu.py"
sys.path.insert(0, str(SHARDED))
from make_sharded_steps import STEPS  # noqa: E402 - the corpus' own list of steps


def counts(outs: list[Path]) -> tuple[dict[str, int], collections.Counter]:
    """graded / SKIP / error API rows over the result CSVs in ``outs`` (one folder a rank), and the SKIP reasons."""
    total = {"graded": 0, "SKIP": 0, "error": 0}
    reasons: collections.Counter = collections.Counter()
    for out in outs:
        rows = _result(out)
        skip = rows["Forward Test Success"].eq("SKIP")
        error = rows[["Forward Test Success", "Backward Test Success"]].eq("error").any(axis=1)
        total["graded"] += int((~skip).sum())
        total["SKIP"] += int(skip.sum())
        total["error"] += int(error.sum())
        reasons.update(m.strip().split(": ", 1)[-1][:80] for m in rows.loc[skip, "Message"])
    return total, reasons


def cpu_seconds() -> float:
    """User and system CPU seconds of the children this process waited for: what a run costs whatever else the
    machine runs at the time (wall time on a loaded machine is mostly waiting for a core)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def precheck_side(step: Path, workers: str) -> tuple[float, float, dict[str, int], collections.Counter]:
    out = Path(tempfile.mkdtemp(prefix=f"sharded-{step.name}-"))
    cmd = [sys.executable, "-m", "precheck", "run_ut", "-api_info", str(step / "step0"), "-o", str(out), "-q"]
    cpu = cpu_seconds()
    wall, _ = measure([*cmd, "-d", "cpu", "-n", workers])
    cpu = cpu_seconds() - cpu
    total, reasons = counts(sorted(p for p in out.iterdir() if p.is_dir()))
    return wall, cpu, total, reasons


def msprobe_side(step: Path, venv: Path, runner: Path) -> tuple[float, float, dict[str, int] | str]:
    """acc_check on each rank's dump.json: the summed wall and CPU seconds and the rows, or why it failed."""
    wall, outs, cpu = 0.0, [], cpu_seconds()
    for rank in sorted((step / "step0").iterdir()):
        out = Path(tempfile.mkdtemp(prefix=f"sharded-{step.name}-{rank.name}-msprobe-"))
        cmd = [str(venv / "bin" / "python"), str(runner), "acc_check", "-api_info"]
        seconds, _, failure = run_measured([*cmd, str(rank / "dump.json"), "-o", str(out)])
        wall += seconds
        if failure:
            return wall, cpu_seconds() - cpu, f"failed on {rank.name}: {failure.strip().splitlines()[-1][:120]}"
        outs.append(out)
    return wall, cpu_seconds() - cpu, counts(outs)[0]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("steps", nargs="*", metavar="STEP", help="steps of tests/data/sharded (default: all)")
    parser.add_argument("--venv", type=Path, help="a venv with msprobe: also run its acc_check")
    parser.add_argument("--runner", type=Path, default=RUNNER, help=f"the incumbent's CPU runner (default {RUNNER})")
    parser.add_argument("-n", "--workers", default="1", help="precheck's workers (default 1, as acc_check's one)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    names = args.steps or [f"{name}_msprobe" for name in STEPS]
    head = f"{'step':36} {'ranks':>5} | {'precheck s':>10} {'CPU s':>6} {'graded':>6} {'SKIP':>4} {'error':>5}"
    theirs_head = f" | {'msprobe s':>9} {'CPU s':>6} {'graded':>6} {'SKIP':>4} {'error':>5} {'x wall':>6} {'x CPU':>6}"
    print(head + (theirs_head if args.venv else ""))
    notes = []
    for name in names:
        step = SHARDED / name
        ranks = len(list((step / "step0").iterdir()))
        wall, cpu, mine, reasons = precheck_side(step, args.workers)
        line = f"{name:36} {ranks:5} | {wall:10.1f} {cpu:6.1f} {mine['graded']:6} {mine['SKIP']:4} {mine['error']:5}"
        if args.venv:
            m_wall, m_cpu, theirs = msprobe_side(step, args.venv, args.runner)
            if isinstance(theirs, str):
                line += f" | {m_wall:9.1f} {m_cpu:6.1f}  {theirs}"
            else:
                line += f" | {m_wall:9.1f} {m_cpu:6.1f} {theirs['graded']:6} {theirs['SKIP']:4} {theirs['error']:5}"
                line += f" {m_wall / wall:6.1f} {m_cpu / cpu:6.1f}"
        print(line, flush=True)
        notes += [f"  {name}: precheck SKIP {count}x {reason}" for reason, count in reasons.most_common(2)]
    print("\n".join(notes))


if __name__ == "__main__":
    main()
