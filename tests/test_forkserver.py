"""The fork server that pool workers come from: started early only for a dump that will likely run in a pool."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import DATA

from precheck.scheduling import forkserver


def _dump(tmp_path, tensor_bytes: int = 0, json_bytes: int = 10):
    tmp_path.mkdir()
    dump = tmp_path / "dump.json"
    with open(dump, "wb") as f:
        f.truncate(json_bytes)  # sparse: only the size is read
    data = tmp_path / "dump_tensor_data"
    data.mkdir()
    for i in range(3):
        with open(data / f"t{i}.pt", "wb") as f:
            f.truncate(tensor_bytes // 3)
    return dump


def test_a_dump_of_large_tensor_files_or_many_records_is_likely_a_pool(tmp_path):
    assert forkserver.likely_pool(_dump(tmp_path / "a", tensor_bytes=300 * 2**20))
    assert forkserver.likely_pool(_dump(tmp_path / "b", json_bytes=5 * 2**20))
    assert not forkserver.likely_pool(_dump(tmp_path / "c", tensor_bytes=2**20))


def test_the_bundled_dumps_run_in_process_without_a_server_started_for_them():
    for name in ("gpt2_bf16_tensor", "opinfo_fp32_all", "opinfo_bf16_all_stats"):
        (dump,) = (DATA / name).glob("step*/*/dump.json")
        assert not forkserver.likely_pool(dump), name


def test_an_unreadable_path_is_not_a_pool_and_not_an_error(tmp_path):
    assert not forkserver.likely_pool(tmp_path / "missing" / "dump.json")


def test_a_worker_takes_the_plugins_and_stderr_of_the_run_not_of_the_server(tmp_path, monkeypatch, capfd):
    """The server started before PRECHECK_PLUGINS was set (a library user sets it between runs): a pool's workers
    still check the plugin's API, as spawned workers did."""
    from helpers import misbehaving_env
    from test_survive import make_dump

    from precheck.run_ut import run_ut

    forkserver.start_early()
    for key, value in misbehaving_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(str(DATA.parent))
    dump = make_dump(tmp_path / "dump.json", ["Torch.precheck_slow.0", "Torch.precheck_slow.1"])
    summary = run_ut(dump, tmp_path / "out", device="cpu", workers=2, backend="process")
    assert summary.counts == {"pass": 2}


@pytest.mark.parametrize("package", ["precheck", "precheck/__init__.py"])
def test_a_pool_runs_from_a_folder_holding_a_precheck_folder(tmp_path, package):
    """The folder a user cloned precheck into (or any named ``precheck``) in the working directory: the fork
    server imported it instead of the installed package, and every worker died at start ("cannot import name
    '__version__' from 'precheck'"), ending the run after 9 s with exit code 2 and no rows."""
    from test_survive import make_dump, rows

    here = tmp_path / "here"
    (here / package).parent.mkdir(parents=True)
    if package.endswith(".py"):
        (here / package).touch()
    else:
        (here / package).mkdir()
    make_dump(here / "dump.json", ["Torch.tanh.0", "Torch.sigmoid.0", "Torch.exp.0", "Torch.abs.0"])
    command = Path(sys.executable).with_name("precheck")  # the installed command, as a user runs it
    argv = [command, "run_ut", "-q", "-d", "cpu", "--backend", "process", "-n", "2", "-api_info", "dump.json"]
    run = subprocess.run([*argv, "-o", "out"], cwd=here, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    assert "ImportError" not in run.stderr
    (result,) = (here / "out").glob("accuracy_checking_result_*.csv")
    assert sorted((r[0], r[1]) for r in rows(result)) == [
        ("Torch.abs.0", "pass"), ("Torch.exp.0", "pass"), ("Torch.sigmoid.0", "pass"), ("Torch.tanh.0", "pass")
    ]  # fmt: skip


SERVER_END = """
import atexit, sys
class Module:
    def __del__(self):
        print("taken apart", flush=True)
kept = Module()  # taken apart only by the interpreter's teardown of this module
atexit.register(print, "exit handler")  # registered before the preload, as multiprocessing's own is
import precheck.scheduling.preload
print("end of the server's work", flush=True)
"""


def test_the_fork_server_runs_its_exit_handlers_then_leaves_without_the_interpreters_teardown():
    """The server held the run's stdout and stderr through its teardown of torch, 0.4-0.5 s after the run had
    ended, which a reader of the run's pipe (a CI log, ``| tee``) waited for. Its exit handlers still run: it leaves
    only after them."""
    done = subprocess.run([sys.executable, "-c", SERVER_END], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["end of the server's work", "exit handler"]
