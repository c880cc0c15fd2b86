"""Real models at real size: precheck run_ut against msprobe acc_check on steps of torchvision and Hugging Face
architectures recorded with msprobe (benchmarks/real_models.py: ResNet-50 statistics at batch 32, 224x224; a bf16
MobileNetV3 tensor dump; ViT-B/16; T5-small's encoder-decoder; a Qwen2-shaped GQA decoder in bf16).

    python benchmarks/bench_real.py --venv VENV [--dumps DIR] [--msprobe] [MODEL ...]

VENV has torch 2.13, mindstudio-probe, transformers and torchvision
(``VENV=$(.venv/bin/python tests/data/recipes/msprobe_venv.py --pip transformers torchvision)``); each dump is
recorded into DIR (default: precheck-real in the temp folder) through tests/data/recipes/make_dump.py unless DIR
holds it already. Without --venv the dumps in DIR are used as they are.

For each dump it prints the records in dump.json, the APIs run_ut graded, its SKIP and error APIs (forward or
backward) with the commonest SKIP reasons, the whole process's wall time and the peak resident memory of its
process tree (workers included, sampled every 20 ms), and with --msprobe the same two numbers for msprobe's
acc_check (run on the CPU through tests/data/recipes/msprobe_cpu.py) and its error count. The target is this
machine's CPU, so an error on a half-precision dump is the CPU kernel's own.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
from process_tree import measure, run_measured

HERE = Path(__file__).resolve().parent
TOOLS = HERE.parent / "tests" / "data" / "recipes"  # make_dump.py, msprobe_cpu.py
# name: (real_models function, dtype, task)
MODELS = {
    "resnet50": ("resnet50", "fp32", "statistics"),
    "mobilenet_v3": ("mobilenet_v3", "bf16", "tensor"),
    "vit": ("vit", "fp32", "statistics"),
    "t5": ("t5", "fp32", "tensor"),
    "qwen2": ("qwen2", "bf16", "tensor"),
}


def record(venv: Path | None, folder: Path, name: str) -> Path | None:
    """The dump.json of ``name`` under ``folder``, recorded there with msprobe in ``venv`` when it has none."""
    function, dtype, task = MODELS[name]
    into = folder / f"{name}_{dtype}_{task}"
    found = sorted(into.glob("step0/*/dump.json"))
    if not found and venv is not None:
        into.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(HERE)}
        cmd = [str(venv / "bin" / "python"), str(TOOLS / "make_dump.py"), f"real_models:{function}", dtype, task]
        subprocess.run([*cmd, str(into)], check=True, env=env, cwd=HERE, stdout=subprocess.DEVNULL)
        found = sorted(into.glob("step0/*/dump.json"))
    return found[0] if found else None


def records(dump: Path) -> int:
    return len(json.loads(dump.read_text())["data"])


def _result(out: Path) -> pd.DataFrame:
    (csv,) = out.glob("accuracy_checking_result_*.csv")
    return pd.read_csv(csv, encoding="utf-8-sig", dtype=str, keep_default_na=False)


def verdicts(out: Path) -> dict:
    """APIs, SKIP and error APIs, and the commonest SKIP reasons of the run whose CSVs are in ``out``."""
    rows = _result(out)
    statuses = rows[["Forward Test Success", "Backward Test Success"]]
    skip = statuses.eq("SKIP").any(axis=1)
    reasons = collections.Counter(m.strip()[:70] for m in rows.loc[skip, "Message"])
    return {
        "apis": len(rows),
        "skip": int(skip.sum()),
        "error": int(statuses.eq("error").any(axis=1).sum()),
        "reasons": reasons.most_common(3),
    }


def _model(name: str) -> str:
    if name not in MODELS:
        raise argparse.ArgumentTypeError(f"unknown model {name!r} (expected one of {', '.join(MODELS)})")
    return name


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", type=_model, metavar="MODEL", help=f"{', '.join(MODELS)} (default: all)")
    parser.add_argument("--venv", type=Path, help="records missing dumps; runs msprobe with --msprobe")
    parser.add_argument("--dumps", help="the dumps' folder (default: precheck-real in the temp folder)")
    parser.add_argument("--msprobe", action="store_true", help="also run msprobe's acc_check (needs --venv)")
    parser.add_argument("-n", "--workers", default="2", help="run_ut's workers (default 2)")
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.msprobe and args.venv is None:
        parser.error("--msprobe needs --venv")
    folder = Path(args.dumps) if args.dumps else Path(tempfile.gettempdir()) / "precheck-real"
    head = f"{'dump':26} {'records':>7} {'APIs':>5} {'SKIP':>4} {'error':>5} {'wall s':>7} {'peak MiB':>8}"
    print(head + (f" {'msprobe s':>9} {'MiB':>6} {'error':>5} {'x faster':>8}" if args.msprobe else ""))
    notes = []
    for name in args.models or MODELS:
        dump = record(args.venv, folder, name)
        if dump is None:
            print(f"{name}: no dump under {folder}; give --venv to record one")
            continue
        out = Path(tempfile.mkdtemp(prefix=f"real-{name}-"))
        cmd = [sys.executable, "-m", "precheck", "run_ut", "-api_info", str(dump), "-o", str(out), "-q"]
        wall, rss = measure([*cmd, "-n", args.workers])
        v = verdicts(out)
        label = "_".join(MODELS[name])
        line = f"{label:26} {records(dump):7} {v['apis']:5} {v['skip']:4} {v['error']:5} {wall:7.1f} {rss:8.0f}"
        if args.msprobe:
            theirs = Path(tempfile.mkdtemp(prefix=f"real-{name}-msprobe-"))
            acc = [str(args.venv / "bin" / "python"), str(TOOLS / "msprobe_cpu.py"), "acc_check", "-api_info"]
            m_wall, m_rss, failure = run_measured([*acc, str(dump), "-o", str(theirs)])
            if failure:
                line += f" {m_wall:9.1f} {m_rss:6.0f}  failed"
                last = failure.strip().splitlines()[-1]
                notes.append(f"  {label}: msprobe failed after {m_wall:.0f} s: {last[:150]}")
            else:
                m_err = verdicts(theirs)["error"]
                line += f" {m_wall:9.1f} {m_rss:6.0f} {m_err:5} {m_wall / wall:8.2f}"
        print(line, flush=True)
        notes += [f"  {label}: SKIP {count}x {reason}" for reason, count in v["reasons"]]
    print("\n".join(notes))


if __name__ == "__main__":
    main()
