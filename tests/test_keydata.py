"""precheck keydata: two runs' RL key training data (msprobe's SingleSave dumps recorded by
benchmarks/keydata_record.py) compared to the first step and item where they part."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from helpers import DATA

from precheck.commands.cli import main
from precheck.compare.keydata import COLUMNS

KD = DATA / "keydata"


def _run(capsys, target: Path, bench: Path, out: Path, *extra: str) -> tuple[str, list[dict], dict]:
    assert main(["keydata", "-target", str(target), "-bench", str(bench), "-o", str(out), *extra]) == 0
    text = capsys.readouterr().out
    with open(next(out.glob("keydata_compare_*.csv")), encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return text, rows, json.loads(next(out.glob("keydata_summary_*.json")).read_text(encoding="utf-8"))


def test_a_log_prob_kernel_that_rounds_early_parts_the_runs_at_its_step(capsys, tmp_path):
    text, rows, summary = _run(capsys, KD / "log_prob_bf16", KD / "clean", tmp_path)
    first = summary["first_part"]
    assert (first["step"], first["name"], first["rank"], first["Result"]) == (1, "old_log_prob", 0, "differ")
    assert "first part: step 1, old_log_prob (rank 0, micro step 0): differ" in text
    # step 0 agrees everywhere, and at step 1 the tokens still agree: only the log-probabilities part
    assert {r["Result"] for r in rows if r["step"] == "0"} == {"identical"}
    assert {r["Result"] for r in rows if r["name"] in ("prompts", "responses")} == {"identical"}
    assert summary["first_step_per_name"]["log_prob"] == 1 and "responses" not in summary["first_step_per_name"]
    assert len(rows) == 42 and summary["results"]["identical"] + summary["results"]["differ"] == 42


def test_differing_tokens_part_the_runs_in_the_responses(capsys, tmp_path):
    text, rows, summary = _run(capsys, KD / "top_k_sampling", KD / "clean", tmp_path)
    first = summary["first_part"]
    assert (first["step"], first["name"], first["micro_step"]) == (1, "responses", 0)
    assert "values differ (whole numbers: tokens)" in first["Message"]
    assert {r["Result"] for r in rows if r["name"] == "prompts"} == {"identical"}


def test_two_identical_runs_agree(capsys, tmp_path):
    text, rows, summary = _run(capsys, KD / "clean", KD / "clean", tmp_path)
    assert summary["first_part"] is None and summary["results"] == {"identical": 42}
    assert "the two runs agree on every item" in text


def test_the_csv_keeps_msprobe_comparator_columns_and_its_numbers(capsys, tmp_path):
    header = (KD / "msprobe_single_comparator_header.py.txt").read_text(encoding="utf-8")
    msprobe = [line.split("'")[1] for line in header.splitlines() if line.strip().endswith(("',", "'"))]
    assert len(msprobe) == 12 and all(c in COLUMNS for c in msprobe)
    _, rows, _ = _run(capsys, KD / "log_prob_bf16", KD / "clean", tmp_path)
    ours = {r["step"]: r for r in rows if r["name"] == "log_prob"}
    with open(KD / "msprobe_log_prob.csv", encoding="utf-8") as f:
        for theirs in csv.DictReader(f):  # msprobe SingleComparator's own log_prob.xlsx, as CSV
            row = ours[theirs["step"]]
            for column in ("相同元素百分比(%)", "最大绝对误差", "最大相对误差", "误差在千分之一内元素占比(%)"):
                assert float(row[column]) == pytest.approx(float(theirs[column]), rel=1e-5, abs=1e-12), column


def test_missing_odd_and_unreadable_items_become_rows_and_the_run_goes_on(capsys, tmp_path):
    target = tmp_path / "target"
    shutil.copytree(KD / "clean", target)
    log_prob = target / "data" / "log_prob"
    shutil.rmtree(log_prob / "step2")  # only in the bench
    (log_prob / "step0" / "rank0" / "micro_step0" / "log_prob.npy").write_bytes(b"not an array")
    step1 = log_prob / "step1" / "rank0" / "micro_step0"
    (step1 / "log_prob.npy").unlink()  # statistics only: compared by them
    loss = target / "data" / "loss" / "step1" / "rank0" / "micro_step0" / "loss.npy"
    import numpy as np

    np.save(loss, np.zeros((2,), dtype=np.float32))  # another shape
    np.save(target / "data" / "kl_loss" / "step2" / "rank0" / "micro_step0" / "kl_loss.npy", np.array("text"))
    _, rows, summary = _run(capsys, target, KD / "clean", tmp_path / "out")
    by = {(r["name"], r["step"]): r for r in rows}
    assert by[("log_prob", "2")]["Result"] == "only in bench"
    assert by[("log_prob", "0")]["Result"] == "unreadable" and "log_prob.npy" in by[("log_prob", "0")]["Message"]
    assert by[("log_prob", "1")]["Result"] == "identical"
    assert by[("log_prob", "1")]["Message"].startswith("statistics only")
    assert by[("loss", "1")]["Result"] == "differ" and "shapes differ: [2] and []" in by[("loss", "1")]["Message"]
    assert by[("kl_loss", "2")]["Result"] == "unreadable"
    assert by[("kl_loss", "2")]["Message"] == "kl_loss.npy: unreadable: an array of dtype <U4, not numbers"
    assert summary["first_part"]["name"] == "log_prob" and summary["first_part"]["Result"] == "unreadable"


def test_a_folder_that_is_not_a_key_data_dump_is_one_line_exit_2(capsys, tmp_path):
    assert main(["keydata", "-target", str(tmp_path), "-bench", str(KD / "clean"), "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == f"precheck: error: {tmp_path}: no <name>/step<N>/ folders under it: not a key-data dump (msprobe save)"
    )


def test_two_compares_in_one_second_keep_both_outputs(capsys, tmp_path):
    for _ in range(2):
        assert main(["keydata", "-target", str(KD / "clean"), "-bench", str(KD / "clean"), "-o", str(tmp_path)]) == 0
    assert len(list(tmp_path.glob("keydata_compare_*.csv"))) == 2
    assert len(list(tmp_path.glob("keydata_summary_*.json"))) == 2
