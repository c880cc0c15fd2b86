"""Pipeline, expert and sequence parallel steps against msprobe's checker, per rank (issue 51): what precheck run_ut
and msprobe's acc_check grade of each rank of the steps msprobe 26.2 recorded on CPU/gloo (tests/data/sharded/).

    python benchmarks/bench_frontier.py [STEP ...] [--msprobe-venv VENV] [--repeat N]

VENV has torch 2.13 and mindstudio-probe (``VENV=$(.venv/bin/python tests/data/recipes/msprobe_venv.py)`` makes it);
without it msprobe's columns are left empty. Per step folder (default: STEPS) and per rank, three runs, each the
command a user types (a fresh -o folder each, wall time the median of N, default 1, interpreter start included):
- precheck on the rank alone: ``python -m precheck run_ut -api_info RANK/dump.json -o OUT -q``;
- precheck on the step folder: ``run_ut -api_info STEP/step0``, one run for every rank (its collectives, sends and
  receives are graded across the ranks only there), its rows per rank read from OUT/RANK/; its wall is the step's;
- msprobe's acc_check on the rank alone, its device side on the CPU (tests/data/recipes/msprobe_cpu.py).
Both tools run with the CPU kernels pinned to AVX2, as the fixtures were recorded. Each run's result CSV is counted by
API row: flagged (its forward or backward a warning or error), else SKIP (either SKIP), else pass (both pass);
the three commonest SKIP reasons (API names and numbers masked) and the APIs flagged are printed below the table.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARDED = ROOT / "tests" / "data" / "sharded"
MSPROBE_CPU = ROOT / "tests" / "data" / "recipes" / "msprobe_cpu.py"
STEPS = (
    "pipeline_1f1b_statistics",
    "pipeline_gpipe_statistics",
    "pipeline_hand_statistics_msprobe",
    "moe_statistics",
    "moe_zero_a2a_tensor",
    "moe_bug1_statistics",
    "tp_vocab_tensor_msprobe",
    "loss_parallel_statistics_msprobe",
    "fsdp2_clip_tensor_msprobe",
    "pipeline_gpipe_bug0_statistics",
    "pipeline_1f1b_bug0_statistics",
    "fsdp2_ckpt_offload_statistics_msprobe",
    "fsdp2_ckpt_offload_statistics_precheck",
    "fsdp2_tp_sp_statistics_msprobe",
    "fsdp2_tp_sp_norms_tensor_msprobe",
)
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
ENV = {**os.environ, **AVX2}  # run from ROOT: this checkout's precheck, not an installed one
FLAGGED = ("warning", "error")
TWINS = {  # a bug twin -> its clean twin, held against it by compare
    "moe_bug1_statistics": "moe_statistics",
    "pipeline_gpipe_bug0_statistics": "pipeline_gpipe_statistics",
    "pipeline_1f1b_bug0_statistics": "pipeline_1f1b_statistics",
}
API_NAME = re.compile(r"\b(?:Functional|Torch|Tensor|Distributed|Aten|NPU|VF|Module)\.[\w.]*\w")
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


@dataclass
class Tally:
    """One run's result CSV for one rank: its verdicts, why its SKIPs are SKIP, which APIs it flags."""

    apis: int = 0
    verdicts: Counter = field(default_factory=Counter)  # API rows: pass / flagged / SKIP / other (_row_status)
    reasons: Counter = field(default_factory=Counter)  # a SKIP row's message, masked -> APIs
    flagged: list = field(default_factory=list)  # API names with a warning or error
    wall: float | None = None

    def cell(self) -> str:
        v = self.verdicts
        other = sum(n for k, n in v.items() if k not in ("pass", "flagged", "SKIP"))
        return f"{v['pass']} / {v['flagged']} / {v['SKIP']}" + (f" (+{other} other)" if other else "")


