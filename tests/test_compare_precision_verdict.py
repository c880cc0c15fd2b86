"""compare of clean pairs that differ only in precision (issue 51): the verdict says the runs agree within what the
precision explains unless a record is suspect, and uninitialised memory names nothing.

- FSDP2 bf16 against its fp32 twin (tests/data/sharded, 2 ranks, statistics and tensor tasks). Rank 1's narrow of
  the unfilled all-gather buffer holds NaN in one run and a freed tensor's stale numbers in the other: it was the
  first divergent record (deviation inf); rank 0's same narrow holds NaN in both runs, so the step tells it is a
  buffer read before it is written. In the statistics task rank 0's RMSNorm rsqrt gradient (fp32, 0.022 from
  inputs whose statistics read 0.004) was named suspect, and the add it hands that gradient was then named first
  divergent, inherited, with no suspect anywhere.
- The autocast bf16 block step against its fp32 twin (tests/data/compare/block_fp32_*, make_block_fp32.py).
- A bug twin across precisions still names its suspect; an input that differs and no record produced is still
  named.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from precheck.commands.cli import main
from tests.helpers import DATA

SHARDED = DATA / "sharded"
AGREE = "the runs agree within what the precision explains (bf16 against fp32)"
NARROW = {"statistics": "Tensor.narrow.4.forward", "tensor": "Tensor.narrow.2.forward"}  # rank 1's stale narrow


def _cli(capsys, target: Path, bench: Path, out: Path, *extra: str) -> tuple[int, str]:
    code = main(["compare", "-target", str(target), "-bench", str(bench), "-o", str(out), *extra])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    return code, stdout


def _rank(out: Path, rank: int) -> tuple[dict, dict[str, dict]]:
    """(summary, records CSV rows by record) of one rank's compare."""
    summary = json.loads(next(out.glob(f"compare_summary_rank{rank}_*.json")).read_text())
    with open(next(out.glob(f"compare_records_rank{rank}_*.csv")), encoding="utf-8") as f:
        return summary, {r["Record"]: r for r in csv.DictReader(f)}


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_a_clean_fsdp2_bf16_step_against_its_fp32_twin_names_nothing(capsys, tmp_path, task):
    pair = [SHARDED / f"fsdp2_{p}_{task}_msprobe" / "step0" for p in ("bf16", "fp32")]
    code, out = _cli(capsys, *pair, tmp_path)
    assert code == 0
    assert "first divergent" not in out and "suspect:" not in out
    assert "step: the runs part on no rank (2 ranks compared)" in out
    summary, records = _rank(tmp_path, 1)
    assert summary["first_divergent"] is None and summary["suspects"] == []
    assert NARROW[task] in summary["not_comparable"]
    assert records[NARROW[task]]["Verdict"] == "undefined"
    assert "neither did on rank 0" in records[NARROW[task]]["Produced by"]
    assert "or in one run where a peer rank's same record reads them in both" in out


def test_the_rsqrt_gradient_of_the_statistics_pair_is_explained_by_the_precision(capsys, tmp_path):
    pair = [SHARDED / f"fsdp2_{p}_statistics_msprobe" / "step0" for p in ("bf16", "fp32")]
    _, out = _cli(capsys, *pair, tmp_path, "--report")
    summary, records = _rank(tmp_path, 0)
    assert summary["first_divergent"] is None and summary["suspects"] == []
    explained = summary["explained"]
    assert explained["precisions"] == ["bfloat16", "float32"] and explained["carried_from"] == "Torch.rsqrt.3.backward"
    assert explained["record"] == "Tensor.__add__.10.backward" and 0.02 < explained["deviation"] < 0.025
    assert records["Torch.rsqrt.3.backward"]["Verdict"] == "agree"
    assert (
        f"  {AGREE}: no record is suspect, and the largest deviation, 0.022 (5.64 bf16 roundings) at "
        "Tensor.__add__.10.backward, was carried from Torch.rsqrt.3.backward, whose own output is within bf16 "
        "rounding: explained by the precision"
    ) in out
    page = next(tmp_path.glob("compare_report_rank0_*.html")).read_text(encoding="utf-8")
    assert f'<p id="first">T{AGREE[1:]}: no record is suspect' in page


def test_a_rank_compared_alone_still_names_its_stale_narrow(capsys, tmp_path):
    """Without the step's other rank nothing tells the stale numbers from data: a NaN where the other run holds
    numbers stays a divergence, and is no precision's."""
    pair = [SHARDED / f"fsdp2_{p}_tensor_msprobe" / "step0" / "rank1" for p in ("bf16", "fp32")]
    _, out = _cli(capsys, *pair, tmp_path)
    assert f"first divergent: {NARROW['tensor']}: inherited" in out and AGREE not in out


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_the_autocast_block_step_agrees_with_its_fp32_twin(capsys, tmp_path, task):
    target = DATA / "steps" / f"block_autocast_bf16_{task}_msprobe"
    code, out = _cli(capsys, target, DATA / "compare" / f"block_fp32_{task}", tmp_path)
    assert code == 0 and "first divergent" not in out and "suspect" not in out
    assert "  no record diverges beyond bf16 rounding (worst: " in out


def test_a_bug_twin_across_precisions_still_names_its_suspect(capsys, tmp_path):
    _, out = _cli(capsys, DATA / "compare" / "bf16_statistics_gelu_bug", DATA / "compare" / "fp32_statistics", tmp_path)
    assert "first divergent: Functional.gelu.0.forward: its inputs agree" in out and "the API is suspect" in out
    assert AGREE not in out


def test_an_input_that_differs_and_no_record_produced_is_still_named(capsys, tmp_path):
    """The autocast step's input, and so its first linear's output, 5% larger in the target: the linear inherits
    it and no record is suspect, but no record within rounding handed it on: precision does not explain it."""
    target = tmp_path / "t"
    shutil.copytree(DATA / "steps" / "block_autocast_bf16_statistics_msprobe", target)
    (path,) = target.glob("step0/*/dump.json")
    doc = json.loads(path.read_text())
    first = next(iter(doc["data"].values()))
    for stats in (first["input_args"][0], *first["output"]):
        for key in ("Max", "Min", "Mean", "Norm"):
            stats[key] *= 1.05
    path.write_text(json.dumps(doc))
    _, out = _cli(capsys, target, DATA / "compare" / "block_fp32_statistics", tmp_path / "out")
    assert (
        "first divergent: Functional.linear.0.forward: inherited: its input Functional.linear.0.forward.input.0" in out
    )
    assert AGREE not in out
