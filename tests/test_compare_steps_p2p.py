"""precheck compare of two pipeline step folders (issue 51): a divergence one stage hands the next through a send is
followed by the message's channel and order (group, sender, receiver, tag, the n-th transfer on it), as run_ut's step
pairs a receive with its send (precheck.dump.p2p_calls), never by which sent tensor has the receive's statistics.

The pipeline twins (tests/data/sharded/make_pipeline_steps.py): pipeline_{gpipe,1f1b}_bug0_statistics are the clean
steps with stage 0's first linear computing in bf16; stage 1 runs the same code and receives stage 0's activations.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

from precheck.commands.cli import main
from tests.helpers import DATA

SHARDED = DATA / "sharded"
BUG = "Functional.linear.0.forward"  # stage 0's first linear, in bf16 in the twins


def _compare(capsys, out: Path, target: Path, bench: Path) -> tuple[str, dict[int, dict], dict[int, dict[str, dict]]]:
    code = main(["compare", "-target", str(target), "-bench", str(bench), "-o", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    summaries = {r: json.loads(next(out.glob(f"compare_summary_rank{r}_*.json")).read_text()) for r in (0, 1)}
    records = {}
    for r in (0, 1):
        with open(next(out.glob(f"compare_records_rank{r}_*.csv")), encoding="utf-8") as f:
            records[r] = {row["Record"]: row for row in csv.DictReader(f)}
    return stdout, summaries, records


def _own(summary: dict) -> list[str]:
    """The records a rank's summary calls suspect (or amplified): its own."""
    first = summary["first_divergent"]
    return [s["name"] for s in summary["suspects"]] + ([first["name"]] if first and first["verdict"] != "inherited"
                                                       else [])  # fmt: skip


def test_the_gpipe_twin_names_stage_0s_linear_and_stage_1_inherits_it_through_the_receive(capsys, tmp_path):
    out, summaries, records = _compare(capsys, tmp_path, SHARDED / "pipeline_gpipe_bug0_statistics" / "step0",
                                       SHARDED / "pipeline_gpipe_statistics" / "step0")  # fmt: skip
    assert summaries[0]["first_divergent"]["name"] == BUG
    assert summaries[0]["first_divergent"]["verdict"] == "suspect"
    through = "Distributed.irecv.0.forward (Distributed.isend.0.forward of rank 0)"
    first = summaries[1]["first_divergent"]
    assert (first["name"], first["verdict"]) == ("Distributed.irecv.0.forward", "inherited")
    assert first["inherited_from"] == {"rank": 0, "through": through}
    assert _own(summaries[1]) == []
    assert records[1]["Distributed.irecv.0.forward"]["Produced by"] == f"rank 0: {through}"
    assert f"step: the runs first part on rank 0, at {BUG} (suspect)" in out
    assert f"it reached rank 1 from rank 0 through {through}" in out
    step = json.loads(next(tmp_path.glob("compare_step_*.json")).read_text())
    assert step["first"] == {"rank": 0, "record": BUG, "verdict": "suspect"}
    assert [(r["rank"], r["from_rank"], r["through"]) for r in step["reached"]] == [(1, 0, through)]


REWRITTEN = "Distributed.irecv.0.forward (its record rewritten by msprobe with {} of rank 0)"
LAST_BATCH = "Distributed.batch_isend_irecv.6.forward op 0"  # rank 0's last activation sent, in 1F1B's last batch


def test_the_1f1b_twin_names_a_rewritten_receive_by_the_message_its_record_holds(capsys, tmp_path):
    """Rank 1's irecv.0 is the first receive from rank 0 on its channel, so it got rank 0's isend.0; msprobe rewrote
    its record with the last batch's activation (make_pipeline_steps.py), whose statistics are those of rank 0's
    batch_isend_irecv.6 op 0, not isend.0's: its record's divergence is that message's, which differed on rank 0.
    It was said to come through isend.0 (right only because isend.0 differed too)."""
    out, summaries, records = _compare(capsys, tmp_path, SHARDED / "pipeline_1f1b_bug0_statistics" / "step0",
                                       SHARDED / "pipeline_1f1b_statistics" / "step0")  # fmt: skip
    assert summaries[0]["first_divergent"]["name"] == BUG
    assert f"step: the runs first part on rank 0, at {BUG} (suspect)" in out
    row = records[1]["Distributed.irecv.0.forward"]
    assert row["Verdict"] == "inherited"
    assert row["Produced by"] == "rank 0: " + REWRITTEN.format(LAST_BATCH)
    assert "suspect" not in {r["Verdict"] for r in records[1].values()}


