"""Cost of rebuilding one tensor from its recorded statistics (statistics mode), at real size.

    python benchmarks/bench_synth.py [--shape 32 256 56 56] [--dtypes float32 bfloat16]

For each dtype the statistics of a real-looking activation (normal law, mean 0.01, sd 1, rounded to the dtype) are
computed here, then a fresh Python process with one intra-op thread rebuilds the tensor with
``precheck.inputs.synth.synthesize`` and reports: its CPU seconds per 10M elements (the target is at most 1 s),
its peak resident memory above what it held before the call, in float64 copies of the tensor
(peak bytes / (8 * numel); the target is at most 3), and how far the rebuilt tensor's statistics are from the
recorded ones (max and min must be exact, mean and norm within 1e-3 after rounding to the dtype). The peak is
the kernel's high-water mark (VmHWM), reset just before the call.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, math, sys, time
import torch
torch.set_num_threads(1)
from precheck.dump.records import Stats, TensorSpec
from precheck.inputs.synth import rng_for, synthesize

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)

job = json.loads(sys.argv[1])
spec = TensorSpec(dtype=getattr(torch, job["dtype"]), shape=tuple(job["shape"]), stats=Stats(*job["stats"]))
rng = rng_for(0, "Tensor.__iadd__.0", "input_args[0]")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset VmHWM to the current resident set
before = status("VmRSS")
start = time.process_time()
out, note = synthesize(spec, rng)
seconds = time.process_time() - start
peak = status("VmHWM") - before
d = out.double()
got = [float(d.max()), float(d.min()), float(d.mean()), float(d.norm())]
print(json.dumps({"seconds": seconds, "peak": peak, "got": got, "note": note}))
"""


def recorded_stats(shape: tuple[int, ...], dtype: torch.dtype) -> list[float]:
    """Max, Min, Mean and Norm of a normal(0.01, 1) activation of this shape, rounded to ``dtype`` (float64 sums)."""
    n = math.prod(shape)
    x = torch.from_numpy(np.random.default_rng(7).standard_normal(n, dtype=np.float32) + np.float32(0.01))
    x = x.to(dtype).double()
    return [float(x.max()), float(x.min()), float(x.mean()), float(x.norm())]


def measure(dtype: str, shape: list[int], stats: list[float]) -> dict:
    """Rebuild one tensor of ``shape`` and ``dtype`` from ``stats`` (Max, Min, Mean, Norm) in a fresh process:
    its CPU seconds, peak bytes above what the process held before, statistics and note."""
    job = json.dumps({"dtype": dtype, "shape": shape, "stats": stats})
    run = subprocess.run([sys.executable, "-c", CHILD, job], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(run.stdout.splitlines()[-1])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", type=int, nargs="+", default=[32, 256, 56, 56])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    return parser


def main() -> None:
    args = build_parser().parse_args()
    n = math.prod(args.shape)
    print(f"shape {tuple(args.shape)}: {n} elements, one thread")
    print(f"{'dtype':<10} {'s / 10M':>8} {'peak / (8 n)':>13} {'max, min exact':>15} {'mean rel':>9} {'norm rel':>9}")
    for name in args.dtypes:
        stats = recorded_stats(tuple(args.shape), getattr(torch, name))
        r = measure(name, args.shape, stats)
        mx, mn, mean, norm = r["got"]
        exact = mx == stats[0] and mn == stats[1]
        print(
            f"{name:<10} {r['seconds'] * 1e7 / n:>8.2f} {r['peak'] / (8 * n):>13.2f} {str(exact):>15}"
            f" {abs(mean - stats[2]) / abs(stats[2]):>9.1e} {abs(norm - stats[3]) / stats[3]:>9.1e}"
            + (f"  note: {r['note']}" if r["note"] else "")
        )


if __name__ == "__main__":
    main()
