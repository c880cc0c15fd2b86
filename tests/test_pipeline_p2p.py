"""Pipeline-parallel transfers graded across the ranks of a step (issue 51 item 1, issue 50 items 7 and 10):
torch.distributed.pipelining's GPipe and 1F1B steps, and every point-to-point spelling by hand (``batch_isend_irecv``
of P2POps, ``isend``/``irecv``/``send``/``recv`` with ``group_dst``/``group_src`` in subgroups), the rooted
collectives torch 2.6+ spells by group rank or by default, and a transfer sized before it is loaded. The steps are
tests/data/sharded/pipeline_* and p2p_calls_*, recorded by tests/data/sharded/make_pipeline_steps.py (msprobe 26.2,
or precheck.record where said)."""

import json
import shutil
from pathlib import Path

import pytest

from precheck.core.reasons import Reason
from precheck.dump.steps import find_dumps
from precheck.execution.options import CheckOptions
from precheck.frames import reasons
from precheck.ranks import run_step
from precheck.run_files.csv_files import read_csv_rows

DATA = Path(__file__).parent / "data" / "sharded"
PIPELINES = ("pipeline_gpipe_statistics", "pipeline_1f1b_statistics")
BY_HAND = ("p2p_calls_statistics", "p2p_calls_tensor")


def _run(step: Path, out: Path, **options):
    return run_step(find_dumps(step), out, device="cpu", workers=1, backend="inprocess",
                    options=CheckOptions(**options))  # fmt: skip


def _rows(summary, calls: str = "Distributed.") -> dict[tuple[str, str], dict[str, str]]:
    """(rank folder, API name) -> its result row, for every row whose name starts with ``calls``."""
    return {
        (rank, row["API name"]): row
        for rank, run in summary.ranks.items()
        for row in read_csv_rows(run.result_path)[1]
        if row["API name"].startswith(calls)
    }


def _details(summary, rank: str) -> dict[str, dict[str, str]]:
    return {row["API Name"]: row for row in read_csv_rows(summary.ranks[rank].details_path)[1]}


def _copy(tmp_path: Path, step: str) -> Path:
    shutil.copytree(DATA / step / "step0", tmp_path / "step0")
    return tmp_path / "step0"


def _edit(dump: Path, edit) -> None:
    doc = json.loads(dump.read_text())
    edit(doc["data"])
    dump.write_text(json.dumps(doc))


@pytest.mark.parametrize("step", BY_HAND)
def test_a_broadcast_by_group_src_and_a_gather_to_its_default_dst_are_graded(tmp_path, step):
    """broadcast(group_src=1) in the groups {0,2} and {1,3} came from global rank 2 or 3, and a gather that names
    no dst gathers to rank 0: both were SKIP on every rank, "src rank None is not in the group"."""
    rows = _rows(_run(DATA / step / "step0", tmp_path))
    broadcasts = {rank: row["Forward Test Success"] for (rank, name), row in rows.items() if "broadcast" in name}
    assert broadcasts == dict.fromkeys(("rank0", "rank1", "rank2", "rank3"), "pass")
    gathers = {rank: row["Forward Test Success"] for (rank, name), row in rows.items() if "gather" in name}
    assert gathers == dict.fromkeys(("rank0", "rank1", "rank2", "rank3"), "pass")  # a statistics dump's too


def test_a_broadcast_from_the_wrong_group_rank_is_an_error_there(tmp_path):
    """The broadcast's output on rank 0 is its own input, not group rank 1's (global rank 2): an error there only."""
    step = _copy(tmp_path, "p2p_calls_tensor")
    data = step / "rank0" / "dump_tensor_data"
    shutil.copy(
        data / "Distributed.broadcast.0.forward.input.0.pt", data / "Distributed.broadcast.0.forward.output.0.pt"
    )
    rows = _rows(_run(step, tmp_path / "out"))
    verdicts = {rank: row["Forward Test Success"] for (rank, name), row in rows.items() if "broadcast" in name}
    assert verdicts == {"rank0": "error", "rank1": "pass", "rank2": "pass", "rank3": "pass"}


