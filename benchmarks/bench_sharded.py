"""DTensor steps (issue 44): what run_ut grades of the sharded fixtures msprobe 26.2 recorded on gloo ranks
(tests/data/sharded/), and what grading the calls as a whole costs.

    .venv/bin/python benchmarks/bench_sharded.py [STEP ...] [--repeats N]

Per step folder (default: those of tests/data/sharded/): each rank's rows by forward and backward status, the
whole calls (graded, SKIP, error), the step run's wall time (best of N, default 3) and that of the whole calls
alone (precheck.ranks.whole_calls).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

from precheck.dump.records import load_dump
from precheck.dump.steps import DUMP_JSON, find_dumps
from precheck.execution.options import CheckOptions
from precheck.ranks import WHOLE, grade_sharded, run_step

SHARDED = Path(__file__).resolve().parent.parent / "tests" / "data" / "sharded"
STEPS = ("tp_tensor_msprobe", "tp_bad_matmul_tensor_msprobe", "fsdp2_clip_tensor_msprobe", "hsdp_norms_tensor_msprobe")


def _best(repeats: int, run) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - start)
    return best, out


def _counts(statuses: Counter) -> str:
    return ", ".join(f"{status} {n}" for status, n in sorted(statuses.items(), key=str))


def measure(folder: Path, repeats: int) -> str:
    found = find_dumps(folder)

    def step():
        with tempfile.TemporaryDirectory() as out:
            return run_step(found, out, device="cpu", workers=1, backend="inprocess", progress=False)

    wall, summary = _best(repeats, step)
    dumps = {d.rank: load_dump(d.folder / DUMP_JSON) for d in found.ranks}
    whole_wall, _ = _best(repeats, lambda: grade_sharded(dumps, CheckOptions(device="cpu")))
    lines = [f"{folder.parent.name}: step run {wall:.2f} s, whole calls {whole_wall:.2f} s"]
    for rank, run in summary.ranks.items():
        own = [r for r in run.results if not r.name.endswith(WHOLE)]
        forward = Counter(r.forward for r in own)
        backward = Counter(r.backward for r in own if r.backward is not None)
        lines.append(f"  {rank}: {len(own)} calls; forward {_counts(forward)}; backward {_counts(backward)}")
    whole = Counter(r.forward for r in summary.results if r.name.endswith(WHOLE))
    lines.append(f"  whole calls: {sum(whole.values())}; forward {_counts(whole)}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("steps", nargs="*", type=Path, default=[SHARDED / name / "step0" for name in STEPS])
    parser.add_argument("--repeats", type=int, default=3)
    return parser


if __name__ == "__main__":
    args = build_parser().parse_args()
    for step in args.steps:
        print(measure(step, args.repeats))