def _rewritten_step(tmp_path: Path) -> Path:
    """The clean 1F1B step with rank 0's last activation (relu.4 and the batch op that sends it) scaled, and rank
    1's irecv.0 record (which msprobe rewrote with that message) holding the scaled tensor: the bench, the target
    written under ``tmp_path``."""
    bench = SHARDED / "pipeline_1f1b_statistics" / "step0"

    def edit(rank: int, doc: dict) -> None:
        if rank == 0:
            _scaled(doc, "Functional.relu.4.forward", "output", 0, 1.25)
            _scaled_op(doc, "Distributed.batch_isend_irecv.6.forward", 1.25)
        else:
            _scaled(doc, "Distributed.irecv.0.forward", "output", 0, 1.25)

    _edited(bench, tmp_path / "target", edit)
    return bench


def test_a_rewritten_receive_whose_own_send_agreed_inherits_the_later_messages_divergence(capsys, tmp_path):
    """Rank 0's last activation differs (relu.4, batch_isend_irecv.6 op 0) and rank 1's irecv.0 record, which
    msprobe rewrote with it, differs with it, while the message irecv.0 got (isend.0) agreed: the receive is no
    suspect but inherited from rank 0 through the later message its record holds. It was called suspect (its own
    send agreed), a false blame on a correct transfer."""
    bench = _rewritten_step(tmp_path)
    out, summaries, records = _compare(capsys, tmp_path / "out", tmp_path / "target", bench)
    assert summaries[0]["first_divergent"]["name"] == "Functional.relu.4.forward"
    row = records[1]["Distributed.irecv.0.forward"]
    assert (row["Verdict"], row["Produced by"]) == ("inherited", "rank 0: " + REWRITTEN.format(LAST_BATCH))
    assert "Distributed.irecv.0.forward" not in _own(summaries[1])
    first = summaries[1]["first_divergent"]
    assert first["inherited_from"] == {"rank": 0, "through": REWRITTEN.format(LAST_BATCH)}
    assert first["rewritten_with"] == f"{LAST_BATCH} of rank 0"
    assert "step: the runs first part on rank 0, at Functional.relu.4.forward (suspect)" in out
    assert f"it reached rank 1 from rank 0 through {REWRITTEN.format(LAST_BATCH)}" in out


def test_a_rewritten_receive_holding_an_agreeing_later_message_stays_suspect_and_is_named_rewritten(capsys, tmp_path):
    """The bench's irecv.0 record made to hold its own message (isend.0's statistics) while the target's holds the
    last batch's, which agreed on rank 0: the two records hold different messages, neither of which differed, so the
    receive stays the rank's own (never a silent pass) and its row and the console say its record was rewritten."""
    target = tmp_path / "target"
    shutil.copytree(SHARDED / "pipeline_1f1b_statistics" / "step0", target)
    bench = tmp_path / "bench"
    shutil.copytree(target, bench)
    path = bench / "rank1" / "dump.json"
    doc = json.loads(path.read_text())
    sent = json.loads((bench / "rank0" / "dump.json").read_text())["data"]["Distributed.isend.0.forward"]
    doc["data"]["Distributed.irecv.0.forward"]["output"][0] = dict(sent["input_args"][0])
    path.write_text(json.dumps(doc))
    out, summaries, records = _compare(capsys, tmp_path / "out", target, bench)
    row = records[1]["Distributed.irecv.0.forward"]
    assert (row["Verdict"], row["Produced by"]) == ("suspect", f"rewritten with {LAST_BATCH} of rank 0")
    assert summaries[1]["first_divergent"]["rewritten_with"] == f"{LAST_BATCH} of rank 0"
    assert f"its record holds {LAST_BATCH} of rank 0: msprobe rewrote it with a later message" in out


def _scaled(doc: dict, record: str, field: str, place: int, by: float) -> dict:
    entry = doc["data"][record][field][place]
    for stat in ("Max", "Min", "Mean", "Norm"):
        entry[stat] *= by
    return entry


def _scaled_op(doc: dict, record: str, by: float) -> None:
    """A batch_isend_irecv's op 0 tensor scaled, as given and once the call had run."""
    for field in ("input_args", "output"):
        tensor = doc["data"][record][field][0][0]["tensor"]
        for stat in ("Max", "Min", "Mean", "Norm"):
            tensor[stat] *= by


