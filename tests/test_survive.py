"""Never lose work: APIs that crash or hang their worker, runs killed with -9 and resumed, torn lines."""

from __future__ import annotations

import csv
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import forward_rec, link_tensor_data, misbehaving_env, real_dump_json, tensor_rec

import api_registry
from precheck.dump.records import load_dump
from precheck.execution.options import CheckOptions
from precheck.run_ut import run_ut
from precheck.scheduling import costs

STATS_TENSOR = {
    "type": "torch.Tensor",
    "dtype": "torch.float32",
    "shape": [4],
    "Max": 1.0,
    "Min": -1.0,
    "Mean": 0.0,
    "Norm": 1.5,
    "requires_grad": False,
}


def make_dump(path: Path, names: list[str]) -> Path:
    doc = {
        "task": "statistics",
        "level": "L1",
        "framework": "pytorch",
        "dump_data_dir": None,
        "data": {
            f"{n}.forward": {"input_args": [STATS_TENSOR], "input_kwargs": {}, "output": [STATS_TENSOR]} for n in names
        },
    }
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def misbehaving(monkeypatch):
    """The test-only APIs that crash and hang, in this process and in every worker it starts."""
    for key, value in misbehaving_env().items():
        monkeypatch.setenv(key, value)
    api_registry.registry.cache_clear()
    yield
    monkeypatch.delenv("PRECHECK_PLUGINS")
    api_registry.registry.cache_clear()


def rows(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f))[1:]


