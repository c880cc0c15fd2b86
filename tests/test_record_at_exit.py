"""A recorder made with ``precheck.record(...)`` and never closed (issue 46): the process that opened it closes it
at exit, as ``precheck record -- CMD`` does.

Left open, its dump.json was empty or torn, the tensor files' writer was killed mid-file, and with ``check=True``
the online check's thread aborted the exit ("terminate called without an active exception", exit 134) in 2-3 of
4 runs and left its store in /dev/shm. Four runs at once (two with a check), so that a flaky exit shows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from precheck.recording.encode import data_names
from precheck.recording.pending import Pending

PROGRAM = """
import sys, torch, precheck
check, out, code = sys.argv[1] == "check", sys.argv[2], int(sys.argv[3])
recorder = precheck.record(out, check=check)
recorder.start()
torch.manual_seed(0)
model = torch.nn.Linear(8, 4)
for _ in range(3):
    model(torch.randn(2, 8)).sum().backward()
if code < 0:
    raise RuntimeError("the program's own failure")
sys.exit(code)
"""


def test_a_library_recorder_never_closed_is_closed_at_exit_with_the_programs_exit_code(tmp_path):
    (tmp_path / "train.py").write_text(PROGRAM)
    runs = {
        f"check{i}": ("check", 3) for i in range(2)
    } | {"files": ("files", 0), "raised": ("files", -1)}  # fmt: skip
    started = {
        name: subprocess.Popen(
            [sys.executable, "train.py", how, name, str(code)],
            cwd=tmp_path,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for name, (how, code) in runs.items()
    }
    for name, run in started.items():
        _, err = run.communicate(timeout=300)
        assert run.returncode == (1 if name == "raised" else runs[name][1]), (name, err)
        assert "terminate called" not in err and "precheck: warning" not in err
        assert not list(Path("/dev/shm").glob(f"precheck-record-{run.pid}-*"))  # the check's store removed
        (dump,) = (tmp_path / name).glob("step0/*/dump.json")
        doc = json.loads(dump.read_text(encoding="utf-8"))  # whole
        assert len(doc["data"]) == 12, name
        if name == "raised":
            assert doc["partial"] == "the program ended by RuntimeError before the step did"
        else:
            assert "partial" not in doc
        if runs[name][0] == "files":  # every tensor file whole
            data = dump.parent / "dump_tensor_data"
            assert {f.name for f in data.iterdir()} == set(data_names(doc["data"])) != set()
            assert all(isinstance(torch.load(f), torch.Tensor) for f in data.iterdir())
        else:
            (result,) = (tmp_path / name).glob("accuracy_checking_result_*.csv")
            assert len(result.read_text(encoding="utf-8").splitlines()) == 1 + 6  # the step's six calls checked


@pytest.mark.skipif(not dist.is_available(), reason="a gloo process group")
def test_a_steps_end_leaves_no_callback_of_precheck_to_the_backends_thread(world_of_one: None) -> None:
    """The program's ``wait()`` returns before its future's callbacks run on gloo's thread, which takes the GIL
    for each. One still in flight when the interpreter finalizes is ended by ``pthread_exit`` inside torch's
    callback guard: the process aborted after its last line ("terminate called without an active exception").
    Here this thread keeps the GIL until it waits, as a loaded machine's starved backend thread would find it."""
    pending = Pending()
    pending.install()
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        work = dist.all_reduce(torch.ones(1_000_000), async_op=True)
        pending.add([work], lambda: None)
        future = pending._saved["get_future"][0](work)  # torch's: done before its callbacks run
        while not future.done():  # the GIL kept: gloo's thread completes the work, and its callbacks wait
            pass
        pending._done(work, waiting=True)  # the record filled, as the program's wait() fills it
        pending.finish(lambda e: None)
        held = pending.held.count()
    finally:
        sys.setswitchinterval(saved)
        pending.uninstall()
    assert held == 0