def reason(message: str) -> str:
    """A SKIP message with its API names (<api>) and numbers (N) masked, rows skipped for one cause count together."""
    text = NUMBER.sub("N", API_NAME.sub("<api>", " ".join(message.split()))) or "(no message)"
    return text if len(text) <= 90 else text[:87] + "..."


def tally(result_csv: Path, wall: float | None = None) -> Tally:
    """Count an msprobe-format result CSV (precheck's and msprobe's have the same columns)."""
    out = Tally(wall=wall)
    with open(result_csv, newline="", encoding="utf-8-sig") as f:
        for row in csv.DictReader(f):
            out.apis += 1
            cells = [row.get("Forward Test Success", ""), row.get("Backward Test Success", "")]
            cells = [c.strip() for c in cells if c and c.strip()]
            out.verdicts[_row_status(cells)] += 1
            if any(c in FLAGGED for c in cells):
                out.flagged.append(row["API name"])
            elif "SKIP" in cells:
                out.reasons[reason(row.get("Message") or "")] += 1
    return out


def _row_status(cells: list[str]) -> str:
    """An API row's one status: flagged if either verdict is a warning or error, else SKIP if either is SKIP (its
    forward graded and its backward not is not a whole check), else pass when every verdict is."""
    if any(c in FLAGGED for c in cells):
        return "flagged"
    if "SKIP" in cells:
        return "SKIP"
    return "pass" if cells and all(c == "pass" for c in cells) else "/".join(cells) or "(none)"


def _result_csv(folder: Path) -> Path:
    found = sorted(folder.glob("accuracy_checking_result_*.csv"))
    if not found:
        sys.exit(f"{folder}: no result CSV was written")
    return found[-1]


def timed(cmd: list[str], repeat: int, scratch: Path) -> tuple[float, Path]:
    """Median wall time of ``cmd + ['-o', OUT]``, a fresh OUT each run; the last OUT. A failing run ends it (exit 3
    is precheck's "every API SKIP", a verdict like the others)."""
    walls = []
    for _ in range(repeat):
        out = Path(tempfile.mkdtemp(dir=scratch))
        start = time.perf_counter()
        proc = subprocess.run([*cmd, "-o", str(out)], capture_output=True, text=True, env=ENV, cwd=ROOT)
        walls.append(time.perf_counter() - start)
        out.with_suffix(".console").write_text(proc.stdout)  # beside OUT: what the run printed
        if proc.returncode not in (0, 3):
            sys.exit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return statistics.median(walls), out


def graded(cmd: list[str], repeat: int, scratch: Path) -> Tally:
    """One rank's dump run by one tool: its result CSV counted, with the run's wall time."""
    wall, out = timed(cmd, repeat, scratch)
    return tally(_result_csv(out), wall)


def measure_step(step: Path, msprobe: Path | None, repeat: int, scratch: Path) -> dict[str, dict[str, Tally]]:
    """rank -> {'rank': precheck on it alone, 'step': its rows of the step-folder run, 'msprobe': acc_check on it}.

    The step-folder run's wall is on its first rank's tally only (one run grades every rank)."""
    ranks = sorted((d for d in step.iterdir() if (d / "dump.json").is_file()), key=lambda d: d.name)
    precheck = [sys.executable, "-m", "precheck", "run_ut", "-q", "-api_info"]
    step_wall, step_out = timed([*precheck, str(step)], repeat, scratch)
    found: dict[str, dict[str, Tally]] = {}
    for rank in ranks:
        dump = str(rank / "dump.json")
        found[rank.name] = {
            "rank": graded([*precheck, dump], repeat, scratch),
            "step": tally(_result_csv(step_out / rank.name), step_wall if rank == ranks[0] else None),
        }
        if msprobe is not None:
            cmd = [str(msprobe / "bin" / "python"), str(MSPROBE_CPU), "acc_check", "-api_info", dump]
            found[rank.name]["msprobe"] = graded(cmd, repeat, scratch)
    return found


