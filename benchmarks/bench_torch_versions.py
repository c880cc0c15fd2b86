"""Verdicts across torch versions: run_ut on the same bundled dumps (tensor and statistics, autocast steps, a step
folder of ranks) under each interpreter given, and every row whose forward or backward status differs between the
first and each other, with both messages. docs/benchmarks.md#older-torch says which differences are a kernel of
that torch and not precheck.

    python benchmarks/bench_torch_versions.py .venv/bin/python ~/.cache/precheck/torch-2.1.2/bin/python

Each interpreter needs precheck installed (pip install -e . with the numpy1 extra on torch 2.1: .ci/setup --torch).
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
DUMPS = (
    "gpt2_bf16_tensor mlp_fp32_tensor encoder_fp32_tensor composite_fp32_tensor cnn_bf16_tensor opinfo_bf16_all_stats "
    "record/scaler_fp16_tensor record/gpt_fp32_tensor record/gpt_bf16_silu6_statistics record/clip_fp32_tensor "
    "record/gpt_bf16_statistics record/edge_statistics record/edge_all_statistics record/autocast_bf16_tensor "
    "record/autocast_fp16_statistics record/edge_tensor record/gpt_bf16_tensor advice/gpt_fp16_loss_scale_1024 "
    "advice/dropout_unscaled steps/block_autocast_bf16_tensor_precheck steps/block_autocast_bf16_statistics_msprobe "
    "steps/block_bf16_tensor_msprobe steps/conv_gradscaler_fp16_tensor_msprobe steps/rnn_lstm_gru_tensor_precheck "
    "steps/checkpoint_mlp_tensor_msprobe steps/conv_overflow_fp16_tensor_msprobe record_mix/mix_tensor "
    "steps/gemma_statistics_msprobe steps/mistral_statistics_msprobe"
).split()
STEP_OF_RANKS = "record/ddp_gloo/step0"


def _run(python: str, out: Path) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(dump, API) -> (forward, backward, message) of every row run_ut writes under ``python``."""
    inputs = [(name, next((DATA / name / "step0").glob("*/dump.json"))) for name in DUMPS]
    inputs.append((STEP_OF_RANKS, DATA / STEP_OF_RANKS))
    rows = {}
    for name, source in inputs:
        where = out / name.replace("/", "_")
        argv = [python, "-m", "precheck", "run_ut", "-api_info", str(source), "-o", str(where), "-d", "cpu", "-q"]
        subprocess.run(argv, capture_output=True, check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        for result in where.glob("**/accuracy_checking_result_*.csv"):
            with result.open(encoding="utf-8-sig", newline="") as f:
                for row in list(csv.reader(f))[1:]:
                    rows[(f"{name}/{result.parent.name}", row[0])] = (row[1], row[2], row[3])
    return rows


def _version(python: str) -> str:
    code = "import torch; print(torch.__version__)"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("python", nargs="+", help="interpreters with precheck installed; the first is the reference")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [(_version(p), _run(p, Path(tmp) / str(i))) for i, p in enumerate(args.python)]
    (base_version, base), others = runs[0], runs[1:]
    for version, rows in others:
        differ = sorted(k for k in base.keys() | rows.keys() if base.get(k, ())[:2] != rows.get(k, ())[:2])
        print(f"torch {version} against torch {base_version}: {len(base)} rows, {len(differ)} with another status")
        kinds = Counter()
        for key in differ:
            mine, theirs = base.get(key, ("-", "-", "")), rows.get(key, ("-", "-", ""))
            print(f"  {key[0]} {key[1]}: {mine[0]}/{mine[1]} -> {theirs[0]}/{theirs[1]}")
            print(f"      {base_version}: {mine[2][:150]}\n      {version}: {theirs[2][:150]}")
            kinds["not implemented for 'Half'" if "for 'Half'" in theirs[2] else "other"] += 1
        print(f"  by kind: {dict(kinds)}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
