"""``precheck record --check`` and ``precheck.record(check=...)``: a step checked while it runs gives the rows an
offline run of its recorded dump gives, with no tensor file on disk; the command line records a program that
knows nothing of precheck, step by step."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import threading
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_record import _model_dumps

import precheck
from precheck.core.older_python import zip_strict
from precheck.errors import OptionError
from precheck.execution.options import CheckOptions
from precheck.recording.encode import data_names
from precheck.recording.launch import run_recorded
from precheck.recording.store import Store
from precheck.repro import write_repro
from precheck.run_files.csv_files import read_csv_rows
from precheck.run_ut import run_ut
from precheck.scheduling.backends import Backend

TRAIN = Path(__file__).parent / "data" / "train_step.py"


def _step(out: Path, **check: object) -> precheck.recording.session.Recorder:
    return _trained(out, **check)[1]


def _trained(out: Path | None, **check: object) -> tuple[list[torch.Tensor], object]:
    """The MLP's step (recorded under ``out``, not recorded without it): its loss and gradients, and the recorder."""
    torch.manual_seed(0)
    model, loss = _model_dumps("mlp")(torch.float32)
    with nullcontext() if out is None else precheck.record(out, step=0, **check) as recorder:  # type: ignore[arg-type]
        value = loss()
        value.backward()
    return [value.detach(), *(p.grad for p in model.parameters())], recorder


def _rows(folder: Path) -> dict[str, tuple[str, str]]:
    """The result CSV's rows: API -> (forward status, message)."""
    (result,) = folder.glob("accuracy_checking_result_*.csv")
    return {r["API name"]: (r["Forward Test Success"], r["Message"]) for r in read_csv_rows(result)[1]}


def _csvs(folder: Path) -> tuple[bytes, bytes]:
    (result,) = folder.glob("accuracy_checking_result_*.csv")
    (details,) = folder.glob("accuracy_checking_details_*.csv")
    return result.read_bytes(), details.read_bytes()


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes]:
    """The step recorded with its tensor files, then checked by run_ut: what the online check must equal."""
    out = tmp_path_factory.mktemp("offline")
    recorder = _step(out / "dump")
    run_ut(recorder.written[0], out / "csv", workers=1)
    return _csvs(out / "csv")


@pytest.mark.parametrize("backend, workers", [("inprocess", 1), ("process", 2)])
def test_a_step_checked_online_has_the_rows_of_record_then_run_ut(
    tmp_path: Path, offline: tuple[bytes, bytes], backend: str, workers: int
) -> None:
    recorder = _step(tmp_path, check=True, backend=backend, workers=workers)
    assert _csvs(tmp_path) == offline
    assert [p.name for p in recorder.results] == [p.name for p in tmp_path.glob("accuracy_checking_result_*.csv")]
    (dump_json,) = recorder.written
    assert not (dump_json.parent / "dump_tensor_data").exists()  # nothing on disk
    doc = json.loads(dump_json.read_text(encoding="utf-8"))  # and dump.json names no file: a statistics dump
    assert (doc["task"], doc["dump_data_dir"], "data_name" in dump_json.read_text()) == ("statistics", None, False)
    assert list(tmp_path.glob("report_*.html")), "the report comes out when the step ends"
    assert recorder.store is not None and not recorder.store.exists(), "its shared memory is released"


