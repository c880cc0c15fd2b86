"""``precheck record`` of pipeline-parallel steps and of calls on fake tensors, as msprobe 26.2 records them (issue 51,
items 2 and 6). The steps are tests/data/sharded/pipeline_step.py (torch.distributed.pipelining's GPipe and 1F1B,
and stages exchanging by hand with batch_isend_irecv) and loss_parallel_step.py (cross_entropy under
``loss_parallel()``, which propagates shapes on FakeTensors); make_pipeline_record.py recorded them by msprobe:
each rank's record names (pipeline_msprobe_names.json) and statistics dumps."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import DATA

import precheck
from precheck.core.older_python import zip_strict
from precheck.core.reasons import Reason
from precheck.frames import reasons
from precheck.run_files.csv_files import read_csv_rows
from precheck.run_ut import run_ut

SHARDED = DATA / "sharded"
MSPROBE_NAMES = json.loads((SHARDED / "pipeline_msprobe_names.json").read_text(encoding="utf-8"))
HAND = SHARDED / "pipeline_hand_statistics_msprobe" / "step0"
LOSS_PARALLEL = SHARDED / "loss_parallel_statistics_msprobe" / "step0"
FAKE = "torch._subclasses.fake_tensor.FakeTensor"
ROOT = Path(precheck.__file__).resolve().parent.parent  # this checkout's precheck, in every process started here


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}


def _start(out: Path, script: str, *args: str, recorded: bool = False) -> subprocess.Popen:
    """``script`` of tests/data/sharded run with ``args`` (``OUT``: ``out``), as it is or under ``precheck record``
    (statistics); in a session of its own, so that a step that hangs is ended with its ranks."""
    out.mkdir()
    command = [sys.executable, str(SHARDED / script), *(str(out) if a == "OUT" else a for a in args)]
    if recorded:
        record = [sys.executable, "-m", "precheck", "record", "-o", str(out / "dump"), "--task", "statistics", "--"]
        command = [*record, *command]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), start_new_session=True
    )


def _finish(*runs: subprocess.Popen) -> None:
    for run in runs:
        try:
            _, err = run.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            _, err = run.communicate()
            pytest.fail(f"the step hung: {err[-3000:]}")
        assert run.returncode == 0, err[-3000:]


def _dump(step: Path, rank: int) -> dict:
    return json.loads((step / f"rank{rank}" / "dump.json").read_text(encoding="utf-8"))


def _losses(out: Path) -> list[str]:
    return [(out / f"loss{rank}.txt").read_text() for rank in (0, 1)]


@pytest.mark.parametrize("kind", ["gpipe", "1f1b", "hand"])
def test_each_rank_of_a_pipeline_step_has_msprobes_names_and_trains_as_without_precheck(
    tmp_path: Path, kind: str
) -> None:
    """Before: step 0 started at the rank's first module forward, so stage 1 lost its receives and the schedule's
    shape inference before it (gpipe: rank 0 had 46 records of msprobe's 48, rank 1 66 of 74, its
    batch_isend_irecv.2 named .0); and the hand exchange hung at the step's end, waiting again for a gloo receive
    the program had waited (or for a send the program waits after the optimizer's update)."""
    bare = _start(tmp_path / "bare", "pipeline_step.py", kind, "OUT")
    recorded = _start(tmp_path / "recorded", "pipeline_step.py", kind, "OUT", recorded=True)
    _finish(bare, recorded)
    assert _losses(tmp_path / "recorded") == _losses(tmp_path / "bare")  # bit for bit: float.hex
    for rank in (0, 1):
        doc = _dump(tmp_path / "recorded" / "dump" / "step0", rank)
        assert "partial" not in doc
        assert list(doc["data"]) == MSPROBE_NAMES[kind][f"rank{rank}"], rank


def test_batch_isend_irecv_holds_its_ops_as_msprobe_writes_them(tmp_path: Path) -> None:
    """Before: each P2POp of batch_isend_irecv's list was written null. Placed as msprobe's debugger, every record of
    the hand exchange is msprobe's (statistics within rounding: msprobe's venv is another build), but a receive's
    output: read once its work completed, where msprobe read it when the call returned (the buffer not yet
    filled)."""
    _finish(_start(tmp_path / "out", "pipeline_step.py", "hand", "OUT", "--library", "tensor"))
    for rank in (0, 1):
        ours, theirs = _dump(tmp_path / "out" / "dump" / "step0", rank)["data"], _dump(HAND, rank)["data"]
        assert list(ours) == list(theirs)
        for name, record in theirs.items():
            mine = _without_files(ours[name])
            if name.startswith("Distributed.batch_isend_irecv."):
                for op in record["input_args"][0]:
                    assert set(op) == {"class_type", "tensor", "op", "peer", "tag", "group_id"}
                for mine_op, their_op in zip_strict(mine["output"][0], record["output"][0]):
                    if their_op["op"] == "irecv":  # statistics of the received values, msprobe's of the buffer
                        mine_op["tensor"] = their_op["tensor"]
            assert _alike(mine, record), (name, mine, record)
    data = tmp_path / "out" / "dump" / "step0" / "rank1" / "dump_tensor_data"
    received = torch.load(data / "Distributed.batch_isend_irecv.0.forward.output.0.0.pt", weights_only=True)
    sent = _dump(HAND, 0)["data"]["Distributed.batch_isend_irecv.0.forward"]["input_args"][0][0]["tensor"]
    assert received.shape == (8, 16) and received.max().item() == sent["Max"]  # stage 0's activations, as sent


def _alike(ours: object, theirs: object) -> bool:
    """The same record, its statistics within float32's rounding (msprobe's venv computes gelu in other bits)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(_alike(ours[k], theirs[k]) for k in ours)
    if isinstance(ours, list) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(_alike(a, b) for a, b in zip_strict(ours, theirs))
    if isinstance(ours, float) and isinstance(theirs, float):
        return math.isclose(ours, theirs, rel_tol=1e-5, abs_tol=1e-6)
    return ours == theirs and type(ours) is type(theirs)


def _without_files(record: object) -> object:
    """A record of the tensor task as the statistics task writes it (no data_name)."""
    if isinstance(record, dict):
        return {k: _without_files(v) for k, v in record.items() if k != "data_name"}
    if isinstance(record, list):
        return [_without_files(v) for v in record]
    return record


def test_a_call_on_fake_tensors_is_recorded_as_msprobe_writes_it_and_the_dump_is_whole(tmp_path: Path) -> None:
    """Before: reading a FakeTensor's statistics raised inside the call (DataDependentOutputException), the call
    was left out and the dump said partial ("1 call(s) the recorder failed to record")."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with precheck.record(tmp_path / "dump") as recorder, FakeTensorMode() as mode:
        a = mode.from_tensor(torch.ones(2, 3))
        torch.add(a, a)
    doc = json.loads(recorder.written[0].read_text(encoding="utf-8"))
    assert "partial" not in doc
    fake = {"type": FAKE, "dtype": "torch.float32", "shape": [2, 3], "Max": None, "Min": None, "Mean": None}
    fake.update(Norm=None, requires_grad=False)
    assert doc["data"]["Torch.add.0.forward"] == {"input_args": [fake, fake], "input_kwargs": {}, "output": [fake]}
    files = recorder.written[0].parent / "dump_tensor_data"
    assert not files.exists() or not any(files.iterdir())  # a FakeTensor has no values to save
    run_ut(recorder.written[0], tmp_path / "run", device="cpu", workers=1)
    rows = _rows(tmp_path / "run")
    assert rows["Torch.add.0"][0] == "SKIP"
    assert rows["Torch.add.0"][2].startswith("no data: nothing to check (input_args[0] is a FakeTensor")
    (details,) = (tmp_path / "run").glob("accuracy_checking_details_*.csv")
    assert reasons.read(details)["Torch.add.0.forward.output.0"].reason == Reason.SKIP_NO_DATA


def _rows(out: Path) -> dict[str, tuple[str, str, str]]:
    (result,) = out.glob("accuracy_checking_result_*.csv")
    _, found = read_csv_rows(result)
    return {r["API name"]: (r["Forward Test Success"], r["Backward Test Success"], r["Message"]) for r in found}


def test_loss_parallel_is_recorded_as_msprobe_records_it(tmp_path: Path) -> None:
    """msprobe's dump of the loss_parallel step, record for record (7 calls on FakeTensors among them, statistics
    within rounding); before, the recording lost those 7 and said partial."""
    _finish(_start(tmp_path / "out", "loss_parallel_step.py", "OUT", "--library", "statistics"))
    for rank in (0, 1):
        doc = _dump(tmp_path / "out" / "dump" / "step0", rank)
        assert "partial" not in doc
        assert _alike(doc["data"], _dump(LOSS_PARALLEL, rank)["data"]), rank


def test_run_ut_says_msprobes_calls_on_fake_tensors_have_no_data(tmp_path: Path) -> None:
    """Before: each was SKIP "bad record: input_args[0]: unsupported argument type 'torch._subclasses.fake_tensor.
    FakeTensor'"."""
    recorded = _dump(LOSS_PARALLEL, 0)["data"]
    fakes = {name.rsplit(".", 1)[0] for name, record in recorded.items() if FAKE in json.dumps(record)}
    assert len(fakes) == 7
    run_ut(LOSS_PARALLEL / "rank0" / "dump.json", tmp_path, device="cpu", workers=1)
    rows = _rows(tmp_path)
    (details,) = tmp_path.glob("accuracy_checking_details_*.csv")
    codes = reasons.read(details)
    for name in fakes:
        assert rows[name][0] == "SKIP" and rows[name][2].startswith("no data: nothing to check"), rows[name]
        assert codes[f"{name}.forward.output.0"].reason == Reason.SKIP_NO_DATA
    assert not [n for n, row in rows.items() if "bad record" in row[2]]