def _edited(bench: Path, target: Path, edit) -> None:
    shutil.copytree(bench, target)
    for rank in (0, 1):
        path = target / f"rank{rank}" / "dump.json"
        doc = json.loads(path.read_text())
        edit(rank, doc)
        path.write_text(json.dumps(doc))


def test_a_receive_holding_another_messages_tensor_stays_suspect(capsys, tmp_path):
    """Stage 0's first message made wrong (relu.1 and its isend.0 scaled), and stage 1's second receive holding that
    same wrong tensor (as a receive that read the wrong buffer would): irecv.0 inherited it, but irecv.1 got isend.1,
    which agreed on rank 0. By statistics irecv.1 looked like isend.0 and was called inherited through it."""
    bench = SHARDED / "pipeline_gpipe_statistics" / "step0"

    def edit(rank: int, doc: dict) -> None:
        if rank == 0:
            _scaled(doc, "Functional.relu.1.forward", "output", 0, 1.25)
            _scaled(doc, "Distributed.isend.0.forward", "input_args", 0, 1.25)
        else:
            wrong = _scaled(doc, "Distributed.irecv.0.forward", "output", 0, 1.25)
            doc["data"]["Distributed.irecv.1.forward"]["output"][0] = dict(wrong)

    _edited(bench, tmp_path / "target", edit)
    out, summaries, records = _compare(capsys, tmp_path / "out", tmp_path / "target", bench)
    assert summaries[0]["first_divergent"]["name"] == "Functional.relu.1.forward"
    assert records[1]["Distributed.irecv.0.forward"]["Verdict"] == "inherited"
    assert records[1]["Distributed.irecv.1.forward"]["Verdict"] == "suspect"
    assert records[1]["Distributed.irecv.1.forward"]["Produced by"] == ""
    assert "Distributed.irecv.1.forward" in _own(summaries[1])


def test_an_input_a_batch_received_too_early_is_traced_to_the_batch_ops_send(capsys, tmp_path):
    """The hand pipeline's stage 0 sends its activation in batch_isend_irecv.0's op 0; made wrong there, and in stage
    1's first use of it (Tensor.__mul__.0), but not in stage 1's batch record (as msprobe writes a batch's receive
    before it completes): the input no record of rank 1 produced came through the batch's receive op."""
    bench = SHARDED / "pipeline_hand_statistics_msprobe" / "step0"

    def edit(rank: int, doc: dict) -> None:
        if rank == 0:
            _scaled(doc, "Functional.linear.1.forward", "output", 0, 1.25)
            _scaled_op(doc, "Distributed.batch_isend_irecv.0.forward", 1.25)
        else:
            _scaled(doc, "Tensor.__mul__.0.forward", "input_args", 0, 1.25)
            _scaled(doc, "Tensor.__mul__.0.forward", "output", 0, 1.25)

    _edited(bench, tmp_path / "target", edit)
    out, summaries, _ = _compare(capsys, tmp_path / "out", tmp_path / "target", bench)
    through = "Distributed.batch_isend_irecv.0.forward op 0 (Distributed.batch_isend_irecv.0.forward op 0 of rank 0)"
    first = summaries[1]["first_divergent"]
    assert first["name"] == "Tensor.__mul__.0.forward"
    assert first["inherited_from"] == {"rank": 0, "through": through}
    assert "step: the runs first part on rank 0, at Functional.linear.1.forward (suspect)" in out
    assert f"from rank 0 through {through} (its first divergent record Tensor.__mul__.0.forward)" in out


def test_the_step_compare_follows_messages_without_torch(tmp_path):
    """The step compare reads and pairs sends and receives torch-free (precheck.dump.p2p_calls)."""
    target, bench = (SHARDED / f"pipeline_1f1b{bug}_statistics" / "step0" for bug in ("_bug0", ""))
    code = (
        "import sys; from precheck.commands.cli import main; "
        f"code = main(['compare', '-target', {str(target)!r}, '-bench', {str(bench)!r}, '-o', {str(tmp_path)!r}]); "
        "assert code == 0; assert 'torch' not in sys.modules, 'torch was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{LAST_BATCH} of rank 0" in next(tmp_path.glob("compare_records_rank1_*.csv")).read_text()