def _record(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "precheck", "record", "-o", str(tmp_path / "dump"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


def test_the_command_records_the_chosen_steps_of_a_program_that_knows_nothing_of_precheck(tmp_path: Path) -> None:
    done = _record(tmp_path, "--steps", "0", "2", "--", sys.executable, str(TRAIN), "4")
    assert done.returncode == 0, done.stderr
    dumps = sorted((tmp_path / "dump").glob("step*/*/dump.json"))
    assert [p.parts[-3] for p in dumps] == ["step0", "step2"]
    assert "2 dump(s) written" in done.stdout and "precheck run_ut -api_info" in done.stdout
    step2 = run_ut(dumps[1], tmp_path / "csv", workers=1)
    assert step2.counts["pass"] == 6 and step2.backward_counts["pass"] == 6  # the MLP's six calls, all graded


def test_check_with_a_pool_records_the_program_once_and_writes_no_tensor_file(tmp_path: Path) -> None:
    done = _record(tmp_path, "--check", "-n", "2", "--", sys.executable, str(TRAIN), "2")
    assert done.returncode == 0, done.stderr
    assert "6 APIs checked\n  forward:  pass 6, warning 0, error 0, SKIP 0" in done.stdout  # the first forward on
    (dump_json,) = (tmp_path / "dump").glob("step*/*/dump.json")  # the workers trained nothing, recorded nothing
    assert not (dump_json.parent / "dump_tensor_data").exists()
    assert len(list((tmp_path / "dump").glob("accuracy_checking_result_*.csv"))) == 1


def test_keep_failing_keeps_the_files_of_the_calls_graded_error_and_repro_runs_on_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exact = F.gelu
    monkeypatch.setattr(F, "gelu", lambda x, approximate="none": exact(x, approximate=approximate) * 1.01)
    options = CheckOptions(target="recorded")
    recorder = _step(tmp_path, check=options, backend="process", workers=1, keep_failing=True)
    (dump_json,) = recorder.written
    assert sorted(p.name for p in (dump_json.parent / "dump_tensor_data").iterdir()) == [
        f"Functional.gelu.0.{d}.{side}.0.pt" for d in ("backward", "forward") for side in ("input", "output")
    ]
    lines = _csvs(tmp_path)[0].decode("utf-8-sig").splitlines()[1:]
    rows = {line.split(",")[0]: line.split(",")[1] for line in lines}
    assert rows["Functional.gelu.0"] == "error" and set(rows.values()) == {"pass", "error"}
    named = [n for r in json.loads(dump_json.read_text(encoding="utf-8"))["data"].values() for n in data_names(r)]
    assert sorted(named) == sorted(p.name for p in (dump_json.parent / "dump_tensor_data").iterdir())
    script = write_repro("Functional.gelu.0", dump_json, tmp_path / "repro")
    assert script.is_file()


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "record needs the command to run after --"),
        (["--keep-failing", "--", "true"], "--keep-failing goes with --check"),
        (["--store-size", "64M", "--", "true"], "--store-size goes with --check"),
        (["--", "true"], "recorded nothing"),
    ],
)
def test_a_record_that_cannot_be_made_is_one_line_and_exit_code_2(tmp_path: Path, args: list, message: str) -> None:
    done = _record(tmp_path, *args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_an_unknown_backend_is_the_users_error_at_once_before_the_step(tmp_path: Path) -> None:
    """It used to fail on the checker's thread: the step then waited forever on a queue nobody read. Then it was
    raised from the first case, made in a backward hook; now it is refused when the recorder is made."""
    with pytest.raises(OptionError, match="unknown backend"):
        precheck.record(tmp_path, check=True, backend="bogus")
    assert not list(tmp_path.iterdir())


def test_a_checker_that_fails_is_raised_at_the_steps_end_with_the_dump_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: object, cases: object, on_start: object, ship: object = None) -> object:
        raise RuntimeError("the checker broke")

    monkeypatch.setattr(Backend, "stream", broken)
    with pytest.raises(RuntimeError, match="the checker broke"):
        _step(tmp_path / "a", check=True)
    (dump_json,) = (tmp_path / "a").glob("step0/*/dump.json")
    assert len(json.loads(dump_json.read_text())["data"]) == 12  # every record of the step, the file closed
    monkeypatch.undo()
    assert _step(tmp_path / "b", check=True).results  # the next recording starts clean


