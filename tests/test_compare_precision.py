"""compare across precisions (issue 38) on the twins of tests/data/record/gpt_model.py, recorded by precheck.record
(make_fixtures.py): one small GPT step in fp32, under autocast bf16, and under autocast bf16 with a 6-bit SiLU in
F.silu's place. A clean bf16 step against its fp32 twin names nothing and says so in one line; the bad SiLU is
named; a causal mask's -inf, on both sides, is no divergence; the two record folders compare at their top."""

from __future__ import annotations

import json
import shutil

from precheck.compare import divergence
from precheck.compare.dumps import compare_dumps
from precheck.compare.metrics import stats_deviation
from precheck.compare.session import one_dump
from tests.helpers import DATA
from tests.test_compare import outputs, run

REC = DATA / "record"


def _compare(capsys, tmp_path, target: str, bench: str, *extra: str) -> tuple[dict, list[dict], str]:
    """compare of two record folders named at their top (each holds step0/proc<its own pid>)."""
    code, out, err = run(capsys, "compare", "-target", str(REC / target), "-bench", str(REC / bench),
                         "-o", str(tmp_path), *extra)  # fmt: skip
    assert code == 0, err
    _, records, summary = outputs(tmp_path)
    return summary, records, out


def test_a_clean_autocast_bf16_step_against_its_fp32_twin_names_nothing(capsys, tmp_path):
    """It named Tensor.__add__.0.forward (an fp32 residual plus a bf16 branch, held to fp32's tolerance) and its
    honest-kernel rule graded 7 calls; now no record diverges, in one line, and every API record that deviates is
    graded on both sides and found no worse than an honest kernel."""
    summary, records, out = _compare(capsys, tmp_path, "gpt_bf16_tensor", "gpt_fp32_tensor", "--report")
    assert summary["first_divergent"] is None and summary["suspects"] == []
    assert {r["Verdict"] for r in records} == {"agree"}
    rounding = summary["rounding"]
    assert rounding["dtype"] == "bfloat16" and 1 < rounding["roundings"] < 8
    line = f"no record diverges beyond bf16 rounding (worst: {rounding['worst']} at "
    assert f"  {line}" in out and "first divergent" not in out
    assert summary["localization"]["rule"] == "tolerance" and summary["localization"]["replayed_calls"] >= 10
    page = next(tmp_path.glob("compare_report_*.html")).read_text(encoding="utf-8")
    assert "N" + line[1:] in page


def test_a_6bit_silu_in_the_bf16_step_is_named_against_the_fp32_twin(capsys, tmp_path):
    """It named the same Tensor.__add__ as the clean pair; the honest-kernel rule now grades each side in the
    dtype it ran in (bf16 and fp32) and names the SiLU at its first call."""
    summary, _, out = _compare(capsys, tmp_path, "gpt_bf16_silu6_tensor", "gpt_fp32_tensor")
    first = summary["first_divergent"]
    assert first["name"] == "Functional.silu.0.forward" and first["rule"] == "honest kernel"
    assert "worse than an honest bf16 kernel" in first["honest_kernel"] and "the bench's is not (pass)" in first[
        "honest_kernel"]  # fmt: skip
    assert "first divergent: Functional.silu.0.forward: each side graded" in out
    # its rows all pass msprobe's rules, each tensor on its own: the headline said "rows: pass 108" beside it
    assert out.startswith("precheck compare (tensor): 34 records; msprobe's Result of their 108 rows, each tensor")


def test_the_search_looks_past_a_tolerance_pick_that_the_replay_clears(tmp_path, monkeypatch):
    """With outputs held to their own dtype alone, the tolerance names Functional.layer_norm.1.forward (an fp32
    output carrying bf16 rounding, within bf16's); the honest-kernel rule stopped there and graded 3 calls. The pick
    replayed is no worse than an honest kernel on either side: it is cleared, and the search goes on past it."""
    monkeypatch.setattr(divergence, "CARRIED", 1.0)
    result = compare_dumps(one_dump(REC / "gpt_bf16_silu6_tensor"), one_dump(REC / "gpt_fp32_tensor"), tmp_path)
    where = result.divergence.localization
    assert where["tolerance_first"] == "Functional.layer_norm.1.forward"
    assert result.divergence.first.name == "Functional.silu.0.forward" and where["rule"] == "honest kernel"
    assert where["graded_up_to"] == "Functional.silu.0.forward"
    assert [c["record"] for c in where["cleared"]] == ["Functional.layer_norm.1.forward"]
    assert "1 record(s) the tolerance named cleared" in where["why"]


