"""How often does a statistics-mode verdict equal the tensor-mode verdict of the same step?

    python benchmarks/stats_vs_tensor.py [TENSOR_DUMP_JSON STATISTICS_DUMP_JSON] [--seeds 0 1 2]

Runs run_ut on both dumps (same APIs, same step; the statistics dump regenerates every input from Max, Min, Mean
and Norm) and prints, for forward and backward, a table of tensor-mode status against statistics-mode status,
and the share of APIs whose verdicts agree, per tensor-mode status.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

from precheck.execution.options import CheckOptions
from precheck.run_ut import run_ut

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"  # the bundled GPT-2 bf16 step, in both modes
STATUSES = ("pass", "warning", "error", "SKIP", " ")


def verdicts(dump: Path, seed: int) -> dict[str, tuple[str, str]]:
    with tempfile.TemporaryDirectory() as out:
        summary = run_ut(dump, out, device="cpu", options=CheckOptions(seed=seed))
    return {r.name: (r.forward, r.backward) for r in summary.results}


def table(pairs: Counter, title: str) -> None:
    print(f"\n{title}: rows = tensor mode, columns = statistics mode")
    print(f"{'':10}" + "".join(f"{s!r:>10}" for s in STATUSES) + f"{'agree':>10}")
    for t in STATUSES:
        row = [pairs[(t, s)] for s in STATUSES]
        if sum(row):
            print(f"{t!r:10}" + "".join(f"{n:10d}" for n in row) + f"{pairs[(t, t)] / sum(row):10.0%}")
    total = sum(pairs.values())
    agree = sum(n for (t, s), n in pairs.items() if t == s)
    print(f"overall agreement {agree}/{total} = {agree / total:.0%}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "tensor", nargs="?", type=Path, default=next((DATA / "gpt2_bf16_tensor").glob("step0/*/*.json"))
    )
    parser.add_argument(
        "statistics", nargs="?", type=Path, default=next((DATA / "gpt2_bf16_statistics").glob("step0/*/*.json"))
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    return parser


def main() -> None:
    args = build_parser().parse_args()
    tensor = verdicts(args.tensor, 0)
    forward, backward = Counter(), Counter()
    for seed in args.seeds:
        stats = verdicts(args.statistics, seed)
        for name, (t_fwd, t_bwd) in tensor.items():
            s_fwd, s_bwd = stats.get(name, ("missing", "missing"))
            forward[(t_fwd, s_fwd)] += 1
            backward[(t_bwd, s_bwd)] += 1
    print(f"{args.tensor}\n{args.statistics}\nseeds {args.seeds}, {len(tensor)} APIs each")
    table(forward, "forward")
    table(backward, "backward")


if __name__ == "__main__":
    main()