def test_a_store_too_small_for_the_calls_tensors_makes_skip_rows_and_leaves_the_training_as_it_was(
    tmp_path: Path,
) -> None:
    """The store in /dev/shm was unbounded: Docker's 64 MB filled, and torch.save failed inside the user's call."""
    values, recorder = _trained(tmp_path, check=True, store_size=1)
    assert all(torch.equal(a, b) for a, b in zip_strict(values, _trained(None)[0]))  # bit for bit
    rows = _rows(tmp_path)
    assert len(rows) == 6 and {status for status, _ in rows.values()} == {"SKIP"}
    assert all("did not fit the check's store" in m and "over its budget of 1 bytes" in m for _, m in rows.values())
    assert not recorder.store.exists()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        RuntimeError("[enforce fail at inline_container.cc] unexpected pos"),
    ],
)
def test_a_save_that_fails_never_reaches_the_users_call_and_its_call_is_a_skip_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """A full tmpfs fails torch.save halfway (ENOSPC, or the zip writer's "unexpected pos"): it killed the run."""
    save, failed = torch.save, []

    def full(obj: object, f: object, *args: object, **kwargs: object) -> None:
        if failed:
            return save(obj, f, *args, **kwargs)
        failed.append(Path(f).name)  # type: ignore[arg-type]
        Path(f).write_bytes(b"PK\x03\x04")  # type: ignore[arg-type]  # half written
        raise error

    monkeypatch.setattr(torch, "save", full)
    values, _ = _trained(tmp_path, check=True)
    monkeypatch.undo()
    assert all(torch.equal(a, b) for a, b in zip_strict(values, _trained(None)[0]))
    assert failed == ["Functional.linear.0.forward.input.0.pt"]
    rows = _rows(tmp_path)
    status, message = rows.pop("Functional.linear.0")
    assert status == "SKIP" and f"saving {failed[0]} failed: {type(error).__name__}" in message
    assert {status for status, _ in rows.values()} == {"pass"}  # only the call whose file failed


def test_the_store_counts_what_it_holds_and_frees_it_when_a_call_is_released() -> None:
    tensor = torch.ones(1000)
    store = Store(budget=10000)  # one such file (4000 bytes, and 4096 for the file itself) at a time
    try:
        store.save(tensor, store.path / "a.pt")
        store.save(tensor, store.path / "b.pt")
        assert (store.path / "a.pt").is_file() and not (store.path / "b.pt").exists()
        assert "b.pt is 6192 bytes over its budget of 10000 bytes" in (store.refused(["a.pt", "b.pt"]) or "")
        assert store.refused(["a.pt"]) is None
        store.release(["a.pt", "b.pt"])
        store.save(tensor, store.path / "c.pt")
        assert [p.name for p in store.path.iterdir()] == ["c.pt"] and store.refused(["b.pt"]) is None
    finally:
        store.close()
    assert not store.path.exists()
    default = Store()
    default.close()  # a store the test leaves would stay in /dev/shm
    assert default.budget > 0  # by default, half of /dev/shm's free space


FAILS_AT_EXIT = """
import torch
from precheck.scheduling.backends import Backend

def broken(self, cases, on_start, ship=None):
    raise RuntimeError("the checker broke")

Backend.stream = broken  # no optimizer: the one step, and its check, end at the program's exit
torch.ones(3).add(1)
"""


def test_a_check_that_fails_at_the_programs_exit_fails_record_and_says_the_csv_is_partial(tmp_path: Path) -> None:
    """It was raised in an exit handler: Python printed it, and the program and precheck record exited 0 with
    the partial CSV and report passed off as whole."""
    (tmp_path / "train.py").write_text(FAILS_AT_EXIT)
    done = _record(tmp_path, "--check", "--", sys.executable, "train.py")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().endswith("RuntimeError: the checker broke"), done.stderr
    assert "Exception ignored" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "PARTIAL: 0 APIs checked (the check failed: RuntimeError: the checker broke)" in done.stdout
    (sidecar,) = (tmp_path / "dump").glob("accuracy_checking_result_*.run.json")
    assert json.loads(sidecar.read_text())["partial"] == "the check failed: RuntimeError: the checker broke"
    (page,) = (tmp_path / "dump").glob("report_*.html")
    assert "Partial run: the check failed" in page.read_text()


INTERRUPTED = """
import torch
torch.ones(3).add(1)
raise KeyboardInterrupt  # Ctrl-C mid-step, nobody catches it
"""


