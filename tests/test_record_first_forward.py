"""``precheck record --``'s step 0 is the first iteration: it starts at the model's first forward, not at the
import of torch, so the model's build is not in it and its names are those of the iteration recorded in-process
(precheck.recording.first_forward). A recording its program stops mid-step says it is partial."""

from __future__ import annotations

import importlib.util
import json
import signal
import sys
from pathlib import Path

import pytest

import precheck
from precheck.recording.launch import run_recorded
from precheck.run_ut import run_ut

PROGRAM = Path(__file__).parent / "data" / "built_then_trained.py"


def _names(dump_json: Path) -> list[str]:
    return list(json.loads(dump_json.read_text(encoding="utf-8"))["data"])


def test_step_0_of_the_command_is_the_first_iteration_named_as_an_in_process_recording_of_it(tmp_path: Path) -> None:
    done = run_recorded(tmp_path / "cli", [sys.executable, str(PROGRAM), "2"])
    assert done.returncode == 0
    (cli,) = done.dumps
    spec = importlib.util.spec_from_file_location("built_then_trained", PROGRAM)
    program = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(program)  # type: ignore[union-attr]
    model, _, x = program.build()
    with precheck.record(tmp_path / "lib") as recorder:
        model(x).backward()
    names = _names(cli)
    assert names == _names(recorder.written[0])
    assert names[0] == "Functional.linear.0.forward" and not any("normal_" in n or "fill_" in n for n in names)
    files = sorted(p.name for p in (cli.parent / "dump_tensor_data").iterdir())
    assert files == sorted(p.name for p in (recorder.written[0].parent / "dump_tensor_data").iterdir())


def test_a_recording_stopped_mid_step_says_it_is_partial_and_run_ut_warns(tmp_path: Path) -> None:
    program = Path(__file__).parent / "data" / "stopped_mid_step.py"
    done = run_recorded(tmp_path / "dump", [sys.executable, str(program)])
    assert done.signal == signal.SIGINT  # the program ended as Ctrl-C ends it
    (dump_json,) = done.dumps
    why = "the program ended by KeyboardInterrupt before the step did"
    assert done.written.cut == {dump_json: why}
    doc = json.loads(dump_json.read_text(encoding="utf-8"))  # closed whole: msprobe's readers take it
    assert list(doc["data"]) == ["Functional.linear.0.forward", "Tensor.relu.0.forward", "Tensor.sum.0.forward"]
    assert doc["partial"] == why
    with pytest.warns(UserWarning, match=f"a partial recording \\({why}\\)") as told:
        summary = run_ut(dump_json, tmp_path / "out", workers=1)
    assert len(told) == 1 and summary.counts["pass"] == 3
    (sidecar,) = (tmp_path / "out").glob("*.run.json")
    assert json.loads(sidecar.read_text(encoding="utf-8"))["partial"] == f"the dump is partial: {why}"
