"""Resuming never loses a row nor invents one, however often and wherever the run is killed; a resume refuses
the CSV of another dump or other options; two runs never share a file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import misbehaving_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precheck.commands.cli import main
from precheck.run_files import run_state as runfiles
from precheck.run_ut import run_ut
from tests.test_survive import make_dump, rows

NAMES = [f"Torch.precheck_slow.{i}" for i in range(5)] + ["Torch.tanh.0", "Torch.exp.0", "Torch.sigmoid.0"]

# Runs the CLI and SIGKILLs it just before its k-th change to the output folder (a file opened for writing, a
# rename, a removal): kill points at every step of a resume's repair, reached without timing luck.
KILL_AT_CHANGE = """
import os, signal, sys
k, out = int(sys.argv[1]), os.path.realpath(sys.argv[2])
seen = [0]
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

def hook(event, args):
    if event == "open":
        mode, flags = args[1], args[2]
        changes = isinstance(flags, int) and flags & WRITE or isinstance(mode, str) and set(mode) & set("wax+")
    else:
        changes = event in ("os.rename", "os.remove")
    if changes and isinstance(args[0], (str, bytes, os.PathLike)):
        if os.path.realpath(os.fsdecode(args[0])).startswith(out):
            seen[0] += 1
            if seen[0] == k:
                os.kill(os.getpid(), signal.SIGKILL)

sys.addaudithook(hook)
from precheck.run_files import run_state as runfiles
from precheck.commands.cli import main
sys.exit(main(sys.argv[3:]))
"""


def _env() -> dict[str, str]:
    return dict(os.environ, **misbehaving_env())


def run_cli(*args: str, kill_at_change: int = 0, out: Path | None = None) -> subprocess.CompletedProcess:
    argv = ["run_ut", "-q", "-d", "cpu", *args]
    cmd = [sys.executable, "-c", KILL_AT_CHANGE, str(kill_at_change), str(out), *argv] if kill_at_change else None
    cmd = cmd or [sys.executable, "-m", "precheck", *argv]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=180)


def kill_after_rows(n: int, *args: str, result: Path | None = None, out: Path | None = None) -> None:
    """Start the CLI and SIGKILL it once the result CSV holds ``n`` rows (or at once if it does already)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "precheck", "run_ut", "-q", "-d", "cpu", *args],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        found = [result] if result else list(out.glob("accuracy_checking_result_*.csv"))
        try:
            if found and len(rows(found[0])) >= n:
                break
        except (FileNotFoundError, IndexError, UnicodeDecodeError):
            pass
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[Path, list, list]:
    """The dump and the rows of an uninterrupted run of it."""
    folder = tmp_path_factory.mktemp("clean")
    dump = make_dump(folder / "dump.json", NAMES)
    done = run_cli("-api_info", str(dump), "-o", str(folder / "out"))
    assert done.returncode == 0, done.stderr
    result = next((folder / "out").glob("accuracy_checking_result_*.csv"))
    details = next((folder / "out").glob("accuracy_checking_details_*.csv"))
    return dump, rows(result), rows(details)


def _interrupted_run(dump: Path, out: Path, n: int) -> Path:
    kill_after_rows(n, "-api_info", str(dump), "-o", str(out), out=out)
    return next(out.glob("accuracy_checking_result_*.csv"))


def _finish_and_compare(dump: Path, result: Path, clean: tuple[Path, list, list]) -> None:
    done = run_cli("-api_info", str(dump), "-csv_path", str(result))
    assert done.returncode == 0, done.stderr
    assert rows(result) == clean[1]
    assert rows(result.with_name(result.name.replace("_result_", "_details_"))) == clean[2]
    assert not list(result.parent.glob("*.journal")) and not list(result.parent.glob("*.tmp"))


def test_a_resume_killed_at_every_step_of_its_repair_loses_no_row(tmp_path, clean):
    """Each resume is killed just before a later change to the files than the one before, so the chain passes
    through every step of the repair (today's main rewrote both CSVs header-only first: a kill there lost
    every finished row)."""
    dump = clean[0]
    out = tmp_path / "out"
    result = _interrupted_run(dump, out, 3)
    finished = len(rows(result))
    for k in range(1, 8):
        run_cli("-api_info", str(dump), "-csv_path", str(result), kill_at_change=k, out=out)
        assert len(rows(result)) >= finished  # never fewer rows than before the resume
        finished = len(rows(result))
    _finish_and_compare(dump, result, clean)


KILLS = st.lists(
    st.one_of(st.tuples(st.just("change"), st.integers(1, 9)), st.tuples(st.just("rows"), st.integers(0, 7))),
    min_size=1,
    max_size=3,
)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.integers(1, 6), kills=KILLS)
def test_kill_resume_cycles_give_the_rows_of_a_clean_run(tmp_path_factory, clean, first, kills):
    """SIGKILL at random points, during the resume's repair as well as between and inside checks: the rows in
    the end are those of a run never interrupted, and no API is blamed for the kills."""
    dump = clean[0]
    out = tmp_path_factory.mktemp("killed")
    result = _interrupted_run(dump, out, first)
    for how, n in kills:
        if how == "change":
            run_cli("-api_info", str(dump), "-csv_path", str(result), kill_at_change=n, out=out)
        else:
            kill_after_rows(n, "-api_info", str(dump), "-csv_path", str(result), result=result)
    _finish_and_compare(dump, result, clean)