def _p2p(summary) -> dict[tuple[str, str], dict[str, str]]:
    """(rank folder, details row name) -> its details row, for every send's and receive's."""
    return {
        (rank, row["API Name"]): row
        for rank, run in summary.ranks.items()
        for row in read_csv_rows(run.details_path)[1]
        if row["API Name"].startswith("Distributed.") and ("send" in row["API Name"] or "recv" in row["API Name"])
    }


@pytest.mark.parametrize("step", PIPELINES + BY_HAND)
def test_every_transfer_of_a_clean_step_is_graded_and_none_is_an_error(tmp_path, step):
    """Every send, recv, isend, irecv and batch_isend_irecv op: graded, or SKIP only where msprobe recorded the
    received tensor at the wrong time (a batch's receive before it completed, an irecv rewritten by a later
    batch), and the row says so. They were all SKIP ("argument has no 'type'", "names no dst rank (recorded
    None)", "a collective needs its values")."""
    summary = _run(DATA / step / "step0", tmp_path)
    rows = _p2p(summary)
    found = {rank: reasons.read(run.details_path) for rank, run in summary.ranks.items()}
    assert rows and not [key for key, row in rows.items() if row["Status"] not in ("pass", "SKIP")]
    for (rank, name), row in rows.items():
        if row["Status"] == "SKIP":
            assert found[rank][name].reason == Reason.SKIP_RECORDED_OUTPUT and "msprobe" in row["Message"], name
        if ".isend." in name or ".send." in name or "batch" not in name and ".recv." in name:
            assert row["Status"] == "pass", (rank, name, row["Message"])  # what msprobe recorded right: graded
    graded = sum(row["Status"] == "pass" for row in rows.values())
    assert graded >= 2 * len(rows) // 3
    assert summary.collectives >= graded // 2  # the console counts them as graded across ranks


def test_a_receive_by_group_src_is_matched_to_the_send_by_group_dst_in_its_subgroup(tmp_path):
    """In the group [1, 3], group_dst=1 is global rank 3: rank 1's send(group_dst=1, tag=7) is rank 3's
    recv(group_src=0, tag=7), and rank 1's isend row names the receive that got it."""
    summary = _run(DATA / "p2p_calls_tensor" / "step0", tmp_path)
    rows = _p2p(summary)
    assert rows[("rank3", "Distributed.recv.1.forward.output.0")]["Status"] == "pass"
    assert rows[("rank3", "Distributed.recv.0.forward.output.0")]["Status"] == "pass"  # recv(src=1), default group
    isend = rows[("rank1", "Distributed.isend.0.forward.output.0")]
    assert isend["Status"] == "pass" and "sent to rank 3: Distributed.irecv.0" in isend["Message"]
    batch = rows[("rank1", "Distributed.batch_isend_irecv.0.forward.output.0")]  # its P2POp isend, group_peer=1
    assert batch["Status"] == "pass"


def test_a_wrong_received_value_is_an_error_on_the_receiving_rank_only(tmp_path):
    """Rank 2's recv(group_src=0, tag=7) holds another tensor than rank 0 sent: its row is an error, and no row of
    rank 0 (the sender) or of another rank is."""
    step = _copy(tmp_path, "p2p_calls_tensor")
    data = step / "rank2" / "dump_tensor_data"
    shutil.copy(data / "Distributed.recv.0.forward.output.0.pt", data / "Distributed.recv.1.forward.output.0.pt")
    rows = _p2p(_run(step, tmp_path / "out"))
    errors = [key for key, row in rows.items() if row["Status"] == "error"]
    assert errors == [("rank2", "Distributed.recv.1.forward.output.0")]


def test_a_wrong_received_statistic_in_a_pipeline_is_an_error_on_that_rank_only(tmp_path):
    """GPipe: rank 1's second activation received (irecv(group_src=0)) shows another Max than rank 0 sent."""
    step = _copy(tmp_path, "pipeline_gpipe_statistics")

    def corrupt(data):
        data["Distributed.irecv.1.forward"]["output"][0]["Max"] = 7.5

    _edit(step / "rank1" / "dump.json", corrupt)
    rows = _p2p(_run(step, tmp_path / "out"))
    errors = {key: row["Message"] for key, row in rows.items() if row["Status"] == "error"}
    assert list(errors) == [("rank1", "Distributed.irecv.1.forward.output.0")]
    assert "Max 7.5, there 0.68" in errors[("rank1", "Distributed.irecv.1.forward.output.0")]


