"""A step folder of ranks run as one run (precheck.ranks): a CSV pair per rank, one summary, and the collectives
graded from every rank's recorded inputs. The step is tests/data/record/ddp_gloo: a 2-rank DDP step on gloo,
recorded in each rank by precheck.record (tests/data/record/ddp_step.py)."""

import contextlib
import io
import re
import shutil
from pathlib import Path

import pytest
from helpers import browser, dom_of

from precheck.commands.cli import main
from precheck.core.reasons import Reason
from precheck.dump.steps import StepError, find_dumps
from precheck.frames import reasons
from precheck.ranks import run_step
from precheck.run_files.csv_files import read_csv_rows, write_csv

STEP = Path(__file__).parent / "data" / "record" / "ddp_gloo" / "step0"
COLLECTIVES = ["Distributed.all_reduce.0", "Distributed.all_gather.0", "Distributed.broadcast.0",
               "Distributed.reduce_scatter.0", "Distributed.gather.0", "Distributed.scatter.0",
               "Distributed.all_to_all.0", "Distributed.all_to_all_single.0"]  # fmt: skip
POINT_TO_POINT = {"rank0": "Distributed.send.0", "rank1": "Distributed.recv.0"}


def _results(result_csv: Path) -> dict[str, dict[str, str]]:
    return {row["API name"]: row for row in read_csv_rows(result_csv)[1]}


def _run(step: Path, out: Path):
    return run_step(find_dumps(step), out, device="cpu", workers=1, backend="inprocess")


def test_a_step_folder_is_one_run_with_a_csv_pair_per_rank_and_its_collectives_graded(tmp_path):
    summary = _run(STEP, tmp_path)
    assert list(summary.ranks) == ["rank0", "rank1"]
    for name, run in summary.ranks.items():
        assert run.result_path.parent == tmp_path / name
        assert run.result_path.name.startswith("accuracy_checking_result_")  # msprobe's name: its readers take it
        rows = _results(run.result_path)
        assert {n: rows[n]["Forward Test Success"] for n in COLLECTIVES} == dict.fromkeys(COLLECTIVES, "pass")
        assert rows[POINT_TO_POINT[name]]["Forward Test Success"] == "pass"  # graded against its peer's record
    assert summary.checked == sum(run.checked for run in summary.ranks.values()) == 30
    assert summary.counts["pass"] == 29 and summary.collectives == 19  # the reduce on rank 0, not its dst, is SKIP
    text = summary.describe()
    assert text.count("precheck run_ut:") == 1 and "rank0: result:" in text and "rank1: result:" in text
    assert set(summary.frame()["rank"]) == {"rank0", "rank1"}


def test_a_wrong_rank_output_is_an_error(tmp_path):
    """The golden is the collective of the inputs: rank 1's recorded sum swapped for its input is an error."""
    step = tmp_path / "step0"
    shutil.copytree(STEP, step)
    data = step / "rank1" / "dump_tensor_data"
    shutil.copy(
        data / "Distributed.all_reduce.0.forward.input.0.pt", data / "Distributed.all_reduce.0.forward.output.0.pt"
    )
    summary = _run(step, tmp_path / "out")
    assert _results(summary.ranks["rank1"].result_path)["Distributed.all_reduce.0"]["Forward Test Success"] == "error"
    assert _results(summary.ranks["rank0"].result_path)["Distributed.all_reduce.0"]["Forward Test Success"] == "pass"


def test_a_reduce_is_graded_on_its_dst_rank_only(tmp_path):
    """reduce(dst=1, op=MAX): rank 1's tensor is the max of both ranks' inputs; gloo leaves a partial result in
    rank 0's, which no rule defines: SKIP there, saying why."""
    summary = _run(STEP, tmp_path)
    rank0, rank1 = (_results(summary.ranks[r].result_path)["Distributed.reduce.0"] for r in ("rank0", "rank1"))
    assert rank1["Forward Test Success"] == "pass"
    assert rank0["Forward Test Success"] == "SKIP" and "not the reduce's dst (rank 1)" in rank0["Message"]
    found = reasons.read(summary.ranks["rank0"].details_path)
    assert found["Distributed.reduce.0.forward.output.0"].reason == Reason.SKIP_RECORDED_OUTPUT


