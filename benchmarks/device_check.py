"""The GPU path, proven in one command: record, replay and grade on an accelerator, and print a table.

    python benchmarks/device_check.py [--device cuda] [--out DIR]

On a machine with a CUDA GPU (the default device when torch sees one; ``--device cpu`` runs the same checks on
the CPU, which is how the suite keeps this script working where no GPU is lent), in a few minutes:

1. a small transformer block trained one step under autocast bf16 and one under autocast fp16 on the device,
   each recorded by ``precheck.record`` (tensor task);
2. each dump replayed by run_ut on the device and on the CPU (``-d``), float64 golden on the CPU;
3. one rank's collectives on the device's own backend (NCCL on CUDA, gloo on the CPU: world size 1, so one GPU
   suffices): all_reduce, broadcast and all_gather recorded by ``precheck.record`` and graded as a step folder.

Each line of the table is one run: what was recorded, where it was replayed, its APIs per forward status and its
wall time. The script exits 1 where any run raised or graded nothing, so a CI job with a GPU can run it as is.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def _block(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).to(device)


def record_autocast_step(device: str, dtype: torch.dtype, into: Path) -> Path:
    """One training step of the block under autocast in ``dtype`` on ``device``, recorded: its dump.json."""
    import precheck

    model = _block(device)
    x = torch.randn(2, 16, 64, device=device)
    with precheck.record(into, step=0) as recorder:
        with torch.autocast(device_type=device.split(":")[0], dtype=dtype):
            loss = model(x).float().pow(2).mean()
        loss.backward()
    (dump,) = recorder.written
    return Path(dump)


def _collectives(rank: int, device: str, into: str) -> None:
    """One rank's step of collectives on the device's backend, recorded (run in a process of its own)."""
    import torch.distributed as dist

    import precheck

    backend = "nccl" if device.startswith("cuda") else "gloo"
    dist.init_process_group(backend, init_method="tcp://127.0.0.1:29781", rank=rank, world_size=1)
    try:
        x = torch.arange(8, dtype=torch.float32, device=device) / 7
        with precheck.record(into, step=0):
            dist.all_reduce(x)
            dist.broadcast(x, src=0)
            gathered = [torch.empty_like(x)]
            dist.all_gather(gathered, x)
    finally:
        dist.destroy_process_group()


def record_collectives(device: str, into: Path) -> Path:
    """The collectives' step folder (``into/step0``) with its one rank's dump, recorded in a process of its own (a
    process group is the process's for good)."""
    import subprocess

    cmd = [sys.executable, __file__, "--device", device, "--collectives-into", str(into)]
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    return into / "step0"


def run_row(what: str, where: str, run) -> list[str]:
    """One table row from a run: ``run()`` returns a RunSummary."""
    start = time.perf_counter()
    try:
        summary = run()
    except Exception as e:  # a run that raises is this script's finding, not its end
        return [what, where, "-", f"raised {type(e).__name__}: {str(e)[:120]}", "-", "-", "-", "-"]
    seconds = time.perf_counter() - start
    by: Counter = summary.counts  # APIs per forward status
    apis = sum(by.values())
    return [
        what,
        where,
        str(apis),
        *(str(by.get(s, 0)) for s in ("pass", "warning", "error", "SKIP")),
        f"{seconds:.1f}",
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = "cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--device", default=default, help=f"the accelerator to check (default here: {default})")
    parser.add_argument("--out", type=Path, default=None, help="where dumps and runs go (default: a temp folder)")
    parser.add_argument("--collectives-into", type=Path, default=None, help=argparse.SUPPRESS)  # the child's part
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from precheck.dump.steps import find_dumps
    from precheck.ranks import run_step
    from precheck.run_ut import run_ut

    if args.collectives_into is not None:
        _collectives(0, args.device, str(args.collectives_into))
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="precheck-device-"))
    device = args.device
    rows = []
    for name, dtype in (("autocast bf16", torch.bfloat16), ("autocast fp16", torch.float16)):
        try:
            dump = record_autocast_step(device, dtype, out / name.replace(" ", "_"))
        except Exception as e:
            rows.append([f"{name} on {device}", "-", "-", f"recording raised {type(e).__name__}: {str(e)[:120]}",
                         "-", "-", "-", "-"])  # fmt: skip
            continue
        for where in dict.fromkeys((device, "cpu")):
            runs = out / "runs" / f"{name.replace(' ', '_')}_{where.replace(':', '')}"
            rows.append(run_row(f"{name} on {device}", where, lambda d=dump, w=where, r=runs: run_ut(
                d, r, device=w, workers=1, backend="inprocess", progress=False)))  # fmt: skip
    try:
        step = record_collectives(device, out / "collectives")
        rows.append(run_row(f"collectives on {device}", "cpu", lambda: run_step(
            find_dumps(step), out / "runs" / "collectives", device="cpu", workers=1, backend="inprocess")))  # fmt: skip
    except Exception as e:
        rows.append([f"collectives on {device}", "-", "-", f"raised {type(e).__name__}: {str(e)[:120]}",
                     "-", "-", "-", "-"])  # fmt: skip
    head = ["recorded", "replayed on", "APIs", "pass", "warning", "error", "SKIP", "seconds"]
    print(f"torch {torch.__version__}, device {device}" + (f" ({torch.cuda.get_device_name()})" if device.startswith(
        "cuda") else ""))  # fmt: skip
    print("| " + " | ".join(head) + " |\n" + "|---" * len(head) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    failed = [r for r in rows if r[2] in ("-", "0")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
