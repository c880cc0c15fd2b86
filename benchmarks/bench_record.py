"""Recording overhead of a training step: no recorder, msprobe's PrecisionDebugger and precheck.record, tensor and
statistics tasks, on GPT-2 (make_dump.py's config), the LLaMA-style model of model_dumps.py and torchvision's
ResNet-18.

    .venv/bin/python tests/data/recipes/msprobe_venv.py --pip transformers torchvision -- \\
        benchmarks/bench_record.py [--repeats 3] [--dtype fp32] [MODEL ...]

Run it with the python of a venv that has msprobe 26.2 and precheck's torch (both recorders then share one torch).
Every run is a fresh process of that python; per model the variants alternate (none, msprobe tensor, precheck
tensor, msprobe statistics, precheck statistics, then again) so that a change in the machine's load falls on all
of them alike.

What one run does, and what is timed:
  1. builds the model (seed 0) and an SGD optimizer, then runs one untimed, unrecorded forward, backward and
     optimizer step, so that lazy initialisation (allocator, kernels, the optimizer's state) is behind;
  2. imports the recorder's module: timed apart as "setup", not part of the step;
  3. times the step, "step": the recorder is made and started (msprobe: msprobe_step.record_step writes its config,
     makes the PrecisionDebugger, whose making reads its API lists, and start(model) installs its hooks; precheck:
     entering precheck.record reads its API lists and installs its wrappers), forward and backward of step 0 run
     recorded, the recorder ends with the dump complete on disk (msprobe's stop() and step(); leaving the record
     block), then the optimizer step and zero_grad run outside the recording, as msprobe's documentation places
     them. msprobe records step 0 only, so the timed step is exactly the recorded one.
The overhead of a recorder is its best step (the fastest of the repeats: other work on a shared machine only adds
time; --stat median for the median) minus the best step with no recorder; "ratio" is precheck's
overhead over msprobe's (the target is at most 0.5). "peak" is the resident memory of the run's whole process
(sampled every 20 ms by process_tree.py), "dump" the size of what the recorder wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# name: (module in benchmarks/, function returning (model, run))
MODELS = {"gpt2": ("model_dumps", "gpt2"), "llama": ("model_dumps", "llama"), "resnet18": ("real_models", "resnet18")}
TASKS = ("tensor", "statistics")
RECORDERS = ("msprobe", "precheck")
_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
STATS = {"best": min, "median": statistics.median}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", choices=[[], *MODELS], metavar="MODEL", help=", ".join(MODELS))
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant (default 3)")
    parser.add_argument("--dtype", choices=_DTYPES, default="fp32")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--stat", choices=STATS, default="best", help="of the repeats' steps (default best)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in each run (default 1)")
    parser.add_argument("--python", default=sys.executable, help="the venv's python (default: this one)")
    parser.add_argument("--step", nargs=4, metavar=("MODEL", "RECORDER", "TASK", "RESULT"), help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.step:
        _one_step(*args.step, dtype=args.dtype, threads=args.threads)
        return
    runs: dict[tuple, list[dict]] = defaultdict(list)
    variants = [("none", "-")] + [(rec, task) for task in args.tasks for rec in RECORDERS]
    print(f"{args.dtype}, {args.threads} torch thread(s), {args.repeats} repeats ({args.stat}), python {args.python}")
    for model in args.models or list(MODELS):
        for repeat in range(args.repeats):
            for recorder, task in variants:
                run = _measured(args, model, recorder, task)
                runs[model, recorder, task].append(run)
                print(
                    f"  {model} {recorder} {task} #{repeat + 1}: step {run['step']:.3f} s, setup {run['setup']:.2f}"
                    f" s, peak {run['peak']:,.0f} MiB, dump {run['dump'] / 2**20:,.1f} MiB",
                    flush=True,
                )
    _table(runs, args.models or list(MODELS), args.tasks, STATS[args.stat])


def _measured(args: argparse.Namespace, model: str, recorder: str, task: str) -> dict:
    """One run in a fresh process: its step and setup seconds, the dump's bytes and the process's peak RSS."""
    from process_tree import measure

    folder = Path(tempfile.mkdtemp(prefix="bench_record_"))
    result = folder / "result.json"
    cmd = [args.python, __file__, "--dtype", args.dtype, "--threads", str(args.threads)]
    cmd += ["--step", model, recorder, task, str(result)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")]))
    try:
        _, peak = measure(cmd, env)
        return {**json.loads(result.read_text()), "peak": peak}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _table(runs: dict, models: list[str], tasks: list[str], of: Callable) -> None:
    print(
        "\n| model | task | none | msprobe | precheck | msprobe overhead | precheck overhead | ratio"
        " | peak none / msprobe / precheck | dump msprobe / precheck |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in models:
        base = of(r["step"] for r in runs[model, "none", "-"])
        for task in tasks:
            step = {rec: of(r["step"] for r in runs[model, rec, task]) for rec in RECORDERS}
            over = {rec: step[rec] - base for rec in RECORDERS}
            ratio = over["precheck"] / over["msprobe"] if over["msprobe"] > 0 else float("nan")
            peaks = [
                max(r["peak"] for r in runs[(model, *key)]) for key in (("none", "-"), *((r, task) for r in RECORDERS))
            ]
            dumps = [max(r["dump"] for r in runs[model, rec, task]) / 2**20 for rec in RECORDERS]
            print(
                f"| {model} | {task} | {base:.3f} s | {step['msprobe']:.3f} s | {step['precheck']:.3f} s"
                f" | {over['msprobe']:.3f} s | {over['precheck']:.3f} s | {ratio:.2f}"
                f" | {' / '.join(f'{p:,.0f}' for p in peaks)} MiB | {' / '.join(f'{d:,.1f}' for d in dumps)} MiB |"
            )


def _one_step(model_name: str, recorder: str, task: str, result: str, *, dtype: str, threads: int) -> None:
    """The child: one timed step (the module docstring says what is in it), written to ``result`` as JSON."""
    import importlib

    import real_models
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    real_models._torchvision_models()  # transformers imports torchvision when it is installed (real_models' note)
    module, function = MODELS[model_name]
    model, run = getattr(importlib.import_module(module), function)(getattr(torch, _DTYPES[dtype]))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    run().backward()  # the warm-up: untimed and unrecorded
    optimizer.step()
    optimizer.zero_grad()
    dump = Path(result).parent / "dump"
    start = time.perf_counter()
    record = _recorder(recorder, task, dump, model)
    setup = time.perf_counter() - start
    start = time.perf_counter()
    record(lambda: run().backward())
    optimizer.step()
    optimizer.zero_grad()
    step = time.perf_counter() - start
    size = sum(p.stat().st_size for p in dump.rglob("*") if p.is_file()) if dump.exists() else 0
    Path(result).write_text(json.dumps({"step": step, "setup": setup, "dump": size}))


def _recorder(recorder: str, task: str, dump: Path, model: object) -> Callable[[Callable[[], object]], None]:
    """Imports the recorder (the "setup") and gives what runs one step recorded by it: the recorder's making,
    start, the step, its stop and the dump written."""
    if recorder == "none":
        return lambda step: step()
    if recorder == "precheck":
        from precheck.recording.api import record

        def recorded(step: Callable[[], object]) -> None:
            with record(dump, step=0, task=task):
                step()

        return recorded
    import msprobe.pytorch  # noqa: F401 - imported here, not inside the timed step
    from msprobe_step import record_step

    cfg = {"task": task, "dump_path": str(dump), "rank": [], "step": [0], "level": "L1"}
    cfg[task] = {"scope": [], "list": [], "data_mode": ["all"]}
    return lambda step: record_step(model, step, str(dump), cfg)


if __name__ == "__main__":
    main()
