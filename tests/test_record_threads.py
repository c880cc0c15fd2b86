"""A recorded program's threads and forked children.

Threads: calls of several threads, in flight at once, are each recorded once into one dump.json, numbered per
name across the threads (msprobe's one counter per name), their tensor files all written. The calls are made to
overlap whatever the scheduler does: each thread waits, inside a recorded ``Tensor.map_``, until every thread is
inside one (before the fix, the threads took one number between them and their writes interleaved in dump.json).

Forks: a child forked by the recorded program that exits through atexit leaves the parent's dump alone (before the
fix it ran the parent's recorder.close(): the statistics task wrote the closing brackets into the parent's
dump.json, the tensor task waited for ever for a writer thread the child has not).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from test_record import _folder

import precheck
from precheck.recording.online import OnlineCheck
from precheck.recording.session import Recorder

THREADS = 4
ROUNDS = 6
WIDTH = 8


class _Meet(nn.Module):
    """Waits, inside a recorded call, until every thread is inside one."""

    def __init__(self) -> None:
        super().__init__()
        self.barrier = threading.Barrier(THREADS, timeout=60)  # a call that never overlaps fails, never hangs

    def forward(self, cell: torch.Tensor) -> torch.Tensor:
        return cell.map_(cell, self._meet)

    def _meet(self, a: float, b: float) -> float:
        self.barrier.wait()
        return a


class _Step(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.meet = _Meet()
        self.linear = nn.Linear(WIDTH, WIDTH, bias=False)
        nn.init.ones_(self.linear.weight)

    def forward(self, x: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        self.meet(cell)
        return self.linear(x).relu().sum()


def _load(path: Path) -> tuple[dict, list[str]]:
    """dump.json read (it must be valid JSON), and the keys any object of it has twice (a record written twice)."""
    twice: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict:
        twice.extend(k for k, n in Counter(k for k, _ in items).items() if n > 1)
        return dict(items)

    return json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=pairs), twice


def _data_names(value: object) -> list[str]:
    if isinstance(value, dict):
        own = [value["data_name"]] if "data_name" in value else []
        return own + [n for v in value.values() for n in _data_names(v)]
    if isinstance(value, list):
        return [n for v in value for n in _data_names(v)]
    return []


def _record_threads(root: Path, level: str) -> Path:
    model = _Step()
    grad = level == "L1"  # the mix level's parameters_grad of a weight the threads share has no one order

    def work(i: int) -> None:
        x, cell = torch.full((2, WIDTH), float(i + 1)), torch.zeros(1)
        with torch.set_grad_enabled(grad):
            for _ in range(ROUNDS):
                loss = model(x, cell)
                if grad:
                    loss.backward()  # backward records from every thread too

    with precheck.record(root, task="tensor", level=level), ThreadPoolExecutor(THREADS) as pool:
        for done in [pool.submit(work, i) for i in range(THREADS)]:
            done.result()
    return _folder(root)


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_calls_of_several_threads_at_once_are_each_recorded_once(tmp_path, level):
    folder = _record_threads(tmp_path / "dump", level)
    doc, twice = _load(folder / "dump.json")
    assert not twice
    calls = THREADS * ROUNDS
    apis = ["Tensor.map_", "Functional.linear", "Tensor.relu", "Tensor.sum"]
    if level == "L1":  # every call's backward too, each on the thread that ran it (map_'s output needs no grad)
        expected = {f"{api}.{n}.{kind}" for api in apis for n in range(calls) for kind in ("forward", "backward")}
        expected -= {f"Tensor.map_.{n}.backward" for n in range(calls)}
    else:
        modules = ["Module.meet._Meet", "Module.linear.Linear"]
        expected = {f"{name}.{n}.forward" for name in apis for n in range(calls)}
        expected |= {f"{module}.forward.{n}" for module in modules for n in range(calls)}
    assert set(doc["data"]) == expected
    for name, record in doc["data"].items():  # a record's input and output are of one call: linear's is 8 x
        if name.startswith("Functional.linear.") and name.endswith(".forward"):
            x, out = record["input_args"][0]["Max"], record["output"][0]["Max"]
            assert out == WIDTH * x and x in range(1, THREADS + 1), name
    names = _data_names(doc["data"])
    assert len(names) == len(set(names)) and {p.name for p in (folder / "dump_tensor_data").iterdir()} == set(names)


FORKING = """
import os, sys
import torch
import precheck
x = torch.randn(4, 4, requires_grad=True)
for task in ("statistics", "tensor"):
    with precheck.record(task, task=task):
        y = torch.nn.functional.relu(x @ x)
        pid = os.fork()
        if pid == 0:
            torch.nn.functional.gelu(x)  # the child's own call: not the step's
            sys.exit(0)  # out of the block (the recorder's close) and through atexit
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        torch.nn.functional.silu(y).sum().backward()
"""


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``command`` run to its end; one that hangs (and every process it started) is killed and fails the test."""
    with subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:  # fmt: skip
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail(f"{' '.join(command[-2:])} hung")
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def test_a_forked_child_exiting_through_atexit_leaves_the_parents_dump_whole(tmp_path):
    script = tmp_path / "forking.py"
    script.write_text(FORKING)
    done = _run([sys.executable, str(script)], tmp_path)
    assert done.returncode == 0, done.stderr
    forward = ["Tensor.__matmul__.0", "Functional.relu.0", "Functional.silu.0", "Tensor.sum.0"]
    for task in ("statistics", "tensor"):
        (path,) = (tmp_path / task).glob("step0/*/dump.json")
        doc, twice = _load(path)
        assert not twice
        assert list(doc["data"]) == [f"{n}.forward" for n in forward] + [f"{n}.backward" for n in reversed(forward)]
        names = sorted(_data_names(doc["data"]))
        data_dir = path.parent / "dump_tensor_data"
        assert names == (sorted(p.name for p in data_dir.iterdir()) if task == "tensor" else [])


def test_a_forked_child_leaves_the_online_checks_shared_memory(tmp_path):
    online = OnlineCheck(tmp_path)
    online.attach(Recorder(tmp_path))
    pid = os.fork()
    if pid == 0:  # the child: what its atexit would run, and out (never back into pytest)
        try:
            online.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert online._store is not None and online._store.path.is_dir(), "the parent's store is still being checked from"
    online.close()
    assert not online._store.path.exists()


def test_a_call_that_raises_gives_its_number_to_the_next_call(tmp_path):
    """A call is numbered when it starts (threads never share a number), yet one that raises is not counted, as
    msprobe counts a call when it returns: the next call of the name has its number."""
    a, b = torch.ones(2, 3), torch.ones(3, 2)
    with precheck.record(tmp_path / "dump", task="statistics"):
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            torch.mm(a, a)  # the program's own fallback, caught
        torch.mm(a, b)
    doc, _ = _load(_folder(tmp_path / "dump") / "dump.json")
    assert list(doc["data"]) == ["Torch.mm.0.forward"]
    assert doc["data"]["Torch.mm.0.forward"]["input_args"][1]["shape"] == [3, 2]