@pytest.mark.parametrize(
    ("call", "rank", "wrong", "target"),
    [
        ("Distributed.reduce.0", "rank1", "input.0", "output.0"),  # the dst's own input, not the max of both
        ("Distributed.gather.0", "rank0", "output.1.0", "output.1.1"),  # rank 1's slot holds rank 0's tensor
        ("Distributed.scatter.0", "rank1", "output.1.0", "output.0"),  # rank 0's chunk, not its own
        ("Distributed.all_to_all.0", "rank1", "output.0.1", "output.0.0"),  # its own piece where rank 0's belongs
        ("Distributed.all_to_all_single.0", "rank0", "input.1", "output.0"),  # its input, not the exchanged chunks
        ("Distributed.recv.0", "rank1", "input.0", "output.0"),  # the empty tensor it passed, not rank 0's send
    ],
)
def test_a_wrong_output_of_each_collective_is_an_error(tmp_path, call, rank, wrong, target):
    step = tmp_path / "step0"
    shutil.copytree(STEP, step)
    data = step / rank / "dump_tensor_data"
    shutil.copy(data / f"{call}.forward.{wrong}.pt", data / f"{call}.forward.{target}.pt")
    summary = _run(step, tmp_path / "out")
    assert _results(summary.ranks[rank].result_path)[call]["Forward Test Success"] == "error"


def _statistics_step(tmp_path: Path, edit=None) -> Path:
    """The step as a statistics dump (its records, no tensor files), ``edit`` (rank, data) applied to each rank's."""
    import json

    for rank in ("rank0", "rank1"):
        doc = json.loads(re.sub(r',\s*"data_name": "[^"]*"', "", (STEP / rank / "dump.json").read_text()))
        doc["task"] = "statistics"
        if edit is not None:
            edit(rank, doc["data"])
        (tmp_path / "step0" / rank).mkdir(parents=True)
        (tmp_path / "step0" / rank / "dump.json").write_text(json.dumps(doc))
    return tmp_path / "step0"


def _gather_scatter(tmp_path: Path, edit=None) -> dict[tuple[str, str], tuple[str, str]]:
    summary = _run(_statistics_step(tmp_path, edit), tmp_path / "out")
    calls = ("Distributed.gather.0", "Distributed.scatter.0")
    return {(rank, call): (row["Forward Test Success"], row["Message"])
            for rank, run in summary.ranks.items() for call, row in _results(run.result_path).items()
            if call in calls}  # fmt: skip


def test_a_statistics_dumps_gather_and_scatter_are_checked_on_their_statistics(tmp_path):
    """gather(dst=0): on rank 0 the list's i-th tensor has rank i's input's statistics, on rank 1 the sent tensor
    is unchanged; scatter(src=1): each rank's output has the statistics of rank 1's scatter_list tensor for it.
    Both were SKIP ("gather's statistics hold no identity precheck checks")."""
    rows = _gather_scatter(tmp_path)
    assert {key: status for key, (status, _) in rows.items()} == dict.fromkeys(rows, "pass") and len(rows) == 4
    assert "Mean = rank 1's input's (1.75 vs 1.75)" in rows[("rank0", "Distributed.gather.0")][1]
    assert "Mean = rank 1's own input's" in rows[("rank1", "Distributed.gather.0")][1]
    assert "Max = src rank 1's scatter_list[0]'s (2.5 vs 2.5)" in rows[("rank0", "Distributed.scatter.0")][1]


def test_a_statistics_dumps_gather_or_scatter_holding_the_wrong_tensor_is_an_error(tmp_path):
    """Rank 0's gather list holds its own tensor in rank 1's slot, and its scatter output is rank 1's chunk: the
    statistics alone prove both wrong, on rank 0 only."""

    def swap(rank, data):
        if rank == "rank0":
            gathered = data["Distributed.gather.0.forward"]["output"][1]
            gathered[1] = dict(gathered[0])
            scattered = data["Distributed.scatter.0.forward"]["output"][0]
            scattered.update(Max=3.5, Min=3.5, Mean=3.5, Norm=4.949747562408447)

    rows = _gather_scatter(tmp_path, swap)
    assert {key: status for key, (status, _) in rows.items()} == {
        ("rank0", "Distributed.gather.0"): "error", ("rank1", "Distributed.gather.0"): "pass",
        ("rank0", "Distributed.scatter.0"): "error", ("rank1", "Distributed.scatter.0"): "pass"}  # fmt: skip
    assert "broken: Max = rank 1's input's (0.75 vs 1.75)" in rows[("rank0", "Distributed.gather.0")][1]


def test_a_recv_is_its_peers_send_bit_for_bit(tmp_path):
    """The recv's recorded tensor one ULP off the send's: a copy is exact, so it is an error, not a rounding; so is
    a send whose tensor changed in the call."""
    import torch

    step = tmp_path / "step0"
    shutil.copytree(STEP, step)
    for rank, call in POINT_TO_POINT.items():
        done = step / rank / "dump_tensor_data" / f"{call}.forward.output.0.pt"
        value = torch.load(done)
        torch.save(torch.nextafter(value, torch.full_like(value, 1.0)), done)
    summary = _run(step, tmp_path / "out")
    for rank, call in POINT_TO_POINT.items():
        assert _results(summary.ranks[rank].result_path)[call]["Forward Test Success"] == "error"


