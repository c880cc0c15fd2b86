"""precheck regress on what run_ut writes for a step folder (issue 52 items 2-5, issue 50 item 12): a step's run of
ranks (``out/rank0/`` ...) or of one process (``out/proc6724/``, its PID in the name) gated as a whole, rank by
rank; a baseline folder of the result CSV alone; the APIs that got worse printed with their reason and on a page of
their own; a baseline without its run record said once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_regress import cli, write_result

from precheck.regress import FAIL, MISSING, NEW, PASS_OUTCOME, RegressError, regress

STAMP = "20261129040354"
ROWS = [("Functional.linear.0", "pass", "pass"), ("Distributed.all_reduce.0", "pass", ""), ("Tensor.add.0", "pass", "")]


def run_folder(folder: Path, rows: list[tuple[str, ...]], stamp: str = STAMP, details: bool = True) -> Path:
    """A run's output folder as run_ut writes it: the result CSV, the details CSV beside it (its content unread by
    regress), and the run record; returns the result CSV."""
    folder.mkdir(parents=True, exist_ok=True)
    result = write_result(folder / f"accuracy_checking_result_{stamp}.csv", rows)
    if details:
        (folder / f"accuracy_checking_details_{stamp}.csv").write_bytes(b"")
    record = {"target": "device", "device": "cpu", "standard": "default", "cosine": 0.99, "max_abs": 1e-4,
              "bench_device": None, "versions": {"torch": "2.13.0+cpu"}}  # fmt: skip
    (folder / f"accuracy_checking_result_{stamp}.run.json").write_text(json.dumps(record))
    return result


def worse(rows: list[tuple[str, ...]], api: str, *statuses: str) -> list[tuple[str, ...]]:
    return [(r[0], *statuses) if r[0] == api else r for r in rows]


# ================================================================================================= item 2


def test_a_one_process_step_is_gated_whatever_the_pids(tmp_path, capsys) -> None:
    # "no accuracy_checking_details_*.csv in this folder", exit 2: the step's run has its CSVs in proc6724/.
    run_folder(tmp_path / "night1" / "proc6724", ROWS)
    run_folder(tmp_path / "night2" / "proc9912", ROWS, stamp="20261130040354")
    code, out, err = cli(
        capsys, "--baseline", str(tmp_path / "night1"), "--current", str(tmp_path / "night2"), "-o", str(tmp_path)
    )
    assert (code, err) == (0, "")
    assert "3 APIs; FAIL 0, MISSING 0, IMPROVED 0, STILL_FAILING 0, NEW 0, PASS 3" in out
    report = regress(tmp_path / "night1", tmp_path / "night2")
    assert {a.rank for a in report.apis} == {"proc"}  # the PID is no rank: a baseline's path stays the same
    run_folder(tmp_path / "night3" / "proc31", worse(ROWS, "Tensor.add.0", "error", ""), stamp="20261201040354")
    code, _, err = cli(
        capsys, "--baseline", str(tmp_path / "night1"), "--current", str(tmp_path / "night3"), "-o", str(tmp_path)
    )
    assert code == 1 and "1 got worse (FAIL)" in err


def test_ranks_are_paired_by_rank_with_a_rank_column_and_the_worst_rank_decides(tmp_path, capsys) -> None:
    for rank in (0, 1):
        run_folder(tmp_path / "night1" / f"rank{rank}", ROWS)
    run_folder(tmp_path / "night2" / "rank0", ROWS, stamp="20261130040354")
    run_folder(tmp_path / "night2" / "rank1", worse(ROWS, "Functional.linear.0", "pass", "error"), "20261130040354")
    report = regress(tmp_path / "night1", tmp_path / "night2")
    assert [(a.rank, a.api, a.outcome) for a in report.apis if a.outcome != PASS_OUTCOME] == [
        ("rank1", "Functional.linear.0", FAIL)
    ]
    assert report.exit_code() == 1 and len(report.apis) == 6
    code, out, _ = cli(
        capsys, "--baseline", str(tmp_path / "night1"), "--current", str(tmp_path / "night2"), "-o", str(tmp_path / "r")
    )
    assert code == 1 and "rank0: PASS" in out and "rank1: FAIL" in out
    md = (tmp_path / "r" / "regress_report.md").read_text()
    assert "| rank | API | baseline forward |" in md and "| rank1 | Functional.linear.0 | pass | pass |" in md
    doc = json.loads((tmp_path / "r" / "regress_report.json").read_text())
    assert [r["rank"] for r in doc["ranks"]] == ["rank0", "rank1"]
    assert {a["rank"] for a in doc["apis"]} == {"rank0", "rank1"}


def test_a_rank_on_one_side_only_is_missing_or_new(tmp_path, capsys) -> None:
    for rank in (0, 1):
        run_folder(tmp_path / "night1" / f"rank{rank}", ROWS)
    for rank in (0, 2):
        run_folder(tmp_path / "night2" / f"rank{rank}", ROWS, stamp="20261130040354")
    report = regress(tmp_path / "night1", tmp_path / "night2")
    assert [(r.rank, report.rank_outcome(r)) for r in report.ranks] == [
        ("rank0", PASS_OUTCOME),
        ("rank1", MISSING),
        ("rank2", NEW),
    ]
    assert {a.outcome for a in report.apis if a.rank == "rank1"} == {MISSING}
    code, out, err = cli(
        capsys, "--baseline", str(tmp_path / "night1"), "--current", str(tmp_path / "night2"), "-o", str(tmp_path)
    )
    assert code == 1 and "rank1: MISSING" in out and "rank2: NEW" in out and "3 went MISSING" in err


def test_one_run_against_a_one_process_step_and_not_against_several_ranks(tmp_path) -> None:
    # A baseline committed as its result CSV alone against tonight's out/ of a one-process step.
    baseline = run_folder(tmp_path / "accepted", ROWS)
    run_folder(tmp_path / "night" / "proc77", ROWS, stamp="20261130040354")
    report = regress(baseline, tmp_path / "night")
    assert report.exit_code() == 0 and {a.rank for a in report.apis} == {"proc"}
    for rank in (0, 1):
        run_folder(tmp_path / "ranks" / f"rank{rank}", ROWS)
    with pytest.raises(RegressError, match=r"a step's run of 2 ranks \(rank0, rank1\)"):
        regress(baseline, tmp_path / "ranks")


def test_two_plain_runs_keep_their_report_without_ranks(tmp_path) -> None:
    base = run_folder(tmp_path / "a", ROWS)
    cur = run_folder(tmp_path / "b", ROWS)
    report = regress(tmp_path / "a", tmp_path / "b")
    assert (report.baseline_path, report.current_path, report.ranks) == (str(base), str(cur), ())
    assert "## Ranks" not in report.to_markdown() and {a.rank for a in report.apis} == {""}


# ================================================================================================= item 3


@pytest.mark.parametrize("step", [False, True], ids=["run", "step"])
def test_a_baseline_of_the_result_csv_and_its_record_alone_is_read(tmp_path, capsys, step) -> None:
    # Refused with "no accuracy_checking_details_*.csv in this folder", a file regress does not read.
    where = "proc1/" if step else ""
    run_folder(tmp_path / "baseline" / where, ROWS, details=False)
    run_folder(tmp_path / "current" / where, worse(ROWS, "Tensor.add.0", "warning", ""), "20261130040354")
    assert not list((tmp_path / "baseline").rglob("accuracy_checking_details_*"))
    code, out, err = cli(
        capsys, "--baseline", str(tmp_path / "baseline"), "--current", str(tmp_path / "current"), "-o", str(tmp_path)
    )
    assert code == 1 and "FAIL 1" in out and "details" not in err


def test_a_folder_without_a_result_csv_names_the_result_csv(tmp_path, capsys) -> None:
    run_folder(tmp_path / "current", ROWS)
    (tmp_path / "empty").mkdir()
    code, _, err = cli(capsys, "--baseline", str(tmp_path / "empty"), "--current", str(tmp_path / "current"))
    assert (
        code == 2
        and err == f"precheck: error: {tmp_path / 'empty'}: no accuracy_checking_result_*.csv in this folder\n"
    )
    newer = tmp_path / "current" / "accuracy_checking_details_20261231000000.csv"
    newer.write_bytes(b"")  # a run stopped before its result CSV: its newest run, and it has none
    code, _, err = cli(capsys, "--baseline", str(tmp_path / "current"), "--current", str(tmp_path / "current"))
    assert code == 2 and "its newest run (20261231000000) has no accuracy_checking_result_*.csv" in err


# ================================================================================================= item 4

BWD_ERROR = (
    "forward.output.0: max abs error 0.0131 >= 0.0001; what bf16 explains: within its rounding; "
    "backward.output.1: worse than an honest fp32 kernel: error 5.22e+04x the honest kernel's (normwise, 2x "
    "allowed); an element off by 2.62e+05 roundings"
)


def test_the_log_names_each_api_that_got_worse_before_after_and_why(tmp_path, capsys) -> None:
    # The CI log said only "2 got worse (FAIL)".
    for rank in (0, 1):
        run_folder(tmp_path / "night1" / f"rank{rank}", ROWS)
    run_folder(tmp_path / "night2" / "rank0", ROWS, stamp="20261130040354")
    rows = [
        ("Functional.linear.0", "warning", "error", BWD_ERROR),
        ("Distributed.all_reduce.0", "SKIP", "", "timed out"),
    ]
    run_folder(tmp_path / "night2" / "rank1", rows, "20261130040354")
    code, out, err = cli(
        capsys, "--baseline", str(tmp_path / "night1"), "--current", str(tmp_path / "night2"), "-o", str(tmp_path / "r")
    )
    assert code == 1 and "2 got worse (FAIL)" in err and "1 went MISSING" in err
    lines = out.splitlines()
    assert (
        "  FAIL rank1 Functional.linear.0: forward pass -> warning, backward pass -> error: backward.output.1: worse "
        "than an honest fp32 kernel: error 5.22e+04x the honest kernel's (normwise, 2x allowed)" in lines
    )
    assert "  FAIL rank1 Distributed.all_reduce.0: forward pass -> SKIP, backward - -> -: timed out" in lines
    assert "  MISSING rank1 Tensor.add.0: absent from the current run" in lines
    page = (tmp_path / "r" / "regress_report.html").read_text()
    assert f"page:     {tmp_path / 'r' / 'regress_report.html'}" in out
    assert "<h2>FAIL (2)</h2>" in page and "<h2>MISSING (1)</h2>" in page and "<h2>Ranks</h2>" in page
    assert '<td>rank1</td><td>Functional.linear.0</td><td class="pass">pass</td>' in page
    assert "backward.output.1: worse than an honest fp32 kernel" in page
    md = (tmp_path / "r" / "regress_report.md").read_text()
    assert "| rank1 | Functional.linear.0 | pass | pass | warning | error | backward.output.1: worse than" in md
    doc = json.loads((tmp_path / "r" / "regress_report.json").read_text())
    assert {a["api"]: a["reason"] for a in doc["apis"] if a["rank"] == "rank1"}["Tensor.add.0"] == (
        "absent from the current run"
    )


def test_the_page_makes_text_of_what_the_csvs_hold(tmp_path) -> None:
    base = run_folder(tmp_path / "a", [("<script>alert(1)</script>.0", "pass", "")])
    cur = run_folder(tmp_path / "b", [("<script>alert(1)</script>.0", "error", "", "<b>x</b>\x1b[31m")])
    from precheck.regress import to_html

    page = to_html(regress(base, cur))
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;.0" in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "\x1b" not in page


def test_the_log_names_at_most_fifty_and_says_how_many_more(tmp_path) -> None:
    names = [f"Torch.op{i}.0" for i in range(60)]
    base = run_folder(tmp_path / "a", [(n, "pass", "") for n in names])
    cur = run_folder(tmp_path / "b", [(n, "error", "") for n in names])
    lines = regress(base, cur).worse_lines()
    assert len(lines) == 51 and lines[-1] == "  ... and 10 more (the reports name every one)"


# ================================================================================================= item 5


def test_a_baseline_without_its_run_record_is_said_once(tmp_path, capsys) -> None:
    # A baseline committed as the CSV alone skipped the settings check (torch version, target, device) silently.
    for rank in (0, 1, 2):
        run_folder(tmp_path / "night1" / f"rank{rank}", ROWS)
        run_folder(tmp_path / "night2" / f"rank{rank}", ROWS, stamp="20261130040354")
        for record in (tmp_path / "night1" / f"rank{rank}").glob("*.run.json"):
            record.unlink()
    code, _, err = cli(
        capsys, "--baseline", str(tmp_path / "night1"), "--current", str(tmp_path / "night2"), "-o", str(tmp_path)
    )
    assert code == 0  # said, not failed: msprobe's CSVs have no record
    assert err.count("\n") == 1 and err.startswith("precheck: warning: the baseline has no run record")
    assert "torch version, target, device" in err and "were not compared" in err
    assert json.loads((tmp_path / "regress_report.json").read_text())["settings_unchecked"] == ["baseline"]
    for record in (tmp_path / "night2").rglob("*.run.json"):
        record.unlink()
    code, _, err = cli(
        capsys, "--baseline", str(tmp_path / "night1"), "--current", str(tmp_path / "night2"), "-o", str(tmp_path)
    )
    assert code == 0 and err.count("\n") == 1 and err.startswith("precheck: warning: neither run has a run record")


def test_runs_with_their_records_say_nothing_of_them(tmp_path, capsys) -> None:
    run_folder(tmp_path / "a", ROWS)
    run_folder(tmp_path / "b", ROWS, stamp="20261130040354")
    code, _, err = cli(capsys, "--baseline", str(tmp_path / "a"), "--current", str(tmp_path / "b"), "-o", str(tmp_path))
    assert (code, err) == (0, "")