def test_a_resume_with_another_dump_or_other_options_is_refused(tmp_path, capsys):
    dump = make_dump(tmp_path / "dump.json", ["Torch.tanh.0", "Torch.exp.0"])
    summary = run_ut(dump, tmp_path / "out", device="cpu", workers=1)
    result = str(summary.result_path)
    for argv, what in (
        (["--seed", "7"], "seed: 0 then, 7 now"),
        (["--cosine", "0.5"], "cosine: 0.99 then, 0.5 now"),
        (["--standard", "auto"], "standard: 'default' then, 'auto' now"),
        (["--random"], "force_random: False then, True now"),
    ):
        assert main(["run_ut", "-api_info", str(dump), "-csv_path", result, "-q", "-d", "cpu", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and what in err and result in err and "start a new run" in err
    other = make_dump(tmp_path / "other.json", ["Torch.tanh.0", "Torch.sigmoid.0"])
    assert main(["run_ut", "-api_info", str(other), "-csv_path", result, "-q", "-d", "cpu"]) == 2
    assert "written by another run (dump:" in capsys.readouterr().err
    before = Path(result).read_bytes()
    assert main(["run_ut", "-api_info", str(dump), "-csv_path", result, "-q", "-d", "cpu"]) == 0  # the same: fine
    assert Path(result).read_bytes() == before


def test_a_resume_under_another_torch_is_refused(tmp_path, capsys):
    import json

    import torch

    dump = make_dump(tmp_path / "dump.json", ["Torch.tanh.0", "Torch.exp.0"])
    summary = run_ut(dump, tmp_path / "out", device="cpu", workers=1)
    sidecar = summary.result_path.with_name(summary.result_path.stem + ".run.json")
    recorded = json.loads(sidecar.read_text(encoding="utf-8"))
    assert recorded["versions"]["torch"] == torch.__version__
    recorded["versions"]["torch"] = "2.0.0"
    sidecar.write_text(json.dumps(recorded), encoding="utf-8")
    assert main(["run_ut", "-api_info", str(dump), "-csv_path", str(summary.result_path), "-q", "-d", "cpu"]) == 2
    assert "(versions: {'precheck'" in (err := capsys.readouterr().err) and "'torch': '2.0.0'" in err


def test_two_runs_started_in_the_same_second_write_their_own_files(tmp_path, monkeypatch):
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20260101120000")
    first = make_dump(tmp_path / "a.json", ["Torch.tanh.0", "Torch.exp.0"])
    second = make_dump(tmp_path / "b.json", ["Torch.sigmoid.0"])
    a = run_ut(first, tmp_path / "out", device="cpu", workers=1)
    b = run_ut(second, tmp_path / "out", device="cpu", workers=1)
    assert a.result_path.name == "accuracy_checking_result_20260101120000.csv"
    assert b.result_path.name == "accuracy_checking_result_20260101120000_2.csv"
    assert b.details_path.name == "accuracy_checking_details_20260101120000_2.csv"
    assert [r[0] for r in rows(a.result_path)] == ["Torch.tanh.0", "Torch.exp.0"]
    assert [r[0] for r in rows(b.result_path)] == ["Torch.sigmoid.0"]
    assert [r[0].rsplit(".", 3)[0] for r in rows(a.details_path)] == ["Torch.tanh.0", "Torch.exp.0"]


def test_a_csv_being_written_cannot_be_resumed_by_a_second_run(tmp_path, capsys):
    dump = make_dump(tmp_path / "dump.json", [f"Torch.precheck_slow.{i}" for i in range(40)])
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "precheck", "run_ut", "-q", "-d", "cpu", "-api_info", str(dump), "-o", str(out)],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(out.glob("*.run.json")):
            time.sleep(0.05)
        result = next(out.glob("accuracy_checking_result_*.csv"))
        code = main(["run_ut", "-api_info", str(dump), "-csv_path", str(result), "-q", "-d", "cpu"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and f"in use by pid {proc.pid}" in err
    finally:
        proc.kill()
        proc.wait(30)
    journal = next(out.glob("*.journal"))
    runfiles.lock(journal, result).close()  # a killed run holds no lock


def test_the_suspects_are_the_apis_running_when_a_run_died(tmp_path):
    """Not every API ever started: only those in flight at a kill; an orderly stop (Ctrl-C) blames none, and a
    name with a newline or tab is one name."""
    journal = tmp_path / "accuracy_checking_result_20260101120000.journal"
    journal.write_text(
        'run\t1\nstart\t"A.0"\nstart\t"B.0"\n'  # killed while A and B ran (B may have finished: the CSV says)
        'run\t2\nstart\t"C.0"\ninterrupted\n'  # Ctrl-C while C ran
        'run\t3\nstart\t"D\\n\\tx.0"\nstart\t"E.'  # killed while D ran, and mid-write of E's line
    )
    assert runfiles.suspects(journal) == {"A.0", "B.0", "D\n\tx.0"}