def _wall(t: Tally | None) -> str:
    return "-" if t is None or t.wall is None else f"{t.wall:.1f}"


def table(results: dict[str, dict[str, dict[str, Tally]]]) -> str:
    """The Markdown table: a line per step and rank, each tool's verdicts (pass / flagged / SKIP) and wall."""
    lines = [
        "| step | rank | APIs | precheck, rank alone | s | precheck, step folder | s | msprobe acc_check | s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for step, ranks in results.items():
        for rank, tools in ranks.items():
            ms = tools.get("msprobe")
            cells = [tools["rank"].cell(), _wall(tools["rank"]), tools["step"].cell(), _wall(tools["step"])]
            cells += [ms.cell() if ms else "-", _wall(ms)]
            lines.append(f"| {step} | {rank} | {tools['rank'].apis} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def notes(results: dict[str, dict[str, dict[str, Tally]]]) -> str:
    """Below the table: per step, rank and tool, the three commonest SKIP reasons and the APIs flagged."""
    lines = []
    for step, ranks in results.items():
        for rank, tools in ranks.items():
            for tool, t in tools.items():
                skips = "; ".join(f"{n} x {why}" for why, n in t.reasons.most_common(3))
                flagged = ", ".join(t.flagged[:6]) + (f" (+{len(t.flagged) - 6})" if len(t.flagged) > 6 else "")
                if skips or flagged:
                    lines.append(f"{step} {rank} {tool}: SKIP {skips or '-'}; flagged {flagged or '-'}")
    return "\n".join(lines)


def twin_compare(step: Path, twin: Path, scratch: Path) -> str:
    """``precheck compare`` of a bug twin's step folder against its clean twin's: each rank's first divergent
    record and its verdict (compare_summary_rank<R>_*.json), and the step's verdict as the console says it."""
    cmd = [sys.executable, "-m", "precheck", "compare", "-target", str(step), "-bench", str(twin)]
    wall, out = timed(cmd, 1, scratch)
    lines = [f"{step.parent.name} against {twin.parent.name}, precheck compare ({wall:.1f} s):"]
    for summary in sorted(out.glob("compare_summary_rank*_*.json")):
        first = json.loads(summary.read_text()).get("first_divergent") or {}
        rank = summary.name.split("_")[2]
        lines.append(f"  {rank}: first divergent {first.get('name', '-')} ({first.get('verdict', 'none')})")
    said = out.with_suffix(".console").read_text().splitlines()
    step_block = next((i for i, line in enumerate(said) if line.startswith("step:")), len(said))
    lines += [f"  {line}" for line in said[step_block:] if str(out) not in line]  # the step's verdict, no paths
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("steps", nargs="*", type=Path, default=[SHARDED / name / "step0" for name in STEPS])
    parser.add_argument("--msprobe-venv", type=Path, default=None, help="a venv with mindstudio-probe: run it too")
    parser.add_argument("--repeat", type=int, default=1, help="runs per command, the median wall reported")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.msprobe_venv and not (args.msprobe_venv / "bin" / "python").is_file():
        sys.exit(f"--msprobe-venv {args.msprobe_venv}: no bin/python there")
    sys.path.insert(0, str(ROOT / "tests" / "data"))
    from fixtures import unpack  # the tensor dumps' dump_tensor_data/ folders, from their archives

    unpack()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for step in args.steps:
            if not step.is_dir():
                sys.exit(f"{step}: no such step folder")
            results[step.parent.name] = measure_step(step, args.msprobe_venv, args.repeat, Path(scratch))
        twins = [(s, s.parent.parent / TWINS[s.parent.name] / s.name) for s in args.steps if s.parent.name in TWINS]
        compared = [twin_compare(step, twin, Path(scratch)) for step, twin in twins]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"API rows pass / flagged (warning or error) / SKIP; load average {load}")
    print(table(results))
    print(notes(results))
    print("\n".join(compared))
    return 0


if __name__ == "__main__":
    sys.exit(main())