def test_a_recv_without_its_senders_dump_or_send_is_skip_with_the_reason(tmp_path):
    step = tmp_path / "step0"
    shutil.copytree(STEP / "rank1", step / "rank1")
    shutil.copytree(STEP / "rank1", step / "rank2")  # rank 0, the sender, missing
    summary = _run(step, tmp_path / "out")
    for rank in ("rank1", "rank2"):
        run = summary.ranks[rank]
        row = _results(run.result_path)["Distributed.recv.0"]
        assert row["Forward Test Success"] == "SKIP" and "rank 0 has no dump in" in row["Message"]
        found = reasons.read(run.details_path)
        assert found["Distributed.recv.0.forward.output.0"].reason == Reason.SKIP_MISSING_RANK


def test_a_missing_rank_gives_its_collectives_skip_with_the_reason(tmp_path):
    step = tmp_path / "step0"
    shutil.copytree(STEP / "rank0", step / "rank0")
    shutil.copytree(STEP / "rank1", step / "rank2")  # rank 1 missing: the world had 3 ranks at least
    summary = _run(step, tmp_path / "out")
    run = summary.ranks["rank0"]
    rows = _results(run.result_path)
    all_reduce = rows["Distributed.all_reduce.0"]
    assert all_reduce["Forward Test Success"] == "SKIP"
    assert "rank 1 has no dump in" in all_reduce["Message"] and "every rank's inputs" in all_reduce["Message"]
    found = reasons.read(run.details_path)
    assert found["Distributed.all_reduce.0.forward.output.0"].reason == Reason.SKIP_MISSING_RANK
    assert rows["Functional.linear.0"]["Forward Test Success"] == "pass"  # the rest of the rank is still checked
    recv = _results(summary.ranks["rank2"].result_path)["Distributed.recv.0"]  # rank 1's recv, from rank 0
    assert recv["Forward Test Success"] == "SKIP" and "rank 0 recorded 0 sends to rank 2" in recv["Message"]


