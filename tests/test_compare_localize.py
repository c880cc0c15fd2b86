"""compare's honest-kernel rule (precheck.compare.localize) on bug/clean twin pairs recorded with msprobe by
benchmarks/accumulation_record.py: one step recorded twice in the same dtype, once with a kernel that accumulates in
half precision. Their extra error stays below the tolerance, which named a later record (or none); the rule names the
bugged API, and the summary JSON, the records CSV, the console and the report say which rule named it."""

from __future__ import annotations

import shutil

import pytest

from precheck.compare import localize
from precheck.compare.dumps import compare_dumps
from tests.test_compare import compare, dump, outputs, run

# (bugged dump, clean twin, the bugged record, what the tolerance rule alone named)
TWINS = [
    ("acc_bf16_softmax_bf16", "acc_bf16_clean", "Functional.softmax.0.forward", "Torch.matmul.3.forward"),
    ("acc_fp16_softmax_fp16", "acc_fp16_clean", "Functional.softmax.0.forward", "Functional.layer_norm.0.backward"),
    ("acc_fp16_linear_fp16", "acc_fp16_clean", "Functional.linear.1.forward", "Torch.matmul.3.forward"),
]


@pytest.mark.parametrize(("bug", "clean", "bugged", "tolerance_first"), TWINS, ids=[t[0] for t in TWINS])
def test_half_precision_accumulation_bug_is_named_by_the_honest_kernel_rule(
    capsys, tmp_path, bug, clean, bugged, tolerance_first
):
    _, records, summary, out = compare(capsys, tmp_path, bug, clean, "--report")
    first, where = summary["first_divergent"], summary["localization"]
    assert first["name"] == bugged and first["rule"] == "honest kernel" and first["verdict"] == "suspect"
    assert "worse than an honest" in first["honest_kernel"] and "the bench's is not" in first["honest_kernel"]
    assert where["rule"] == "honest kernel" and where["tolerance_first"] == tolerance_first
    assert where["replayed_calls"] == 1  # the runs are identical up to the bug: one call graded, then named
    assert summary["suspects"][0]["name"] == bugged
    assert next(r for r in records if r["Record"] == bugged)["Verdict"] == "suspect"
    assert f"first divergent: {bugged}: each side graded against the float64 golden" in out
    assert "named by the honest kernel rule" in out
    page = next(tmp_path.glob("compare_report_*.html")).read_text(encoding="utf-8")
    assert "Named by the <b>honest kernel</b> rule" in page and f"First divergent record</b>: {bugged}" in page


def test_a_bench_worse_than_an_honest_kernel_is_not_the_targets_fault(capsys, tmp_path):
    """The twins swapped: the bug is on the bench's side, so no record is worse on the target only and the
    tolerance's record stands, named as such."""
    _, _, summary, out = compare(capsys, tmp_path, "acc_bf16_clean", "acc_bf16_softmax_bf16")
    where = summary["localization"]
    assert where["rule"] == "tolerance" and where["replayed_calls"] >= 1
    assert "no record graded worse than an honest kernel on the target only" in where["why"]
    assert summary["first_divergent"]["rule"] == "tolerance"
    assert summary["first_divergent"]["name"] == where["tolerance_first"] != "Functional.softmax.0.forward"
    assert "named by the tolerance rule" in out


def test_replays_stop_at_their_limit_and_say_so(tmp_path, monkeypatch):
    monkeypatch.setattr(localize, "MAX_REPLAYED", 0)
    result = compare_dumps(dump("acc_fp16_linear_fp16"), dump("acc_fp16_clean"), tmp_path)
    where = result.divergence.localization
    assert where["rule"] == "tolerance" and where["replayed_calls"] == 0 and "stopped at 0 calls" in where["why"]
    assert result.divergence.first.name == "Torch.matmul.3.forward"


@pytest.mark.parametrize(
    ("target", "bench", "mode"),
    [("bf16_statistics_gelu_bug", "fp32_statistics", "statistics"), ("fp32_md5_gelu_bug", "fp32_md5", "md5")],
)
def test_statistics_and_md5_dumps_keep_the_tolerance_rule_and_say_so(capsys, tmp_path, target, bench, mode):
    _, _, summary, out = compare(capsys, tmp_path, target, bench, "--report")
    where = summary["localization"]
    assert where["rule"] == "tolerance" and where["replayed_calls"] == 0
    assert where["why"] == f"a {mode} dump holds no tensors to grade against a golden: the tolerance rule alone"
    assert summary["first_divergent"]["rule"] == "tolerance"
    assert f"named by the tolerance rule: a {mode} dump holds no tensors" in out
    page = next(tmp_path.glob("compare_report_*.html")).read_text(encoding="utf-8")
    assert "Named by the <b>tolerance</b> rule" in page


def test_identical_runs_replay_nothing(capsys, tmp_path):
    _, _, summary, out = compare(capsys, tmp_path, "acc_fp16_clean", "acc_fp16_clean")
    assert summary["first_divergent"] is None and summary["localization"]["candidates"] == 0
    assert "the two runs agree everywhere" in out and "named by" not in out
    assert outputs(tmp_path)[2]["localization"]["replayed_calls"] == 0


def test_what_the_rule_graded_is_said_where_it_named_nothing(capsys, tmp_path):
    """Layer norm written out by hand against the fused one: records deviate within rounding, each is graded, none
    is worse on the target only; the console and the summary say what was graded rather than nothing."""
    _, _, summary, out = compare(capsys, tmp_path, "fp32_tensor_unfused_ln", "fp32_tensor")
    where = summary["localization"]
    assert summary["first_divergent"] is None and where["rule"] == "tolerance" and where["replayed_calls"] > 0
    assert where["why"].endswith(": no record parts the runs")
    assert "  the honest-kernel rule: no record graded worse than an honest kernel on the target only" in out


def test_a_bench_record_that_cannot_be_graded_names_nothing(capsys, tmp_path):
    """Where the bench's side of a record cannot be graded (its input file is gone), nothing says the bench is no
    worse than an honest kernel: the record is not named."""
    bench = tmp_path / "bench"
    shutil.copytree(dump("acc_bf16_clean").parent, bench)
    (bench / "dump_tensor_data" / "Functional.softmax.0.forward.input.0.pt").unlink()
    code, out, err = run(capsys, "compare", "-target", str(dump("acc_bf16_softmax_bf16")), "-bench",
                         str(bench / "dump.json"), "-o", str(tmp_path / "out"))  # fmt: skip
    assert code == 0, err
    summary = outputs(tmp_path / "out")[2]
    assert summary["localization"]["rule"] == "tolerance"
    assert (summary["first_divergent"] or {}).get("name") != "Functional.softmax.0.forward"
