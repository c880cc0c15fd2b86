"""precheck record --check against record-then-run_ut: the same rows, no tensor file on disk, and the training
process's peak memory against the unrecorded step's (the target: within 1.5x).

    .venv/bin/python tests/data/recipes/msprobe_venv.py --pip transformers torchvision -- \\
        benchmarks/bench_record_check.py [MODEL ...] [--dtype fp32]

Each variant runs in a fresh process (models as bench_record.py builds them; one untimed, unrecorded step first):
  none       the step, unrecorded;
  offline    the step recorded in the tensor task, then precheck run_ut on its dump (-n 1) in the same process;
  inprocess  the step recorded with check=True, calls checked on a thread of the training process;
  pool       the same with backend="process", workers=2.
Printed per variant: the step's seconds (a checked step ends when its last call is graded), run_ut's seconds
(offline), the training process's own peak RSS (getrusage; a pool's workers are apart), the whole process tree's
peak (process_tree.py), the tensor files left on disk, and whether the details CSV equals the offline run's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_record import _DTYPES, MODELS

HERE = Path(__file__).resolve().parent
VARIANTS = ("none", "offline", "inprocess", "pool")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", choices=[[], *MODELS], metavar="MODEL", help="default: llama")
    parser.add_argument("--dtype", choices=_DTYPES, default="fp32")
    parser.add_argument("--python", default=sys.executable, help="the venv's python (default: this one)")
    parser.add_argument("--variant", nargs=3, metavar=("MODEL", "VARIANT", "FOLDER"), help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.variant:
        _child(*args.variant, dtype=args.dtype)
        return
    from process_tree import measure

    for model in args.models or ["llama"]:
        results, details = {}, {}
        for variant in VARIANTS:
            folder = Path(tempfile.mkdtemp(prefix="bench_check_"))
            cmd = [args.python, __file__, "--dtype", args.dtype, "--variant", model, variant, str(folder)]
            env = dict(
                os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")])
            )
            _, tree = measure(cmd, env)
            results[variant] = {**json.loads((folder / "result.json").read_text()), "tree": tree}
            found = sorted(folder.rglob("accuracy_checking_details_*.csv"))
            details[variant] = found[0].read_bytes() if found else None
            shutil.rmtree(folder, ignore_errors=True)
        base = results["none"]["own"]
        print(f"\n{model} {args.dtype}")
        print("| variant | step | run_ut | own peak | x none | tree peak | files on disk | rows as offline |")
        print("|---|---|---|---|---|---|---|---|")
        for variant, r in results.items():
            same = "-" if details[variant] is None else "same" if details[variant] == details["offline"] else "DIFFER"
            print(
                f"| {variant} | {r['step']:.2f} s | {r['run_ut']:.2f} s | {r['own']:,.0f} MiB | {r['own'] / base:.2f}"
                f" | {r['tree']:,.0f} MiB | {r['files']} | {same} |"
            )


def _child(model_name: str, variant: str, folder: str, *, dtype: str) -> None:
    import importlib

    import real_models
    import torch

    import precheck
    from precheck.run_ut import run_ut

    torch.manual_seed(0)
    real_models._torchvision_models()
    module, function = MODELS[model_name]
    model, run = getattr(importlib.import_module(module), function)(getattr(torch, _DTYPES[dtype]))
    run().backward()  # the warm-up: untimed and unrecorded
    model.zero_grad()
    out, ran = Path(folder), 0.0
    start = time.perf_counter()
    if variant == "none":
        run().backward()
    else:
        check = {
            "offline": {},
            "inprocess": {"check": True},
            "pool": {"check": True, "backend": "process", "workers": 2},
        }
        with precheck.record(out / "dump", step=0, **check[variant]) as recorder:
            run().backward()
    step = time.perf_counter() - start
    if variant == "offline":
        start = time.perf_counter()
        run_ut(recorder.written[0], out / "run_ut", workers=1)
        ran = time.perf_counter() - start
    files = sum(1 for p in out.rglob("*.pt"))
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    (out / "result.json").write_text(json.dumps({"step": step, "run_ut": ran, "own": own, "files": files}))


if __name__ == "__main__":
    main()
