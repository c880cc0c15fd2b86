"""``precheck record --``'s step 0 is the first iteration: it starts at the model's first forward, not at the
import of torch, so the model's build is not in it and its names are those of the iteration recorded in-process
(precheck.recording.first_forward)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import precheck
from precheck.recording.launch import run_recorded

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
