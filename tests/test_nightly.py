"""The nightly job, one command per step, on the bundled dumps (issue 52 items 6-7 and the recipe of
docs/guide/regress.md): ``generate`` takes the step folder run_ut takes, a ``--copy-data`` suite's data is a dump
run_ut replays, and a run_ut that graded nothing exits 3 (not green in CI) unless ``--allow-empty``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from precheck.commands.cli import main

DATA = Path(__file__).parent / "data"
MLP_STEP = DATA / "mlp_fp32_tensor" / "step0"  # one process: proc8486/
DDP_STEP = DATA / "record" / "ddp_gloo" / "step0"  # two ranks: rank0/, rank1/


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ================================================================================================= item 6


def test_generate_takes_a_one_process_step_folder(tmp_path, capsys) -> None:
    # "dump/step0/dump.json: no such file", though run_ut takes that folder.
    code, out, err = run(capsys, "generate", "-api_info", str(MLP_STEP), "-o", str(tmp_path / "suite"), "-d", "cpu")
    assert code == 0, err
    config = json.loads((tmp_path / "suite" / "precheck_suite.json").read_text())
    assert (tmp_path / "suite" / config["dump"]).resolve() == (MLP_STEP / "proc8486" / "dump.json").resolve()
    assert len(config["apis"]) == 6 and "suite written to" in out


def test_generate_takes_a_step_folder_of_ranks_as_one_suite_of_every_rank(tmp_path, capsys) -> None:
    suite = tmp_path / "suite"
    code, out, err = run(capsys, "generate", "-api_info", str(DDP_STEP), "-o", str(suite), "-d", "cpu", "--copy-data")
    assert code == 0, err
    assert "2 ranks' suites written to" in out and "(rank0, rank1)" in out
    for rank in ("rank0", "rank1"):
        assert (suite / rank / f"test_precheck_apis_{rank}.py").is_file()
        assert json.loads((suite / rank / "precheck_suite.json").read_text())["dump"] == "data/dump.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(suite)],
        capture_output=True,
        text=True,
        cwd=suite,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]  # both ranks' tests collected and run, none colliding


# ================================================================================================= item 7


def result_rows(out: Path) -> list[list[str]]:
    import csv

    result = next(out.rglob("accuracy_checking_result_*.csv"))
    with open(result, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f))[1:]


def test_a_copy_data_suite_is_a_dump_run_ut_replays(tmp_path, capsys) -> None:
    # Its tensor files are renamed (000000.pt ...): run_ut found none of them, every API SKIP.
    suite = tmp_path / "suite"
    assert run(capsys, "generate", "-api_info", str(MLP_STEP), "-o", str(suite), "-d", "cpu", "--copy-data")[0] == 0
    code, out, err = run(capsys, "run_ut", "-api_info", str(suite / "data"), "-o", str(tmp_path / "out"), "-q")
    assert code == 0, err
    assert "forward:  pass 6, warning 0, error 0, SKIP 0" in out
    assert {row[1] for row in result_rows(tmp_path / "out")} == {"pass"}


def test_a_suite_generated_from_a_suites_data_travels_too(tmp_path, capsys) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    assert run(capsys, "generate", "-api_info", str(MLP_STEP), "-o", str(first), "-d", "cpu", "--copy-data")[0] == 0
    assert (
        run(capsys, "generate", "-api_info", str(first / "data"), "-o", str(second), "-d", "cpu", "--copy-data")[0] == 0
    )
    listing = json.loads((second / "data" / "files.json").read_text())
    assert listing["refused"] == {} and "Functional.linear.0.forward.input.0.pt" in listing["copied"]


def all_skip_dump(tmp_path: Path) -> Path:
    """The MLP dump without its tensor files: every API SKIP, nothing graded."""
    folder = tmp_path / "dump"
    folder.mkdir()
    (folder / "dump.json").write_bytes((MLP_STEP / "proc8486" / "dump.json").read_bytes())
    return folder / "dump.json"


def test_a_run_that_graded_nothing_exits_3(tmp_path, capsys) -> None:
    # It exited 0: a nightly job whose tensor files went missing stayed green.
    dump = all_skip_dump(tmp_path)
    code, out, err = run(capsys, "run_ut", "-api_info", str(dump), "-o", str(tmp_path / "out"), "-q")
    assert code == 3
    assert "forward:  pass 0, warning 0, error 0, SKIP 6" in out
    assert err.splitlines()[-1] == (
        "precheck: nothing was graded: all 6 APIs are SKIP (exit 3; --allow-empty to exit 0 all the same)"
    )
    code, _, err = run(capsys, "run_ut", "-api_info", str(dump), "-o", str(tmp_path / "o2"), "-q", "--allow-empty")
    assert (code, err) == (0, "")


def test_fail_on_and_allow_empty_together(tmp_path, capsys) -> None:
    dump = all_skip_dump(tmp_path)
    base = ["run_ut", "-api_info", str(dump), "-q"]
    assert run(capsys, *base, "-o", str(tmp_path / "a"), "--fail-on", "error")[0] == 3  # nothing graded wins
    assert run(capsys, *base, "-o", str(tmp_path / "b"), "--fail-on", "error", "--allow-empty")[0] == 0
    assert run(capsys, *base, "-o", str(tmp_path / "c"), "--fail-on", "skip", "--allow-empty")[0] == 1


def test_a_step_that_graded_something_exits_0(tmp_path, capsys) -> None:
    code, _, err = run(capsys, "run_ut", "-api_info", str(DDP_STEP), "-o", str(tmp_path / "out"), "-q")
    assert code == 0, err


# ================================================================================================= the recipe


def recipe() -> list[list[str]]:
    """The precheck commands of docs/guide/regress.md's nightly job, as typed there (the record line left out:
    the bundled step stands for its recording)."""
    import re
    import shlex

    text = (Path(__file__).resolve().parent.parent / "docs" / "guide" / "regress.md").read_text(encoding="utf-8")
    block = re.search(r"## A nightly job\n.*?```bash\n(.*?)```", text, re.S)[1]
    commands = [shlex.split(line.split("#")[0]) for line in block.splitlines() if line.strip()]
    assert [c[1] for c in commands] == ["record", "run_ut", "regress", "report"]
    return [c[1:] for c in commands[1:]]


def test_the_nightly_recipe_gates_a_step_of_ranks_one_command_per_step(tmp_path, capsys, monkeypatch) -> None:
    import shutil

    shutil.copytree(DDP_STEP, tmp_path / "dump" / "step0")
    monkeypatch.chdir(tmp_path)
    run_ut, gate, report = recipe()
    assert run(capsys, *run_ut)[0] == 0  # last night's run, accepted as the baseline
    (tmp_path / "out").rename(tmp_path / "baseline")
    assert run(capsys, *run_ut)[0] == 0
    code, out, _ = run(capsys, *gate)
    assert code == 0 and "rank0: PASS" in out and "rank1: PASS" in out
    code, out, _ = run(capsys, *report)
    assert code == 0 and len(list((tmp_path / "regress").glob("report_*.html"))) == 1
    # Tonight rank 1's linear got worse: the gate goes red and the log says which, where and why.
    result = next((tmp_path / "out" / "rank1").glob("accuracy_checking_result_*.csv"))
    text = result.read_text(encoding="utf-8-sig")
    row = next(line for line in text.splitlines() if line.startswith("Functional.linear.0,"))
    result.write_text(text.replace(row, 'Functional.linear.0,pass,error,"backward.output.0: worse than it was"'))
    code, out, err = run(capsys, *gate)
    assert code == 1 and "rank1: FAIL" in out and "1 got worse (FAIL)" in err
    assert "  FAIL rank1 Functional.linear.0: forward pass -> pass, backward pass -> error: backward.output.0: " in out
    # Tonight's tensor files went missing: nothing is graded, and run_ut says so with its own code.
    shutil.rmtree(tmp_path / "dump" / "step0" / "rank0" / "dump_tensor_data")
    shutil.rmtree(tmp_path / "dump" / "step0" / "rank1" / "dump_tensor_data")
    code, _, err = run(capsys, *run_ut)
    assert code == 3 and "nothing was graded" in err