def cli(*args: str) -> subprocess.Popen:
    env = dict(os.environ, **misbehaving_env())
    return subprocess.Popen(
        [sys.executable, "-m", "precheck", "run_ut", "-q", "-d", "cpu", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_crashing_apis_become_error_rows_hanging_ones_skip_rows_and_the_run_goes_on(tmp_path, misbehaving):
    dump = make_dump(
        tmp_path / "dump.json",
        [
            "Torch.precheck_segfault.0",
            "Torch.tanh.0",
            "Torch.precheck_abort.0",
            "Torch.precheck_exit.0",
            "Torch.precheck_hang.0",
            "Torch.sigmoid.0",
        ],
    )
    summary = run_ut(
        dump, tmp_path / "out", device="cpu", workers=2, backend="process", options=CheckOptions(timeout=8)
    )
    got = {r.name: (r.forward, r.message) for r in summary.results}
    assert got["Torch.precheck_segfault.0"] == ("error", "worker crashed: signal 11 (SIGSEGV)")
    assert got["Torch.precheck_abort.0"] == ("error", "worker crashed: signal 6 (SIGABRT)")
    assert got["Torch.precheck_exit.0"] == ("error", "worker crashed: exit code 3")
    assert got["Torch.precheck_hang.0"] == ("SKIP", "timed out after 8 s; not graded")
    assert got["Torch.tanh.0"][0] == got["Torch.sigmoid.0"][0] == "pass"
    assert [r[0] for r in rows(summary.result_path)] == [
        f"{n}.0"
        for n in (
            "Torch.precheck_segfault",
            "Torch.tanh",
            "Torch.precheck_abort",
            "Torch.precheck_exit",
            "Torch.precheck_hang",
            "Torch.sigmoid",
        )
    ]


def test_a_case_queued_behind_one_that_kills_or_outlasts_its_worker_runs_in_the_next_worker(tmp_path, misbehaving):
    """A busy worker has the next case queued behind its own (sent, not started): when its worker dies or is
    stopped past the time limit, that case is neither lost nor blamed, and the next worker runs it."""
    names = ["Torch.precheck_segfault.0", "Torch.tanh.0", "Torch.precheck_hang.0", "Torch.sigmoid.0", "Torch.tanh.1"]
    summary = run_ut(
        make_dump(tmp_path / "dump.json", names),
        tmp_path / "out",
        device="cpu",
        workers=1,
        backend="process",
        options=CheckOptions(timeout=4),
    )
    got = {r.name: (r.forward, r.message) for r in summary.results}
    assert got.pop("Torch.precheck_segfault.0") == ("error", "worker crashed: signal 11 (SIGSEGV)")
    assert got.pop("Torch.precheck_hang.0") == ("SKIP", "timed out after 4 s; not graded")
    assert {name: status for name, (status, _) in got.items()} == dict.fromkeys(
        ["Torch.tanh.0", "Torch.sigmoid.0", "Torch.tanh.1"], "pass"
    )
    assert [r[0] for r in rows(summary.result_path)] == names  # every case has its row, in the dump's order


def segfaulting_dump(into: Path) -> Path:
    """The MLP dump's gelu, softmax and layer_norm, with ``segment_reduce(x, "sum", lengths=[1e9, 1e9],
    unsafe=True)`` second: torch reads where the lengths point and segfaults (its lengths are a real tensor file)."""
    import torch

    mlp = real_dump_json("mlp_fp32_tensor")
    doc = json.loads(mlp.read_text())
    recorded = doc["data"]
    lengths = "Torch.segment_reduce.0.forward.input.lengths.pt"
    data_ = recorded["Functional.gelu.0.forward"]["input_args"][0]
    segment_reduce = forward_rec(
        data_,
        {"type": "str", "value": "sum"},
        kwargs={
            "lengths": tensor_rec("torch.int64", (2,), data_name=lengths, Max=1e9, Min=1e9, Mean=1e9, Norm=1.4e9),
            "unsafe": {"type": "bool", "value": True},
        },
        output=[tensor_rec(shape=(2,))],
    )
    doc["data"] = {
        "Functional.gelu.0.forward": recorded["Functional.gelu.0.forward"],
        "Torch.segment_reduce.0.forward": segment_reduce,
        "Torch.softmax.0.forward": recorded["Torch.softmax.0.forward"],
        "Functional.layer_norm.0.forward": recorded["Functional.layer_norm.0.forward"],
    }
    into.mkdir()
    (into / "dump.json").write_text(json.dumps(doc))
    link_tensor_data(mlp.parent / "dump_tensor_data", into)
    torch.save(torch.tensor([10**9, 10**9]), into / "dump_tensor_data" / lengths)
    return into / "dump.json"


def test_a_call_that_switches_off_torchs_checks_never_runs_in_the_runs_process(tmp_path):
    """A default run of a small dump runs in-process; its unsafe=True segment_reduce segfaults torch, and ran
    there: the run died with exit 139, nothing on stderr and 1 of 4 rows. It runs in a worker instead."""
    dump = segfaulting_dump(tmp_path / "dump")
    assert not costs.use_pool(load_dump(dump).cases, 2)  # the default backend runs this dump in-process
    run = cli("-n", "2", "-api_info", str(dump), "-o", str(tmp_path / "out"))
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 0, stderr
    result = next((tmp_path / "out").glob("accuracy_checking_result_*.csv"))
    assert [r[:2] for r in rows(result)] == [
        ["Functional.gelu.0", "pass"],
        ["Torch.segment_reduce.0", "error"],
        ["Torch.softmax.0", "pass"],
        ["Functional.layer_norm.0", "pass"],
    ]
    assert rows(result)[1][3] == "worker crashed: signal 11 (SIGSEGV)"
    assert "forward:  pass 3, warning 0, error 1, SKIP 0" in stdout


@pytest.mark.parametrize("backend", [["--backend", "inprocess"], ["--backend", "process", "-n", "2"]])
def test_an_api_raising_system_exit_is_its_row_and_the_run_goes_on(tmp_path, backend):
    """SystemExit (or GeneratorExit) from an API in the run's own process ended the run with exit 0, nothing
    printed, 3 of 4 rows missing and the journal left behind; in a pool it read "worker crashed: exit code 0".
    It is that API's error row, worded alike wherever it ran."""
    names = ["Torch.tanh.0", "Torch.precheck_sys_exit.0", "Torch.precheck_generator_exit.0", "Torch.exp.0"]
    dump = make_dump(tmp_path / "dump.json", names)
    out = tmp_path / "out"
    run = cli(*backend, "-api_info", str(dump), "-o", str(out))
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 0, stderr
    assert "forward:  pass 2, warning 0, error 2, SKIP 0" in stdout
    got = rows(next(out.glob("accuracy_checking_result_*.csv")))
    assert [r[:2] for r in got] == [[names[0], "pass"], [names[1], "error"], [names[2], "error"], [names[3], "pass"]]
    assert got[1][3] == "the call raised SystemExit: 0, which would have ended the run"
    assert got[2][3] == "the call raised GeneratorExit, which would have ended the run"
    assert not list(out.glob("*.journal"))


def test_a_pool_whose_calls_show_progress_bars_leaks_no_semaphore(tmp_path):
    """inductor shows a tqdm bar while torch.compile waits for its kernels, and tqdm's first bar in a process
    makes a multiprocessing lock: each worker of a --target compile pool made one, left without unlinking it,
    and the run ended with "resource_tracker: There appear to be 2 leaked semaphore objects"."""
    names = [f"Torch.precheck_progress.{i}" for i in range(4)]
    dump = make_dump(tmp_path / "dump.json", names)
    run = cli("--backend", "process", "-n", "2", "-api_info", str(dump), "-o", str(tmp_path / "out"))
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 0, stderr
    assert "forward:  pass 4, warning 0, error 0, SKIP 0" in stdout
    assert "leaked" not in stderr, stderr


def test_a_sticky_device_error_retires_its_worker(tmp_path, misbehaving, monkeypatch):
    names = ["Torch.precheck_sticky.0"] + [f"Torch.precheck_clean.{i}" for i in range(6)]
    summary = run_ut(
        make_dump(tmp_path / "dump.json", names), tmp_path / "out", device="cpu", workers=2, backend="process"
    )
    got = {r.name: r.forward for r in summary.results}
    assert got.pop("Torch.precheck_sticky.0") == "error"
    assert set(got.values()) == {"pass"}  # no later API ran in the broken process


def test_an_api_that_killed_the_run_is_checked_in_a_worker_on_resume(tmp_path):
    dump = make_dump(
        tmp_path / "dump.json", ["Torch.precheck_slow.0", "Torch.precheck_segfault.0", "Torch.precheck_slow.1"]
    )
    out = tmp_path / "out"
    first = cli("-api_info", str(dump), "-o", str(out))
    first.communicate(timeout=120)
    assert first.returncode == -signal.SIGSEGV  # in-process: the crash takes the run down...
    result = next(out.glob("accuracy_checking_result_*.csv"))
    assert [r[0] for r in rows(result)] == ["Torch.precheck_slow.0"]  # ...but not the finished row
    second = cli("-api_info", str(dump), "-csv_path", str(result))
    stdout, _ = second.communicate(timeout=120)
    # The journal says which API was running: on resume it alone runs in a worker, whose crash is its row.
    assert second.returncode == 0, stdout
    assert "3 APIs on cpu: 1 done before, by the run this continues; 2 checked now" in stdout
    assert [r[:2] for r in rows(result)] == [
        ["Torch.precheck_slow.0", "pass"],
        ["Torch.precheck_segfault.0", "error"],
        ["Torch.precheck_slow.1", "pass"],
    ]
    assert rows(result)[1][3] == "worker crashed: signal 11 (SIGSEGV)"
    assert not list(out.glob("*.journal"))  # a complete run leaves no journal


def test_kill_9_then_resume_gives_exactly_the_rows_of_an_uninterrupted_run(tmp_path):
    names = [f"Torch.precheck_slow.{i}" for i in range(10)] + ["Torch.tanh.0", "Torch.exp.0"]
    dump = make_dump(tmp_path / "dump.json", names)
    clean = cli("-api_info", str(dump), "-o", str(tmp_path / "clean"))
    clean.communicate(timeout=120)
    expected_result = rows(next((tmp_path / "clean").glob("accuracy_checking_result_*.csv")))
    expected_details = rows(next((tmp_path / "clean").glob("accuracy_checking_details_*.csv")))

    out = tmp_path / "killed"
    run = cli("-api_info", str(dump), "-o", str(out))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = list(out.glob("accuracy_checking_result_*.csv"))
        if found and len(rows(found[0])) >= 3:
            break
        time.sleep(0.05)
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=30)
    result = next(out.glob("accuracy_checking_result_*.csv"))
    details = next(out.glob("accuracy_checking_details_*.csv"))
    assert 3 <= len(rows(result)) < len(names)
    # A torn last line, as a kill in the middle of a write leaves it, is repaired on resume.
    with open(result, "a", encoding="utf-8") as f:
        f.write("Torch.precheck_slow.9,pa")
    with open(details, "a", encoding="utf-8") as f:
        f.write("Torch.precheck_slow.9.forward.output.0,torch.float64,torch.fl")
    resumed = cli("-api_info", str(dump), "-csv_path", str(result))
    resumed.communicate(timeout=120)
    assert resumed.returncode == 0
    assert rows(result) == expected_result
    assert rows(details) == expected_details


def test_resume_refuses_a_file_that_is_not_a_result_csv(tmp_path, capsys):
    from precheck.commands.cli import main

    dump = make_dump(tmp_path / "dump.json", ["Torch.tanh.0"])
    bogus = tmp_path / "notes.csv"
    bogus.write_text("x")
    assert main(["run_ut", "-api_info", str(dump), "-csv_path", str(bogus), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an accuracy_checking_result_<YYYYmmddHHMMSS>.csv file" in err


def test_timeout_holds_in_process_too(tmp_path, misbehaving):
    """A small dump runs in-process; a hanging API there is its SKIP row after --timeout, and the APIs after it
    are still checked (in a worker: a hung kernel cannot be stopped in this process)."""
    dump = make_dump(
        tmp_path / "dump.json", ["Torch.tanh.0", "Torch.precheck_hang.0", "Torch.sigmoid.0", "Torch.exp.0"]
    )
    assert not costs.use_pool(load_dump(dump).cases, 2)
    start = time.monotonic()
    summary = run_ut(dump, tmp_path / "out", device="cpu", workers=2, options=CheckOptions(timeout=3))
    assert time.monotonic() - start < 60
    got = {r.name: (r.forward, r.message) for r in summary.results}
    assert got.pop("Torch.precheck_hang.0") == ("SKIP", "timed out after 3 s; not graded")
    assert {f for f, _ in got.values()} == {"pass"} and len(got) == 3


@pytest.mark.parametrize("backend", ["inprocess", "process"])
def test_a_timeout_is_a_skip_row_counted_apart_that_never_fails_the_error_gate(
    tmp_path, misbehaving, monkeypatch, capsys, backend
):
    """A call past its time limit was graded error: a nightly --fail-on error gate failed because the machine was
    busy. It is a SKIP row saying so, counted apart in the summary, and the gate passes on the graded rows. Only
    the hanging call gets a short limit (the others keep the default): a graded call is never cut short by load."""
    from precheck.commands.cli import main
    from precheck.scheduling import loop

    def short_for_the_hang(case, options):
        return 0.3 if "precheck_hang" in case.name else costs.case_timeout(case, options)

    # the run's process enforces the limit, one loop body for every backend: in-process and in a pool alike
    monkeypatch.setattr(loop, "case_timeout", short_for_the_hang)
    dump = make_dump(tmp_path / "dump.json", ["Torch.tanh.0", "Torch.sigmoid.0", "Torch.precheck_hang.0"])
    argv = ["run_ut", "-q", "-d", "cpu", "-n", "2", "--backend", backend, "--fail-on", "error"]
    assert main([*argv, "-api_info", str(dump), "-o", str(tmp_path / "out")]) == 0
    (result,) = (tmp_path / "out").glob("accuracy_checking_result_*.csv")
    assert [r[:4] for r in rows(result)] == [
        ["Torch.tanh.0", "pass", " ", "inputs generated from statistics (seed 0)"],
        ["Torch.sigmoid.0", "pass", " ", "inputs generated from statistics (seed 0)"],
        ["Torch.precheck_hang.0", "SKIP", " ", "timed out after 0.3 s; not graded"],
    ]
    out = capsys.readouterr().out
    assert "  forward:  pass 2, warning 0, error 0, SKIP 1\n" in out
    assert "\n  timed out: 1 APIs (SKIP, not graded; raise --timeout to grade them)\n" in out


def test_a_million_workers_are_capped_and_keep_a_usable_memory_share(tmp_path):
    summary = run_ut(make_dump(tmp_path / "dump.json", ["Torch.tanh.0"]), tmp_path / "out", device="cpu", workers=10**6)
    assert summary.counts == {"pass": 1}  # not a SKIP for needing more than a millionth of the memory
    assert costs.worker_count(10**6) == costs.MAX_WORKERS_PER_CORE * costs.default_workers()


def test_save_error_data_that_fails_in_a_worker_costs_no_verdict(tmp_path, monkeypatch, capfd):
    names = ["Torch.tanh.0", "Torch.exp.0", "Torch.sigmoid.0"]
    dump = make_dump(tmp_path / "dump.json", names)
    plain = run_ut(
        dump, tmp_path / "plain", device="cpu", workers=2, backend="process", options=CheckOptions(max_abs=1e-30)
    )
    err = tmp_path / "err"
    err.mkdir()
    (err / "Torch.exp.0").write_text("a file where the API's folder would go")
    saved = run_ut(
        dump,
        tmp_path / "saved",
        device="cpu",
        workers=2,
        backend="process",
        options=CheckOptions(max_abs=1e-30, save_error_data=str(err)),
    )
    assert [(r.forward, r.message) for r in saved.results] == [(r.forward, r.message) for r in plain.results]
    assert {r.forward for r in saved.results} == {"warning"}
    assert (err / "Torch.tanh.0" / "forward.output.0.golden.pt").is_file()
    lines = [line for line in capfd.readouterr().err.splitlines() if "Torch.exp.0" in line]
    assert len(lines) == 1 and lines[0].startswith("precheck: warning: cannot save error data of Torch.exp.0: ")


def _stopped_by(sig: int, tmp_path: Path) -> tuple[subprocess.Popen, str, Path]:
    """A pool run of slow APIs, sent ``sig`` (to its whole process group, as a terminal's Ctrl-C is) once 2 rows
    are on disk."""
    dump = make_dump(tmp_path / "dump.json", [f"Torch.precheck_slow.{i}" for i in range(30)])
    out = tmp_path / "out"
    env = dict(os.environ, **misbehaving_env())
    argv = [
        sys.executable,
        "-m",
        "precheck",
        "run_ut",
        "--backend",
        "process",
        "-q",
        "-d",
        "cpu",
        "-n",
        "2",
        "-api_info",
        str(dump),
        "-o",
        str(out),
    ]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = list(out.glob("accuracy_checking_result_*.csv"))
        if found and len(rows(found[0])) >= 2:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    return proc, err, found[0]


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stopped_pool_run_says_how_to_continue_it_in_one_line(tmp_path, sig, code):
    proc, err, result = _stopped_by(sig, tmp_path)
    assert proc.returncode == code
    assert err.count("\n") == 1 and "Traceback" not in err, err  # no worker tracebacks
    assert f"finished APIs are in {result}; continue with: precheck run_ut " in err
    command = shlex.split(err.split("continue with: ")[1])
    assert command[-2:] == ["-csv_path", str(result)] and command[1] == "run_ut"
    env = dict(os.environ, **misbehaving_env())
    again = subprocess.run([sys.executable, "-m", *command], env=env, capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stderr
    assert [r[1] for r in rows(result)] == ["pass"] * 30


def _in_process_in_its_second_case(tmp_path, first: str, second: str) -> subprocess.Popen:
    """An in-process run of two APIs, returned once the first one's row is written (the second has begun)."""
    dump = make_dump(tmp_path / "dump.json", [first, second])
    out = tmp_path / "out"
    proc = cli("--backend", "inprocess", "-n", "1", "--timeout", "600", "-api_info", str(dump), "-o", str(out))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(rows(p) for p in out.glob("accuracy_checking_result_*.csv")):
        time.sleep(0.05)
    return proc


def test_ctrl_c_ends_an_in_process_run_whose_api_hangs(tmp_path):
    """The in-process helper is waited for at the end of a run only when idle: a Ctrl-C during a case that never
    returns still ends the run at once, with the command that continues it."""
    proc = _in_process_in_its_second_case(tmp_path, "Torch.precheck_slow.0", "Torch.precheck_hang.0")
    time.sleep(1.0)  # the hanging API has started
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted; 1 finished APIs are in " in err and "continue with: precheck run_ut" in err


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_run_stopped_while_its_case_runs_torch_ends_with_its_code(tmp_path, sig, code):
    """The in-process helper left in a case is a live thread in torch's C++ at exit: the interpreter's shutdown
    ended such a thread by unwinding it through a noexcept frame (std::terminate, exit -6 about once in 35
    stops). The program now leaves without that shutdown, with its documented code. The case here is in torch
    nearly all the time, so before the fix this aborted on every stop."""
    proc = _in_process_in_its_second_case(tmp_path, "Torch.tanh.0", "Torch.precheck_busy.0")
    time.sleep(0.5)  # the busy API has started
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert "terminate called" not in err and "1 finished APIs are in " in err


def test_the_next_start_after_a_run_died_names_the_command_that_resumes_it(tmp_path):
    """A run killed with -9 (here by its own in-process API) leaves its journal; the next run into the same
    folder says in one line how to resume it, and the command it prints does."""
    dump = make_dump(tmp_path / "dump.json", ["Torch.tanh.0", "Torch.precheck_kill.0", "Torch.exp.0"])
    out = tmp_path / "out dir"
    first = cli("-api_info", str(dump), "-o", str(out))
    first.communicate(timeout=120)
    assert first.returncode == -signal.SIGKILL
    result = next(out.glob("accuracy_checking_result_*.csv"))
    again = cli("-api_info", str(dump), "-o", str(out))
    _, err = again.communicate(timeout=120)  # it dies the same way: the hint came before that
    hint = [line for line in err.splitlines() if "did not finish" in line]
    assert hint == [
        f"precheck: warning: {result} holds a run of this dump and options that did not finish; continue it with: "
        + shlex.join(["precheck", "run_ut", "-q", "-d", "cpu", "-api_info", str(dump), "-o", str(out)])
        + f" -csv_path {shlex.quote(str(result))}"
    ]
    command = shlex.split(hint[0].split("continue it with: ")[1])
    env = dict(os.environ, **misbehaving_env())
    resumed = subprocess.run([sys.executable, "-m", *command], env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert [r[:2] for r in rows(result)] == [["Torch.tanh.0", "pass"], ["Torch.precheck_kill.0", "error"],
                                             ["Torch.exp.0", "pass"]]  # fmt: skip
    assert rows(result)[1][3] == "worker crashed: signal 9 (SIGKILL)"


# Sends itself SIGINT while the command line imports the run (start-up), as a Ctrl-C then does.
SIGINT_AT_STARTUP = """
import os, signal, sys

def hook(event, args):
    if event == "import" and args[0] == "precheck.run_ut":
        os.kill(os.getpid(), signal.SIGINT)

sys.addaudithook(hook)
from precheck.commands.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_during_start_up_is_one_line_and_exit_130(tmp_path):
    dump = make_dump(tmp_path / "dump.json", ["Torch.tanh.0"])
    argv = ["run_ut", "-q", "-d", "cpu", "-api_info", str(dump), "-o", str(tmp_path / "out")]
    done = subprocess.run([sys.executable, "-c", SIGINT_AT_STARTUP, *argv], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (130, "precheck: interrupted during start-up\n")


def test_a_full_disk_stops_the_run_with_the_command_that_continues_it(tmp_path, monkeypatch, capsys):
    """The disk fills after 2 rows (every later write and sync fails): exit 2, one line naming the cause and the
    command that continues the run; run once space is back, it finishes the CSVs."""
    import errno

    from precheck.commands.cli import main
    from precheck.run_files import csv_files

    names = ["Torch.tanh.0", "Torch.exp.0", "Torch.sigmoid.0", "Torch.cos.0"]
    dump = make_dump(tmp_path / "dump.json", names)
    write, written = csv_files.CsvReport._write, []

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def filling(self, *args: object) -> None:
        if len(written) == 2:
            monkeypatch.setattr(csv_files, "_sync", full)
            full()
        written.append(args)
        write(self, *args)

    monkeypatch.setattr(csv_files.CsvReport, "_write", filling)
    argv = ["run_ut", "-q", "-d", "cpu", "--backend", "inprocess", "-api_info", str(dump), "-o", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    result = next((tmp_path / "o").glob("accuracy_checking_result_*.csv"))
    assert err.count("\n") == 1 and "cannot write results: [Errno 28] No space left on device" in err
    assert f"; 2 finished APIs are in {result}; continue with: precheck run_ut " in err
    monkeypatch.undo()
    command = shlex.split(err.split("continue with: ")[1])
    assert command[-2:] == ["-csv_path", str(result)]
    assert main(command[1:]) == 0
    assert [r[:2] for r in rows(result)] == [[n, "pass"] for n in names]
    assert not list((tmp_path / "o").glob("*.tmp")) and not list((tmp_path / "o").glob("*.journal"))


@pytest.mark.parametrize("backend, workers", [("inprocess", 1), ("process", 2)])
def test_a_call_that_changes_directory_leaves_later_calls_as_they_were(
    tmp_path, monkeypatch, misbehaving, backend, workers
):
    """An API that runs os.chdir('/') before the others of a dump named by a relative path: every later row is
    graded as in a run without it (their files were looked for under /: in-process the run ended, unable to reread
    its dump; in a pool the later rows differed)."""
    source = real_dump_json("mlp_fp32_tensor")
    doc = json.loads(source.read_text())
    first = doc["data"]["Functional.linear.0.forward"]["input_args"][0]
    chdir = {"Torch.precheck_chdir.0.forward": {"input_args": [first], "input_kwargs": {}, "output": [first]}}
    clean = run_ut(source, tmp_path / "clean", device="cpu", workers=workers, keep_results=True)
    doc["data"] = {**chdir, **doc["data"]}
    link_tensor_data(source.parent / "dump_tensor_data", tmp_path / "dump")
    (tmp_path / "dump" / "dump.json").write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)
    summary = run_ut(
        Path("dump/dump.json"), Path("out"), device="cpu", workers=workers, backend=backend, keep_results=True
    )
    got = {r.name: (r.forward, r.backward, r.message) for r in summary.results}
    assert got.pop("Torch.precheck_chdir.0")[0] == "pass", summary.results[0].message
    assert got == {r.name: (r.forward, r.backward, r.message) for r in clean.results}


def test_a_working_directory_that_cannot_be_opened_costs_no_row(tmp_path, monkeypatch):
    """Each case returns to the working directory through a handle on it; where that cannot be opened (a user in a
    folder they may enter but not read: O_RDONLY needs read permission) every case raised PermissionError, where
    before the handle every case ran. Simulated: root reads any folder."""
    source = real_dump_json("mlp_fp32_tensor")
    clean = run_ut(source, tmp_path / "clean", device="cpu", workers=1, backend="inprocess", keep_results=True)
    real_open = os.open

    def refused_here(path, flags, *args, **kwargs):
        if path == ".":
            raise PermissionError(13, "Permission denied", ".")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refused_here)
    summary = run_ut(source, tmp_path / "out", device="cpu", workers=1, backend="inprocess", keep_results=True)
    got = {r.name: (r.forward, r.backward, r.message) for r in summary.results}
    assert got == {r.name: (r.forward, r.backward, r.message) for r in clean.results}


def test_only_a_case_small_enough_to_wait_in_a_sockets_buffer_is_queued_behind_a_busy_worker():
    """A queued case waits in the socket while its worker is busy: one larger than the buffer (macOS: 8 KiB) would
    block the run's send, and the run would read no other worker's result meanwhile. It waits for a free worker."""
    from collections import deque
    from multiprocessing import Pipe

    from precheck.dump.decode import Case
    from precheck.scheduling.process import QUEUED_BYTES, Supervisor, _Worker

    def case(name: str, size: int = 0) -> Case:
        return Case(name=name, api="Torch.add", order=0, args=("x" * size,))

    supervisor = object.__new__(Supervisor)  # no worker process: _queue only sends to their pipes
    supervisor._large = None
    ends = [Pipe() for _ in range(2)]
    workers = [_Worker(process=None, conn=ours, case=case(f"running{i}")) for i, (ours, _) in enumerate(ends)]
    large = case("large", QUEUED_BYTES)
    pending = deque([large, case("next"), case("after")])
    supervisor._queue(workers, pending, iter(()), ahead=3)
    assert [w.queued for w in workers] == [None, None] and pending[0] is large
    assert not any(theirs.poll() for _, theirs in ends)  # nothing sent
    pending.popleft()  # taken by a free worker
    pending.extend([case("third"), case("fourth")])  # one more than decoded ahead: a dead worker's case handed back
    supervisor._queue(workers, pending, iter(()), ahead=3)
    assert [w.queued.name for w in workers] == ["next", "after"]
    assert [theirs.recv().name for _, theirs in ends] == ["next", "after"]  # each queued case sent, whole