def test_a_transfer_above_max_memory_is_skip_before_it_is_loaded(tmp_path, monkeypatch):
    """A send/recv pair is sized as a collective is: above --max-memory its rows are SKIP skip_memory and no tensor
    of it is loaded (a recv was loaded and graded pass whatever --max-memory said)."""
    import precheck.ranks.p2p as p2p

    def refused(*args, **kwargs):
        raise AssertionError("a transfer above --max-memory was loaded")

    monkeypatch.setattr(p2p, "load", refused)
    summary = _run(DATA / "p2p_calls_tensor" / "step0", tmp_path, max_memory=64)
    rows = _p2p(summary)
    recv = rows[("rank2", "Distributed.recv.0.forward.output.0")]
    assert recv["Status"] == "SKIP" and "above --max-memory" in recv["Message"]
    assert reasons.read(summary.ranks["rank2"].details_path)[recv["API Name"]].reason == Reason.SKIP_MEMORY


def _ops(data):
    return data["Distributed.batch_isend_irecv.4.forward"]["input_args"][0]


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: _ops(d)[0].__setitem__("peer", "1"),
        lambda d: _ops(d)[1].__setitem__("op", "isendx"),
        lambda d: _ops(d).__setitem__(0, "x"),
        lambda d: _ops(d).clear(),
        lambda d: d["Distributed.batch_isend_irecv.4.forward"].__setitem__("input_args", [{"a": 1}]),
    ],
    ids=["peer", "op", "not_a_p2pop", "empty", "not_a_list"],
)
def test_a_malformed_batch_is_a_skip_row_and_no_later_transfer_is_misread(tmp_path, edit):
    """A batch whose P2POps cannot be read is SKIP skip_bad_record naming it; each later transfer of that rank, and
    each its peer matched past it, is SKIP, never graded against the wrong message (an error before)."""
    step = _copy(tmp_path, "pipeline_1f1b_statistics")
    _edit(step / "rank0" / "dump.json", edit)
    summary = _run(step, tmp_path / "out")
    rows = _rows(summary)
    batch = rows[("rank0", "Distributed.batch_isend_irecv.4")]
    assert batch["Forward Test Success"] == "SKIP" and "Distributed.batch_isend_irecv.4" in batch["Message"]
    assert (
        reasons.read(summary.ranks["rank0"].details_path)["Distributed.batch_isend_irecv.4.forward.output.0"].reason
        == Reason.SKIP_BAD_RECORD
    )
    assert not [key for key, row in _p2p(summary).items() if row["Status"] == "error"]


@pytest.mark.parametrize("step", PIPELINES + ("pipeline_hand_statistics_msprobe",))
def test_a_rank_run_alone_says_its_transfers_need_their_peers_not_that_msprobe_recorded_them_badly(tmp_path, step):
    """One rank's dump.json alone cannot grade a send or receive. Its batch_isend_irecv (P2POps) and its
    isend/irecv(group=) were SKIP "bad record: input_args[0][0]: argument has no 'type'" / "unsupported argument
    type 'torch.ProcessGroup'" (issue 51's per-rank benchmark): msprobe's records are right, the rank is alone."""
    from precheck.run_ut import run_ut

    summary = run_ut(DATA / step / "step0" / "rank0" / "dump.json", tmp_path, device="cpu", workers=1)
    rows = {row["API name"]: row for row in read_csv_rows(summary.result_path)[1]}
    why = reasons.read(summary.details_path)
    transfers = [name for name in rows if name.startswith("Distributed.")]
    assert any("batch_isend_irecv" in name for name in transfers)
    for name in transfers:
        assert rows[name]["Forward Test Success"] == "SKIP", name
        assert "needs a process group and its peer ranks" in rows[name]["Message"], (name, rows[name]["Message"])
        assert why[f"{name}.forward.output.0"].reason == Reason.SKIP_UNSUPPORTED, name