def test_statistics_of_a_causal_mask_equal_on_both_sides_name_nothing(capsys, tmp_path):
    """masked_fill's -inf gives Min = Mean = -inf and Norm = inf on both sides: it was an infinite deviation and
    the first divergent record ("outputs do not (inf)"). The two statistics record folders compare at their top
    (each side's proc folder is named by its own pid: "has no step0/proc... to compare with")."""
    summary, records, out = _compare(capsys, tmp_path, "gpt_bf16_statistics", "gpt_fp32_statistics")
    assert summary["first_divergent"] is None
    assert next(r for r in records if r["Record"] == "Tensor.masked_fill.0.forward")["Verdict"] == "agree"
    assert "  no record diverges beyond bf16 rounding (worst: " in out


def test_a_bias_gradient_whose_sum_cancels_names_nothing_in_a_clean_statistics_pair(capsys, tmp_path):
    """Drawn with seed 7, the clean twins' layer_norm.0 bias gradient sums 10 terms of its incoming gradient to a
    16th of their norm: its statistics deviate 16 bf16 roundings (its inputs 1.2). It was the first divergent record
    ("the API is suspect"), as 6 of 8 seeds named a layer_norm backward; a statistics dump cannot be replayed to
    clear it, so such an output is held to the rounding the runs went through, magnified by its cancellation."""
    summary, records, out = _compare(capsys, tmp_path, "gpt_seed7_bf16_statistics", "gpt_seed7_fp32_statistics")
    assert summary["first_divergent"] is None and summary["suspects"] == []
    ln = next(r for r in records if r["Record"] == "Functional.layer_norm.0.backward")
    assert ln["Verdict"] == "agree" and float(ln["Output deviation"]) > 10 * 2**-8
    assert "  no record diverges beyond bf16 rounding (worst: Functional.layer_norm.0.backward at 16" in out


def test_a_statistic_infinite_on_one_side_only_is_an_overflow(capsys, tmp_path):
    assert stats_deviation((1.0, "-inf", "-inf", "inf"), (1.0, "-inf", "-inf", "inf")) == 0.0
    assert stats_deviation((1.0, "-inf", "-inf", "inf"), (1.0, -3.0, -1.0, 9.0)) == float("inf")
    assert stats_deviation(("nan",) * 4, ("nan",) * 4) == 0.0
    target = tmp_path / "t"
    shutil.copytree(REC / "gpt_bf16_statistics", target)
    path = one_dump(target)
    doc = json.loads(path.read_text())
    doc["data"]["Functional.softmax.0.forward"]["output"][0]["Max"] = float("inf")
    path.write_text(json.dumps(doc))
    code, out, err = run(capsys, "compare", "-target", str(target), "-bench", str(REC / "gpt_fp32_statistics"),
                         "-o", str(tmp_path / "o"))  # fmt: skip
    assert code == 0, err
    first = outputs(tmp_path / "o")[2]["first_divergent"]
    assert first["name"] == "Functional.softmax.0.forward" and first["overflow"] == "target"
    assert (
        "first divergent: Functional.softmax.0.forward: its inputs agree and its output "
        "Functional.softmax.0.forward.output.0 holds inf or nan on the target only: an overflow, the API is suspect"
    ) in out


def test_record_folders_with_several_proc_folders_say_which_to_name(capsys, tmp_path):
    for side, source in (("t", "gpt_bf16_statistics"), ("b", "gpt_fp32_statistics")):
        shutil.copytree(REC / source, tmp_path / side)
    (proc,) = (tmp_path / "t" / "step0").iterdir()
    shutil.copytree(proc, proc.with_name("proc1"))
    code, _, err = run(capsys, "compare", "-target", str(tmp_path / "t"), "-bench", str(tmp_path / "b"))
    assert code == 2 and "holds" in err and "name one folder on each side (-target " in err
    assert len(err.strip().splitlines()) == 1
