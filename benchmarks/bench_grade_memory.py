"""Peak memory of checking one large record: what grading adds on top of the record's own tensors.

    python benchmarks/bench_grade_memory.py [--rows 512] [--repeat 3]

The record is a bf16 ``torch.addmm`` of a LLaMA-sized projection (bias 2816, input ROWS x 1024, weight
1024 x 2816) with its backward, recorded as statistics, so its inputs are generated. Each check is a fresh
``precheck run_ut -n 1`` process on the CPU; peak memory is its largest resident set (getrusage of the children),
the smallest of ``--repeat`` runs. The same record with tiny shapes gives the process's own footprint (Python,
torch, precheck), so the difference is what the large record costs: its inputs, both sides' outputs and gradients,
and grading. The tensors themselves take about 4 + 12 bytes per element of every input, output and gradient
(bf16 target, float64 golden). Run it once with another checkout first on PYTHONPATH to compare graders.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def _tensor(shape: list[int], requires_grad: bool) -> dict:
    return {
        "type": "torch.Tensor",
        "dtype": "torch.bfloat16",
        "shape": shape,
        "Max": 1.0,
        "Min": -1.0,
        "Mean": 0.0,
        "Norm": float(shape[0]),
        "requires_grad": requires_grad,
    }


def make_dump(rows: int, hidden: int, inner: int, into: Path) -> Path:
    """A one-record statistics dump: ``torch.addmm(bias, x, w)`` with x rows x hidden, w hidden x inner."""
    bias, x, w, out = [inner], [rows, hidden], [hidden, inner], [rows, inner]
    data = {
        "Torch.addmm.0.forward": {
            "input_args": [_tensor(bias, True), _tensor(x, True), _tensor(w, True)],
            "input_kwargs": {},
            "output": [_tensor(out, True)],
        },
        "Torch.addmm.0.backward": {
            "input": [_tensor(out, False)],
            "output": [_tensor(bias, False), _tensor(x, False), _tensor(w, False)],
        },
    }
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    into.mkdir(parents=True, exist_ok=True)
    path = into / "dump.json"
    path.write_text(json.dumps(doc))
    return path


def peak_rss(dump: Path) -> float:
    """MiB: the largest resident set of one fresh ``run_ut -n 1`` process (os.wait4 reports that child alone)."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "precheck", "run_ut", "-api_info", str(dump), "-o", out, "-d", "cpu", "-n", "1"]
        child = subprocess.Popen([*cmd, "-q"], cwd=out, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode:
            raise SystemExit(f"run_ut failed ({child.returncode}) on {dump}")
        return usage.ru_maxrss / 1024


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=512, help="rows of the input (default 512)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, interleaved (minimum kept)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    import precheck.grader.metrics as grader_metrics  # which checkout is measured (PYTHONPATH)

    print(f"grader: {grader_metrics.__file__}")
    with tempfile.TemporaryDirectory() as root:
        large = make_dump(args.rows, 1024, 2816, Path(root) / "large")
        tiny = make_dump(2, 3, 4, Path(root) / "tiny")
        peaks: dict[Path, list[float]] = {large: [], tiny: []}
        for _ in range(args.repeat):
            for dump in peaks:
                peaks[dump].append(peak_rss(dump))
    elements = 2 * (args.rows * 1024 + 1024 * 2816 + 2816) + 2 * args.rows * 2816  # inputs, grads; out, grad_out
    base, big = min(peaks[tiny]), min(peaks[large])
    print(
        f"tiny record: peak RSS {base:.0f} MiB; large record ({elements / 1e6:.1f}M elements in inputs, outputs "
        f"and gradients): {big:.0f} MiB, {big - base:.0f} MiB above the tiny one "
        f"({(big - base) * 2**20 / elements:.1f} bytes per element)"
    )


if __name__ == "__main__":
    main()
