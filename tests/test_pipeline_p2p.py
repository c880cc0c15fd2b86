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

from precheck.dump.steps import find_dumps
from precheck.execution.options import CheckOptions
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
    if step.endswith("tensor"):  # a statistics dump's gather holds no identity precheck checks (collective_stats)
        gathers = {rank: row["Forward Test Success"] for (rank, name), row in rows.items() if "gather" in name}
        assert gathers == dict.fromkeys(("rank0", "rank1", "rank2", "rank3"), "pass")


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
