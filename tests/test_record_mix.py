"""``precheck.record(level="mix")`` writes what msprobe 26.2 writes at its mix level, proved against msprobe's own
dumps without msprobe installed.

tests/data/record_mix/mix_model.py is a training step through the mix level's traps (nested paths, a module
called twice, keyword arguments, a module whose input needs no gradient, a frozen weight, a tuple output, low-risk
calls inside modules); tests/data/record/make_fixtures.py recorded it with msprobe at level mix into mix_tensor and
mix_statistics (dump.json and construct.json; tensor files left out for size). The test records the same step with
``precheck.record`` and wants the same records in the same order (module, parameters_grad and API records
interleaved as msprobe interleaves them), every non-float field equal, float statistics within a few units in the
last place, the same construct.json, and a tensor file for each ``data_name``; run_ut grades the API records as it
grades the L1 dump of the step and counts the module records it does not replay.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import DATA
from test_record import _assert_same, _doc, _folder, _module

import precheck
from precheck.run_ut import run_ut

MIX = DATA / "record_mix"


def _record(root: Path, task: str, level: str = "mix") -> Path:
    _, run = _module(MIX / "mix_model.py").build(torch.float32)
    with precheck.record(root, step=0, task=task, level=level):
        run().backward()
    return _folder(root)


@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_a_mix_step_is_recorded_as_msprobe_records_it(tmp_path, task):
    theirs = _folder(MIX / f"mix_{task}")
    ours = _record(tmp_path / "dump", task)
    mine, msprobe = _doc(ours), _doc(theirs)
    assert (
        [mine[k] for k in ("task", "level", "framework")]
        == [task, "mix", "pytorch"]
        == [msprobe[k] for k in ("task", "level", "framework")]
    )
    assert list(mine["data"]) == list(msprobe["data"])
    for name in msprobe["data"]:
        _assert_same(mine["data"][name], msprobe["data"][name], name)
    construct = [json.loads((f / "construct.json").read_text()) for f in (ours, theirs)]
    assert list(construct[0].items()) == list(construct[1].items())
    stacked = {n for names, _ in json.loads((ours / "stack.json").read_text()).values() for n in names}
    assert stacked == {n for n in msprobe["data"] if ".forward" in n}  # module calls too, named as in dump.json
    if task == "tensor":
        names = {d["data_name"] for d in _tensors(msprobe["data"])}
        assert {p.name for p in (ours / "dump_tensor_data").iterdir()} == names
    else:
        assert not (ours / "dump_tensor_data").exists()


def _tensors(value: object) -> list[dict]:
    if isinstance(value, dict):
        if "data_name" in value:
            return [value]
        value = list(value.values())
    return [t for v in value for t in _tensors(v)] if isinstance(value, list) else []


def test_run_ut_grades_the_api_records_of_a_mix_dump_and_counts_its_module_records(tmp_path):
    mix, l1 = _record(tmp_path / "mix", "tensor"), _record(tmp_path / "l1", "tensor", level="L1")
    modules = [n for n in _doc(mix)["data"] if n.startswith("Module.")]
    api = [n for n in _doc(mix)["data"] if not n.startswith("Module.")]
    assert api == list(_doc(l1)["data"])  # the API records are the L1 level's, in order
    runs = [run_ut(d / "dump.json", tmp_path / f"out_{d.parent.parent.name}", device="cpu") for d in (mix, l1)]
    assert [[(r.name, r.forward, r.backward) for r in run.results] for run in runs][0] == [
        (r.name, r.forward, r.backward) for r in runs[1].results
    ]
    assert runs[0].module_records == len(modules) == 37 and runs[1].module_records == 0
    assert f"{len(modules)} module (L0) records are not replayed" in runs[0].describe()


def test_the_command_records_modules_at_level_mix_each_step_counted_afresh(tmp_path):
    train = DATA / "train_step.py"  # the MLP trained with SGD, a program that knows nothing of precheck
    command = [sys.executable, "-m", "precheck", "record", "-o", str(tmp_path / "dump"), "--level", "mix"]
    done = subprocess.run(
        [*command, "--steps", "0", "1", "--", sys.executable, str(train), "2"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    docs = [_doc(f.parent) for f in sorted((tmp_path / "dump").glob("step*/*/dump.json"))]
    assert [doc["level"] for doc in docs] == ["mix", "mix"]
    for doc in docs:  # the model the program calls is not a record; its modules are, numbered from 0 each step
        modules = [n for n in doc["data"] if n.startswith("Module.")]
        assert modules[:3] == [
            "Module.l1.Linear.forward.0",
            "Module.ln.LayerNorm.forward.0",
            "Module.l2.Linear.forward.0",
        ]
        assert "Module.l1.Linear.parameters_grad.0" in modules and len(modules) == 9


def test_an_online_check_at_mix_keeps_no_tensor_of_a_module_record(tmp_path):
    """--check grades API calls and releases their tensors; module records are graded by nothing: none kept."""
    _, run = _module(MIX / "mix_model.py").build(torch.float32)
    with precheck.record(tmp_path, step=0, level="mix", check=True) as recorder:
        run().backward()
        kept = [p.name for p in recorder.store.iterdir() if p.name.startswith("Module.")]
    assert kept == []
    (dump,) = recorder.written
    assert sum(n.startswith("Module.") for n in _doc(dump.parent)["data"]) == 37
    assert list(tmp_path.glob("accuracy_checking_result_*.csv"))