def test_the_command_line_runs_a_step_folder_and_a_dumps_top_folder(tmp_path, capsys):
    assert (
        main(
            [
                "run_ut",
                "-api_info",
                str(STEP.parent),
                "-o",
                str(tmp_path),
                "-d",
                "cpu",
                "-q",
                "--workers",
                "1",
                "--backend",
                "inprocess",
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert "running its one step, step0 (2 dumps)" in err
    assert out.count("precheck run_ut:") == 1 and "forward:  pass 29, warning 0, error 0, SKIP 1" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0", "rank1"]


def test_a_top_folder_with_one_dump_runs_it_and_with_several_steps_lists_them(tmp_path):
    one = tmp_path / "one"
    shutil.copytree(STEP / "rank0", one / "step0" / "proc123")
    found = find_dumps(one)
    assert found.path == one / "step0" / "proc123" / "dump.json" and found.ranks is None
    assert "running its one dump, step0/proc123/dump.json" in found.note
    several = tmp_path / "several"
    for step in ("step0", "step1"):
        shutil.copytree(STEP, several / step)
    with pytest.raises(StepError, match=r"holds 4 dumps in 2 steps \(step0/rank0/dump.json, .*name one step folder"):
        find_dumps(several)


def test_the_recorder_writes_a_collectives_arguments_once_run_as_its_output(tmp_path):
    """msprobe's record of a collective: its output is its arguments after the call (it works in place), and
    its reduce op is named; without them nothing of it could be graded."""
    import torch
    import torch.distributed as dist

    import precheck
    from precheck.dump.index import RecordIndex

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        x = torch.tensor([1.0, -2.0])
        with precheck.record(tmp_path, task="tensor"):
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
    finally:
        dist.destroy_process_group()
    index = RecordIndex.open(tmp_path / "step0" / "rank0" / "dump.json", ValueError)
    record = index.read(index.keys.index("Distributed.all_reduce.0.forward"))
    assert record["output"][0]["data_name"] == "Distributed.all_reduce.0.forward.output.0.pt"
    assert record["output"][1] == record["input_kwargs"]["op"] == {"type": "torch.distributed.ReduceOp",
                                                               "value": "RedOpType.MAX"}  # fmt: skip


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """The command line's run of the step with --report: its output folder and what it printed."""
    out = tmp_path_factory.mktemp("ranks")
    argv = ["run_ut", "-api_info", str(STEP), "-o", str(out), "-d", "cpu", "-q", "--workers", "1",
            "--backend", "inprocess", "--report"]  # fmt: skip
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(argv) == 0
    return out, printed.getvalue()


def test_one_report_shows_every_ranks_apis_the_collectives_the_counts_and_the_csvs(reported):
    out, printed = reported
    (page,) = out.glob("report_*.html")
    assert re.findall(r"^  report.*$", printed, re.M) == [f"  report:  {page}"]  # one line for all ranks
    text = page.read_text(encoding="utf-8")
    apis = re.findall(r'"call": "([^"]+)"[^{}]*"rank": "(rank\d)"', text)
    assert len(apis) == 30 and {r for _, r in apis} == {"rank0", "rank1"}
    assert all((c, r) in apis for c in COLLECTIVES for r in ("rank0", "rank1"))
    collectives = text.split('id="collective-table"')[1].split("</table>")[0]
    for call in COLLECTIVES:
        assert f'<tr><th>{call}</th><td class="pass">pass</td><td class="pass">pass</td>' in collectives
    counts = text.split('id="rank-counts"')[1].split("</table>")[0]
    assert "<tr><th>rank0</th><td>15</td><td>14</td>" in counts
    assert "<tr><th>all ranks</th><td>30</td><td>29</td>" in counts
    for rank in ("rank0", "rank1"):
        for csv in (out / rank).glob("accuracy_checking_*.csv"):
            assert f'href="{rank}/{csv.name}"' in counts
    assert '<th data-key="rank"' in text and '<select id="f-rank"' in text
    assert not list(out.glob("rank*/report_*.html"))  # no page per rank: the one page is over all of them


def test_the_report_command_renders_a_step_run_and_escapes_what_the_dumps_said(reported, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(reported[0], out)
    for page in out.glob("report_*.html"):
        page.unlink()
    hostile = '<img src=x onerror="document.title=1">'
    (result,) = (out / "rank1").glob("accuracy_checking_result_*.csv")
    header, rows = read_csv_rows(result)
    cells = [list(r.values()) for r in rows]
    write_csv(result, header, [[*r[:3], hostile] if r[0] == "Distributed.all_reduce.0" else r for r in cells])
    assert main(["report", str(out)]) == 0
    (page,) = out.glob("report_*.html")
    assert capsys.readouterr().out == f"precheck report: {page}\n"
    text = page.read_text(encoding="utf-8")
    assert "<img" not in text and "rank1: &lt;img src=x onerror=&quot;document.title=1&quot;&gt;" in text
    assert 'id="collective-table"' in text and 'id="rank-counts"' in text


@browser
def test_the_report_filters_by_rank(reported, tmp_path):
    (page,) = reported[0].glob("report_*.html")
    dom = dom_of(tmp_path, page, "?rank=rank1")
    assert "15 of 30 APIs" in dom
    assert len(re.findall(r'<tr id="api-\d+"><td>[^<]*</td><td>rank1</td>', dom)) == 15


def test_each_ranks_dump_is_read_once(tmp_path, monkeypatch):
    """A rank's dump.json is indexed once for its collectives and its run, not once for each (3 times before)."""
    from precheck.dump.index import RecordIndex

    opened = []
    real = RecordIndex.open.__func__

    def counted(cls, path, error):
        opened.append(Path(path))
        return real(cls, path, error)

    monkeypatch.setattr(RecordIndex, "open", classmethod(counted))
    _run(STEP, tmp_path)
    assert sorted(opened) == [STEP / "rank0" / "dump.json", STEP / "rank1" / "dump.json"]


@pytest.mark.parametrize(
    ("call", "field", "value"),
    [
        ("Distributed.all_reduce.0", "input_args", {"0": "not a list"}),  # a dict where a list is recorded
        ("Distributed.all_gather.0", "output", 7),  # a number where the gathered list is recorded
        ("Distributed.send.0", "input_kwargs", {"tag": [1]}),  # a tag that is no number
    ],
)
def test_a_malformed_collective_record_is_a_skip_row_not_the_steps_end(tmp_path, call, field, value):
    """A record of another shape raised out of the step run (KeyError, AttributeError, unhashable tag): no rank
    got a CSV. Its call is SKIP on its rank with the reason, and every other call is graded."""
    import json

    step = tmp_path / "step0"
    shutil.copytree(STEP, step)
    path = step / "rank0" / "dump.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["data"][f"{call}.forward"][field] = value
    path.write_text(json.dumps(doc), encoding="utf-8")
    summary = _run(step, tmp_path / "out")
    rows = _results(summary.ranks["rank0"].result_path)
    assert rows[call]["Forward Test Success"] == "SKIP"
    assert "Distributed.all_reduce.0" in rows and "Distributed.broadcast.0" in rows
    graded = [c for c in COLLECTIVES if c != call]
    assert all(rows[c]["Forward Test Success"] in ("pass", "SKIP") for c in graded)
