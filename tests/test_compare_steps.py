"""precheck compare of two step folders read as one step (issue 51 item 7): a divergence one rank hands another
through a collective or a send is inherited there, not a suspect of that rank, and the step has one verdict: where
the runs first part and how that reached the other ranks.

The MoE twin (tests/data/sharded/make_moe_steps.py): moe_bug1_statistics is moe_statistics with rank 1's expert
linear computing in bf16; its tokens come back to rank 0 through the combine's all_to_all_single. The pipeline
step (make_pipeline_steps.py) carries a divergence from stage 0 to stage 1 through isend/irecv, made here by
changing one tensor's statistics on both ends of its message.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from precheck.commands.cli import main
from tests.helpers import DATA

SHARDED = DATA / "sharded"
EXPERT = "Functional.linear.1.forward"  # rank 1's expert, in bf16 in the bug twin
COMBINE = "Distributed.all_to_all_single.2.forward"  # the expert's tokens back to the rank that routed them


def _compare(capsys, out: Path, target: Path, bench: Path) -> tuple[str, dict[int, dict], dict[int, list[dict]]]:
    code = main(["compare", "-target", str(target), "-bench", str(bench), "-o", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    summaries = {r: json.loads(next(out.glob(f"compare_summary_rank{r}_*.json")).read_text()) for r in (0, 1)}
    records = {r: list(csv.DictReader(open(next(out.glob(f"compare_records_rank{r}_*.csv")), encoding="utf-8")))
               for r in (0, 1)}  # fmt: skip
    return stdout, summaries, records


def _named(summary: dict) -> list[str]:
    """The records a rank's summary calls suspect (or amplified): its own."""
    first = summary["first_divergent"]
    found = [s["name"] for s in summary["suspects"]]
    return found + ([first["name"]] if first and first["verdict"] != "inherited" else [])


def test_the_moe_twin_names_rank_1s_expert_and_nothing_on_rank_0(capsys, tmp_path):
    out, summaries, records = _compare(capsys, tmp_path, SHARDED / "moe_bug1_statistics" / "step0",
                                       SHARDED / "moe_statistics" / "step0")  # fmt: skip
    assert summaries[1]["first_divergent"]["name"] == EXPERT
    assert summaries[1]["first_divergent"]["verdict"] == "suspect"
    assert EXPERT in _named(summaries[1])
    assert _named(summaries[0]) == []  # it named Distributed.all_to_all_single.2 and .4 suspect
    first = summaries[0]["first_divergent"]
    assert first["name"] == COMBINE
    assert first["verdict"] == "inherited"
    assert first["inherited_from"] == {"rank": 1, "through": COMBINE}
    assert f"first divergent: {COMBINE}: inherited from rank 1 through this call" in out
    rows = {r["Record"]: r for r in records[0]}
    assert rows[COMBINE]["Verdict"] == "inherited"
    assert rows[COMBINE]["Produced by"] == f"rank 1: {COMBINE}"
    assert not [r["Record"] for r in records[0] if r["Verdict"] in ("suspect", "amplified")]


def test_the_step_verdict_says_rank_1_first_and_how_it_reached_rank_0(capsys, tmp_path):
    out, summaries, _ = _compare(capsys, tmp_path, SHARDED / "moe_bug1_statistics" / "step0",
                                 SHARDED / "moe_statistics" / "step0")  # fmt: skip
    assert f"step: the runs first part on rank 1, at {EXPERT} (suspect)" in out
    assert f"it reached rank 0 from rank 1 through {COMBINE}" in out
    step = json.loads(next(tmp_path.glob("compare_step_*.json")).read_text())
    assert step["first"] == {"rank": 1, "record": EXPERT, "verdict": "suspect"}
    assert step["reached"] == [
        {"rank": 0, "record": COMBINE, "verdict": "inherited", "from_rank": 1, "through": COMBINE}
    ]
    assert summaries[0]["step"] == summaries[1]["step"] == step


def test_a_clean_twin_pair_names_nothing(capsys, tmp_path):
    # the same step recorded by msprobe and by precheck.record
    out, summaries, _ = _compare(capsys, tmp_path, SHARDED / "moe_precheck_statistics" / "step0",
                                 SHARDED / "moe_statistics" / "step0")  # fmt: skip
    assert all(s["first_divergent"] is None and not s["suspects"] for s in summaries.values())
    assert "step: the runs part on no rank (2 ranks compared)" in out
    step = json.loads(next(tmp_path.glob("compare_step_*.json")).read_text())
    assert step["first"] is None and step["reached"] == [] and step["agree"] == [0, 1]


def _scaled(entry: dict, by: float) -> None:
    for stat in ("Max", "Min", "Mean", "Norm"):
        entry[stat] *= by


def test_a_send_hands_the_divergence_to_the_receiving_stage(capsys, tmp_path):
    """Stage 0's relu.2 made wrong (its output's statistics scaled, and so the tensor its isend.1 sends and stage
    1's irecv.1 receives): stage 1's receive is inherited from rank 0 through that message, not a suspect."""
    bench = SHARDED / "pipeline_gpipe_statistics" / "step0"
    target = tmp_path / "target" / "step0"
    shutil.copytree(bench, target)
    for rank, changes in ((0, [("Functional.relu.2.forward", "output", 0), ("Distributed.isend.1.forward",
                                                                            "input_args", 0)]),
                          (1, [("Distributed.irecv.1.forward", "output", 0)])):  # fmt: skip
        path = target / f"rank{rank}" / "dump.json"
        doc = json.loads(path.read_text())
        for record, field, place in changes:
            _scaled(doc["data"][record][field][place], 1.25)
        path.write_text(json.dumps(doc))
    out, summaries, _ = _compare(capsys, tmp_path / "out", target, bench)
    assert summaries[0]["first_divergent"]["name"] == "Functional.relu.2.forward"
    first = summaries[1]["first_divergent"]
    assert first["name"] == "Distributed.irecv.1.forward"
    assert first["verdict"] == "inherited"
    through = "Distributed.irecv.1.forward (Distributed.isend.1.forward of rank 0)"
    assert first["inherited_from"] == {"rank": 0, "through": through}
    assert _named(summaries[1]) == []
    assert "step: the runs first part on rank 0, at Functional.relu.2.forward (suspect)" in out
    assert f"it reached rank 1 from rank 0 through {through}" in out
