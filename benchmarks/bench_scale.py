"""Throughput and peak memory on large generated dumps: one worker vs all cores, and 10x the records.

    python benchmarks/bench_scale.py [--records 470 4700] [--workers 1 2]

A large dump is the GPT-2 bf16 statistics step repeated (its calls renumbered), as a long training run's
statistics dump would be. Each run is a fresh `precheck run_ut` process; peak memory is the largest resident
set of that process and its workers (getrusage of the children, which includes a pool's workers only after they
exit, so it is the maximum over processes, not their sum).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "tests/data/gpt2_bf16_statistics/step0/proc8497/dump.json"


def make_dump(records: int, into: Path) -> Path:
    """``records`` forward records (with their backwards) built by repeating the GPT-2 step."""
    doc = json.loads(SOURCE.read_text())
    forwards = [(k, v) for k, v in doc["data"].items() if k.endswith(".forward")]
    backwards = {k: v for k, v in doc["data"].items() if k.endswith(".backward")}
    data, counters = {}, {}
    for made in range(records):
        key, record = forwards[made % len(forwards)]
        api = key.rsplit(".", 2)[0]
        n = counters.get(api, 0)
        counters[api] = n + 1
        data[f"{api}.{n}.forward"] = record
        back = backwards.get(key.replace(".forward", ".backward"))
        if back is not None:
            data[f"{api}.{n}.backward"] = back
    doc["data"] = data
    path = into / f"dump_{records}.json"
    path.write_text(json.dumps(doc))
    return path


def measure(dump: Path, workers: int) -> tuple[float, float]:
    """(wall seconds, peak MiB) of one run_ut process."""
    code = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "p = subprocess.run([sys.executable, '-m', 'precheck', 'run_ut', '-api_info', sys.argv[1], '-o', "
        "sys.argv[2], '-q', '-d', 'cpu', '-n', sys.argv[3]], capture_output=True); "
        "assert p.returncode == 0, p.stderr.decode()[-2000:]; "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    with tempfile.TemporaryDirectory() as out:
        wall, rss = subprocess.run(
            [sys.executable, "-c", code, str(dump), out, str(workers)], capture_output=True, text=True, check=True
        ).stdout.split()
    return float(wall), int(rss) / 1024


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, nargs="+", default=[470, 4700])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    return parser


def main() -> None:
    args = build_parser().parse_args()
    print(f"{'records':>8} {'workers':>8} {'wall s':>8} {'APIs/s':>8} {'peak MiB':>9}")
    peaks: dict[int, dict[int, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for records in args.records:
            dump = make_dump(records, Path(tmp))
            for workers in args.workers:
                wall, peak = measure(dump, workers)
                peaks.setdefault(workers, {})[records] = peak
                print(f"{records:8d} {workers:8d} {wall:8.1f} {records / wall:8.1f} {peak:9.0f}", flush=True)
    small, large = min(args.records), max(args.records)
    for workers, by_records in peaks.items():
        print(
            f"peak memory, {large} vs {small} records, {workers} worker(s): "
            f"{by_records[large] / by_records[small]:.2f}x"
        )


if __name__ == "__main__":
    main()
