"""MoE expert parallelism's dispatch and combine graded across the ranks (issue 51 item 3): ``all_to_all_single``
with uneven split sizes (one chunk empty in moe_zero) and ``all_to_all`` with lists, exactly in a tensor dump and by
the identities their statistics hold in a statistics dump. Every one of them was SKIP ("precheck grades its even
split only", "all_to_all_single's statistics hold no identity precheck checks"). The steps are
tests/data/sharded/moe_*, recorded by tests/data/sharded/make_moe_steps.py (msprobe 26.2, precheck.record where
said)."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import collective_rows, run_step_inprocess

from precheck.core.reasons import Reason
from precheck.frames import reasons

DATA = Path(__file__).parent / "data" / "sharded"
A2A = [f"Distributed.all_to_all_single.{i}" for i in range(5)] + ["Distributed.all_to_all.0"]
TENSOR_A2A = ["Distributed.all_to_all_single.1", "Distributed.all_to_all_single.2", "Distributed.all_to_all.0"]


_run = run_step_inprocess
_collectives = collective_rows


def _verdicts(rows, name: str) -> dict[str, str]:
    return {rank: rows[(rank, name)]["Forward Test Success"] for rank in ("rank0", "rank1")}


def _copy(tmp_path: Path, source: str) -> Path:
    step = tmp_path / "step0"
    shutil.copytree(DATA / source / "step0", step)
    return step


def _edit(step: Path, rank: str, call: str, edit) -> Path:
    dump = step / rank / "dump.json"
    doc = json.loads(dump.read_text())
    edit(doc["data"][f"{call}.forward"])
    dump.write_text(json.dumps(doc))
    return step


@pytest.mark.parametrize("source", ["moe_statistics", "moe_zero_statistics", "moe_precheck_statistics"])
def test_every_all_to_all_of_a_moe_statistics_step_is_graded_and_passes(tmp_path, source):
    """The dispatch and combine (forward and the backward's), the counts' even exchange and the list form, on
    both ranks: 12 rows, every one checked on its statistics (all SKIP before), none an error."""
    summary = _run(DATA / source / "step0", tmp_path)
    rows = _collectives(summary)
    assert set(rows) == {(rank, name) for rank in ("rank0", "rank1") for name in A2A}
    assert {key: row["Forward Test Success"] for key, row in rows.items()} == dict.fromkeys(rows, "pass")
    assert summary.collectives == 12
    dispatch = rows[("rank1", "Distributed.all_to_all_single.1")]["Message"]
    assert "Max <= the largest Max of its senders" in dispatch and "the group's outputs' mean" in dispatch


def test_precheck_records_the_moe_step_as_msprobe_does():
    """precheck.record's dump of the MoE step holds msprobe's records, by name and order, split sizes included."""
    for rank in ("rank0", "rank1"):
        ours, theirs = (json.loads((DATA / step / "step0" / rank / "dump.json").read_text())["data"]
                        for step in ("moe_precheck_statistics", "moe_statistics"))  # fmt: skip
        assert list(ours) == list(theirs)
        for name in A2A:
            assert ours[f"{name}.forward"] == theirs[f"{name}.forward"]


def test_the_uneven_dispatch_and_combine_of_a_tensor_dump_are_graded_exactly(tmp_path):
    """moe_zero's tensor dump (rank 1 sends rank 0 no row): the dispatch, the combine and the list form pass against
    the rows each sender cut for the rank."""
    rows = _collectives(_run(DATA / "moe_zero_a2a_tensor" / "step0", tmp_path))
    assert set(rows) == {(rank, name) for rank in ("rank0", "rank1") for name in TENSOR_A2A}
    assert {key: row["Forward Test Success"] for key, row in rows.items()} == dict.fromkeys(rows, "pass")


@pytest.mark.parametrize(("call", "file"), [("Distributed.all_to_all_single.1", "output.0"),
                                            ("Distributed.all_to_all_single.2", "output.0"),
                                            ("Distributed.all_to_all.0", "output.0.0")])  # fmt: skip
def test_one_wrong_value_in_rank_1s_output_is_an_error_there_only(tmp_path, call, file):
    step = _copy(tmp_path, "moe_zero_a2a_tensor")
    path = step / "rank1" / "dump_tensor_data" / f"{call}.forward.{file}.pt"
    wrong = torch.load(path)
    wrong.view(-1)[3] += 0.5
    torch.save(wrong, path)
    rows = _collectives(_run(step, tmp_path / "out"))
    assert _verdicts(rows, call) == {"rank0": "pass", "rank1": "error"}


def test_split_sizes_the_ranks_recorded_apart_are_a_bad_record_naming_both(tmp_path):
    """Rank 1's dispatch says it took 4 rows from rank 0 and 5 from itself, rank 0's that it sent rank 1 three:
    no such call runs (torch refuses it), so rank 1's row is SKIP naming both ranks; rank 0's own row still passes."""

    def moved(record):
        for place in (record["input_args"], record["output"]):
            place[2] = [{"type": "int", "value": 4}, {"type": "int", "value": 5}]

    step = _edit(_copy(tmp_path, "moe_zero_a2a_tensor"), "rank1", "Distributed.all_to_all_single.1", moved)
    summary = _run(step, tmp_path / "out")
    rows = _collectives(summary)
    row = rows[("rank1", "Distributed.all_to_all_single.1")]
    assert row["Forward Test Success"] == "SKIP"
    assert "rank 1's output_split_sizes take 4 rows from rank 0, whose input_split_sizes send it 3" in row["Message"]
    assert rows[("rank0", "Distributed.all_to_all_single.1")]["Forward Test Success"] == "pass"
    found = reasons.read(summary.ranks["rank1"].details_path)
    assert found["Distributed.all_to_all_single.1.forward.output.0"].reason == Reason.SKIP_BAD_RECORD


def _shift(stat: str, by: float, at: tuple = (0,)):
    def edit(record):
        target = record["output"]
        for i in at:
            target = target[i]
        target[stat] += by

    return edit


@pytest.mark.parametrize(
    ("call", "edit", "broken"),
    [
        ("Distributed.all_to_all_single.1", _shift("Max", 1.0), "broken: Max <= the largest Max of its senders"),
        ("Distributed.all_to_all_single.1", _shift("Mean", 1.0), "only rank 1's output can be off by the difference"),
        ("Distributed.all_to_all_single.2", _shift("Norm", 0.5), "broken: RMS <= the most its senders' rows allow"),
        ("Distributed.all_to_all_single.3", _shift("Min", -1.0), "broken: Min >= the smallest Min of its senders"),
        ("Distributed.all_to_all.0", _shift("Mean", 0.01, (0, 1)), "broken: Mean = rank 1's input 1's"),
    ],
)
def test_a_statistic_changed_on_rank_1_is_an_error_on_rank_1s_row_only(tmp_path, call, edit, broken):
    """One statistic of rank 1's output moved: rank 1's row is an error saying which identity broke; rank 0's,
    whose output is as recorded, passes (a group identity broken goes to the rank whose output alone could break
    it)."""
    step = _edit(_copy(tmp_path, "moe_statistics"), "rank1", call, edit)
    rows = _collectives(_run(step, tmp_path / "out"))
    assert _verdicts(rows, call) == {"rank0": "pass", "rank1": "error"}
    assert broken in rows[("rank1", call)]["Message"]


def test_an_all_nan_dispatch_output_is_an_error(tmp_path):
    def nan(record):
        record["output"][0].update(Max="nan", Min="nan", Mean="nan", Norm="nan")

    step = _edit(_copy(tmp_path, "moe_zero_statistics"), "rank1", "Distributed.all_to_all_single.1", nan)
    rows = _collectives(_run(step, tmp_path / "out"))
    assert _verdicts(rows, "Distributed.all_to_all_single.1") == {"rank0": "pass", "rank1": "error"}
    message = rows[("rank1", "Distributed.all_to_all_single.1")]["Message"]
    assert "rank 1: Distributed.all_to_all_single.1 output 0: Mean is nan" in message


def test_a_small_change_the_statistics_cannot_place_is_an_error_on_each_rank_it_could_be(tmp_path):
    """Rank 1's dispatch output Mean moved by 0.05: the group's sum is broken, but either rank's output could be off
    by that much within what its senders' rows allow, so both rows are errors and say the statistics cannot tell
    which (never a pass on the rank that holds the bug; a tensor dump names it alone)."""
    call = "Distributed.all_to_all_single.1"
    step = _edit(_copy(tmp_path, "moe_statistics"), "rank1", call, _shift("Mean", 0.05))
    rows = _collectives(_run(step, tmp_path / "out"))
    assert _verdicts(rows, call) == {"rank0": "error", "rank1": "error"}
    assert "the output of any of ranks 0, 1 could be off by the difference" in rows[("rank0", call)]["Message"]