def test_a_checked_training_ended_by_ctrl_c_exits_130_as_it_does_without_precheck(tmp_path: Path) -> None:
    """The online check's close ran code through exec at exit, which reset the flag Python reads after its exit
    handlers to die by SIGINT: the training and precheck record exited 1 instead of 130."""
    (tmp_path / "train.py").write_text(INTERRUPTED)
    done = _record(tmp_path, "--check", "--", sys.executable, "train.py")
    assert done.returncode == 130, done.stderr
    assert "(command was killed by signal 2 (SIGINT), exit 130)" in done.stdout
    assert "the program ended by KeyboardInterrupt before the step did" in done.stdout


KILLED = """
import os, signal
import torch
torch.ones(3).add(1)
os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would, mid-step
"""


def test_a_training_killed_mid_step_is_said_so_with_the_shells_exit_code(tmp_path: Path) -> None:
    """It listed the unclosed dump as written, named a report never written, and exited 247 (-9 as a byte)."""
    (tmp_path / "train.py").write_text(KILLED)
    done = _record(tmp_path, "--check", "--", sys.executable, "train.py")
    assert done.returncode == 137, done.stderr
    (dump_json,) = (tmp_path / "dump").glob("step0/*/dump.json")
    assert "0 dump(s) written (command was killed by signal 9 (SIGKILL), exit 137)" in done.stdout
    assert f"not closed, its process died mid-step: {dump_json}" in done.stdout
    assert "PARTIAL: " in done.stdout and "report:" not in done.stdout
    assert not list(Path("/dev/shm").glob(f"precheck-record-{dump_json.parent.name[4:]}-*"))


def test_record_lists_only_the_dumps_of_its_own_processes(tmp_path: Path) -> None:
    """A dump.json another run wrote into the same folder meanwhile was listed as this run's (by its mtime)."""
    other = tmp_path / "step0" / "proc1" / "dump.json"
    write_other = f"import pathlib; p = pathlib.Path({str(other)!r}); p.parent.mkdir(parents=True); p.touch()"
    done = run_recorded(tmp_path, [sys.executable, "-c", write_other])
    assert other.is_file() and done.returncode == 0
    assert done.dumps == [] and done.results == []


WAITS = """
import time
import torch
torch.nn.functional.gelu(torch.ones(3, requires_grad=True))
print("ready", flush=True)
time.sleep(120)
"""


def test_sigterm_to_record_ends_the_training_with_its_dump_closed_and_its_store_removed(tmp_path: Path) -> None:
    """SIGTERM killed precheck record alone: the training went on recording with no parent, its store stayed in
    /dev/shm (and Ctrl-C gave it 0.25 s before a SIGKILL, its dump.json never closed)."""
    (tmp_path / "train.py").write_text(WAITS)
    cmd = [sys.executable, "-m", "precheck", "record", "-o", "dump", "--check", "--", sys.executable, "train.py"]
    launcher = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(300, launcher.kill)
    watchdog.start()
    try:
        assert launcher.stdout.readline() == "ready\n"  # type: ignore[union-attr]
        launcher.send_signal(signal.SIGTERM)
        code = launcher.wait(timeout=300)
    finally:
        watchdog.cancel()
        _kill_orphans(tmp_path)
    out, err = launcher.communicate(timeout=300)
    assert code == 143, err
    (dump_json,) = (tmp_path / "dump").glob("step0/*/dump.json")
    assert "1 dump(s) written (command was killed by signal 15 (SIGTERM), exit 143)" in out
    assert list(json.loads(dump_json.read_text())["data"]) == ["Functional.gelu.0.forward"]
    assert not list(Path("/dev/shm").glob(f"precheck-record-{dump_json.parent.name[4:]}-*"))


def _kill_orphans(cwd: Path) -> None:
    """A recorded training still running in ``cwd`` once its launcher is gone (before the fix): not left behind."""
    for dump_json in (cwd / "dump").glob("step0/proc*/dump.json"):
        pid = int(dump_json.parent.name[4:])
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/cwd") == str(cwd):
                os.kill(pid, signal.SIGKILL)
