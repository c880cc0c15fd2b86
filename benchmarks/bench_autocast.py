"""Does run_ut check an autocast step as fast as the same step recorded in pure bf16? (issue 37's speed target)

    PYTHONPATH=. python benchmarks/bench_autocast.py [--repeat 5] [--pairs AUTOCAST_DUMP BF16_DUMP ...]

Default pairs: the corpus's block step (benchmarks/training_steps.py) recorded by msprobe 26.2 under
torch.autocast("cpu", bf16) with fp32 parameters, and the same step with the model cast to bf16, in the tensor and
statistics tasks (tests/data/steps/). An autocast record replays its target in the dtype the call ran in (casts of
its fp32 inputs first), so it costs a little more per call than a pure bf16 record; the target is no slower.

run_ut (in-process backend, one worker, CPU) runs on the two dumps of a pair alternately, ``--repeat`` times each,
in one process after one untimed run of each (imports and first-call caches excluded), so both see the same machine
load: one window. Printed: the median seconds of each, the records per second, and the ratio autocast / bf16.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from precheck.core.older_python import zip_strict

STEPS = Path(__file__).resolve().parent.parent / "tests" / "data" / "steps"
DEFAULT_PAIRS = [
    STEPS / f"block_{kind}_{task}_msprobe" for task in ("tensor", "statistics") for kind in ("autocast_bf16", "bf16")
]


def _dump(folder: Path) -> Path:
    return next(folder.glob("step0/*/dump.json"))


def timed(dump: Path) -> tuple[float, int]:
    """Seconds of one run_ut of ``dump`` and the number of records it graded."""
    from precheck.execution.options import CheckOptions
    from precheck.run_ut import run_ut

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        summary = run_ut(dump, out, device="cpu", backend="inprocess", workers=1, options=CheckOptions())
        return time.perf_counter() - start, len(summary.results)


def compare(autocast: Path, bf16: Path, repeat: int) -> dict[str, float]:
    """Alternate the two dumps' runs ``repeat`` times after a warm-up of each; their medians and ratio."""
    dumps = {"autocast": _dump(autocast), "bf16": _dump(bf16)}
    times: dict[str, list[float]] = {k: [] for k in dumps}
    counts = {k: timed(d)[1] for k, d in dumps.items()}  # the warm-up
    for _ in range(repeat):
        for kind, dump in dumps.items():
            times[kind].append(timed(dump)[0])
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        **{f"{k} s": round(v, 3) for k, v in med.items()},
        **{f"{k} records/s": round(counts[k] / med[k], 1) for k in med},
        "autocast / bf16": round(med["autocast"] / med["bf16"], 2),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--pairs",
        nargs="+",
        type=Path,
        default=DEFAULT_PAIRS,
        help="dump folders, an autocast step then its pure-bf16 twin, pair after pair",
    )
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if len(args.pairs) % 2:
        parser.error("--pairs takes folders two by two: an autocast dump, then the same step in pure bf16")
    for autocast, bf16 in zip_strict(args.pairs[::2], args.pairs[1::2]):
        print(f"{autocast.name} vs {bf16.name}: {compare(autocast, bf16, args.repeat)}", flush=True)


if __name__ == "__main__":
    main()
