"""Is precheck record's dump msprobe's? Each bundled model's step recorded by msprobe's PrecisionDebugger and by
precheck.record in the same interpreter (one torch, one seed), then compared: record names and order, every
record, dump.json's bytes (the machine's paths aside), every tensor file, and the rows precheck run_ut gives on
each dump.

Run it with the msprobe venv's python (it needs msprobe and transformers; precheck from this checkout):
    .venv/bin/python tests/data/recipes/msprobe_venv.py --pip transformers torchvision -- \\
        benchmarks/record_vs_msprobe.py /tmp/fidelity
    .venv/bin/python tests/data/recipes/msprobe_venv.py --pip transformers torchvision -- \\
        benchmarks/record_vs_msprobe.py /tmp/fidelity mlp cnn --dtype fp32
    .venv/bin/python tests/data/recipes/msprobe_venv.py --pip transformers torchvision -- \\
        benchmarks/record_vs_msprobe.py /tmp/fidelity mobilenet_v3 t5
    .venv/bin/python tests/data/recipes/msprobe_venv.py --pip transformers torchvision -- \\
        benchmarks/record_vs_msprobe.py /tmp/fidelity --steps

--steps takes training_steps.py's steps as users write them (autocast, GradScaler, clipping, checkpointing,
LSTM/GRU; ConvNeXt, Swin, BERT, Mistral, Gemma, BART, Whisper): each its whole step, in its own dtypes (--dtype
does not apply), named ``NAME_step_TASK_WHO``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import model_dumps
import real_models
import training_steps

TASKS = ("tensor", "statistics")
# the bundled models, and real architectures at real input sizes (bench_real.py's)
MODELS = {
    **model_dumps.MODELS,
    **{n: getattr(real_models, n) for n in ("resnet50", "mobilenet_v3", "vit", "t5", "qwen2")},
}


def record_one(who: str, model: str, dtype: str, task: str, out: Path) -> None:
    """One recording in this process: ``who`` is msprobe or precheck; ``model`` a model of MODELS (its forward
    and backward in ``dtype``) or a step of training_steps.STEPS (its whole step)."""
    import torch

    real_models._torchvision_models()  # transformers imports torchvision when it is installed (real_models' note)
    torch.manual_seed(0)
    if model in training_steps.STEPS:
        net, step = training_steps.STEPS[model]()
    else:
        net, run = MODELS[model](model_dumps.DTYPES[dtype])
        step = lambda: run().backward()  # noqa: E731
    record_with(who, net, step, task, out)


def record_with(who: str, net: object, step: object, task: str, out: Path) -> None:
    """``step()`` recorded as step 0 under ``out`` by msprobe's PrecisionDebugger (started on ``net``, level L1)
    or by precheck.record."""
    if who == "msprobe":
        from msprobe_step import record_step

        cfg = {"task": task, "dump_path": str(out), "rank": [], "step": [0], "level": "L1"}
        record_step(net, step, str(out), {**cfg, task: {"scope": [], "list": [], "data_mode": ["all"]}})
    else:
        import precheck

        with precheck.record(out, step=0, task=task):
            step()


def compared(ms: Path, pc: Path) -> dict[str, object]:
    """What differs between msprobe's dump under ``ms`` and precheck's under ``pc``."""
    import torch

    (a,), (b,) = sorted(ms.glob("step0/*/dump.json")), sorted(pc.glob("step0/*/dump.json"))
    da, db = json.loads(a.read_text()), json.loads(b.read_text())
    same_bytes = a.read_text().replace(str(a.parent), "X") == b.read_text().replace(str(b.parent), "X")
    files = sorted(p.name for p in (a.parent / "dump_tensor_data").glob("*")) if da["task"] == "tensor" else []
    theirs = sorted(p.name for p in (b.parent / "dump_tensor_data").glob("*")) if db["task"] == "tensor" else []
    unequal = [
        f
        for f in files
        if f in theirs
        and not _equal(torch.load(a.parent / "dump_tensor_data" / f), torch.load(b.parent / "dump_tensor_data" / f))
    ]
    rows_a, rows_b = _rows(a), _rows(b)
    return {
        "records": len(da["data"]) if len(da["data"]) == len(db["data"]) else f"{len(da['data'])} vs {len(db['data'])}",
        "names and order": list(da["data"]) == list(db["data"]),
        "only msprobe's": [k for k in da["data"] if k not in db["data"]][:6],
        "only precheck's": [k for k in db["data"] if k not in da["data"]][:6],
        "records differing": sum(da["data"][k] != db["data"].get(k) for k in da["data"]),
        "dump.json bytes": "same" if same_bytes else "differ",
        "files": f"{len(files)} vs {len(theirs)}, {len(unequal)} unequal",
        "run_ut rows": "same" if rows_a == rows_b else f"{len(set(rows_a) ^ set(rows_b))} differ",
    }


def _equal(a: object, b: object) -> bool:
    """Equal tensors, NaN where NaN (an overflowing fp16 step's gradients): torch.equal holds NaN unequal."""
    import torch

    if not isinstance(a, torch.Tensor) or not a.is_floating_point():
        return torch.equal(a, b)
    same = a.dtype == b.dtype and a.shape == b.shape
    return same and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)


def _rows(dump_json: Path) -> list[str]:
    from precheck.run_ut import run_ut

    summary = run_ut(dump_json, dump_json.parent / "run_ut", workers=1)
    return [line for line in summary.details_path.read_text(encoding="utf-8-sig").splitlines()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument(
        "models",
        nargs="*",
        help=f"{', '.join([*MODELS, *training_steps.STEPS])} (default: the bundled {', '.join(model_dumps.MODELS)})",
    )
    parser.add_argument("--dtype", choices=model_dumps.DTYPES, default="bf16")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--steps", action="store_true", help="also every step of training_steps.py")
    parser.add_argument("--one", nargs=4, metavar=("WHO", "MODEL", "TASK", "OUT"), help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.one:
        who, model, task, out = args.one
        record_one(who, model, args.dtype, task, Path(out))
        return
    models = [*args.models, *(training_steps.STEPS if args.steps else ())] or list(model_dumps.MODELS)
    for model in models:
        dtype = "step" if model in training_steps.STEPS else args.dtype
        for task in args.tasks:
            outs = {who: args.out_dir / f"{model}_{dtype}_{task}_{who}" for who in ("msprobe", "precheck")}
            for who, out in outs.items():  # a process each: msprobe's wrappers stay on once started
                shutil.rmtree(out, ignore_errors=True)  # an earlier run's step0/proc* would be a second dump
                cmd = [
                    sys.executable,
                    __file__,
                    str(args.out_dir),
                    "--dtype",
                    args.dtype,
                    "--one",
                    who,
                    model,
                    task,
                    str(out),
                ]
                subprocess.run(cmd, check=True, capture_output=True)
            print(f"{model} {dtype} {task}: {compared(outs['msprobe'], outs['precheck'])}", flush=True)


if __name__ == "__main__":
    main()
