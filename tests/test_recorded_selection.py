"""Recorded outputs that cannot be graded are said on their rows, never a silent pass (issue 50, items 1 and 4).

A selection's recorded indices are rewritten into the input values they select before grading (api_registry/
canonical.py); an index outside [0, size) selects nothing (and Python reads a negative one from the end): it is an
error row naming the index, where it sits and the valid range, while the values beside it are still graded. A
recorded output whose file is torn or of another dtype than its record, or one the call does not make, is a bad
record: an error row of a default run saying which and why."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import tensor_rec

from precheck.execution.options import CheckOptions
from precheck.frames import load
from precheck.run_ut import run_ut

X = torch.randn(16, generator=torch.Generator().manual_seed(0))
M = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))


def _rec(t: torch.Tensor, data: Path, name: str) -> dict:
    """One tensor as msprobe's tensor mode records it: its statistics and its file."""
    torch.save(t, data / name)
    s = t.double()
    stats = {"Max": s.max().item(), "Min": s.min().item(), "Mean": s.mean().item(), "Norm": s.norm().item()}
    return tensor_rec(str(t.dtype), tuple(t.shape), data_name=name, **stats)


def _dump(root: Path, calls: list[tuple[str, list, list[torch.Tensor]]]) -> Path:
    """A tensor-mode dump of forward records: (API, its arguments, its recorded outputs)."""
    data = root / "dump_tensor_data"
    data.mkdir(parents=True)
    records = {}
    for api, args, outputs in calls:
        encoded = [_rec(a, data, f"{api}.forward.input.{i}.pt") if isinstance(a, torch.Tensor) else a
                   for i, a in enumerate(args)]  # fmt: skip
        recorded = [_rec(o, data, f"{api}.forward.output.{i}.pt") for i, o in enumerate(outputs)]
        records[f"{api}.forward"] = {"input_args": encoded, "input_kwargs": {}, "output": recorded}
    doc = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": records}
    (root / "dump.json").write_text(json.dumps(doc))
    return root / "dump.json"


def _rows(dump: Path, out: Path, target: str) -> pd.DataFrame:
    """The details rows a user reads, by (call, output), with the API's status and Message beside each."""
    summary = run_ut(dump, out, device="cpu", workers=1, options=CheckOptions(target=target))
    return load(summary.details_path).set_index(["call", "output"])


def _with(index: torch.Tensor, place: tuple, value: int) -> torch.Tensor:
    index = index.clone()
    index[place] = value
    return index


def _selections(root: Path) -> Path:
    values, order = torch.sort(X)
    top, top_at = torch.topk(X, 4)
    biggest, biggest_at = torch.max(M, 1)
    last_is_max = torch.cat([X[:-1], torch.tensor([10.0])])  # argmax -1 is the right value read from the end
    return _dump(
        root,
        [
            ("Torch.sort.0", [X], [values * 2, _with(order, (3,), 99)]),
            ("Torch.topk.0", [X, {"type": "int", "value": 4}], [top, _with(top_at, (1,), -3)]),
            ("Torch.max.0", [M, {"type": "int", "value": 1}], [biggest, _with(biggest_at, (2,), 1000)]),
            ("Torch.argmax.0", [last_is_max], [torch.tensor(-1)]),
            ("Torch.sort.1", [X], [values, order]),  # a sound record: still a pass
        ],
    )


WRONG_INDEX = {
    "Torch.sort.0": (1, "1 of 16 (6.2%) indices outside [0, 16) (the size of dim 0 of the input, of shape (16,)): "
                        "the first is 99 at index (3,)"),
    "Torch.topk.0": (1, "1 of 4 (25.0%) indices outside [0, 16) (the size of dim 0 of the input, of shape (16,)): "
                        "the first is -3 at index (1,)"),
    "Torch.max.0": (1, "1 of 4 (25.0%) indices outside [0, 8) (the size of dim 1 of the input, of shape (4, 8)): "
                       "the first is 1000 at index (2,)"),
    "Torch.argmax.0": (0, "1 of 1 (100.0%) indices outside [0, 16) (the 16 elements of the input, flattened): "
                          "the first is -1 at index ()"),
}  # fmt: skip


@pytest.mark.parametrize("target", ["device", "recorded"])
def test_a_recorded_index_outside_its_input_is_an_error_row_and_the_values_are_still_graded(tmp_path, target):
    # Before: the rewrite of indices into values raised, so a default run graded no recorded output (pass, empty
    # Message) and --target recorded was a SKIP blaming precheck; argmax's -1 read the last element and passed.
    rows = _rows(_selections(tmp_path / "dump"), tmp_path / "out", target)
    for call, (place, said) in WRONG_INDEX.items():
        row = rows.loc[(call, place)]
        assert row["status"] == "error" and row["forward_status"] == "error", (call, row["message"])
        assert row["reason"] == "index_out_of_range" and bool(row["recorded"])
        assert f"out of range: {said}" in row["message"]
        assert f"forward.output.{place}: " in row["api_message"] and said in row["api_message"]
    values = rows.loc[("Torch.sort.0", 0)]  # recorded doubled: graded beside the wrong index, an error
    assert values["status"] == "error" and "worse than an honest fp32 kernel" in values["message"]
    assert rows.loc[("Torch.topk.0", 0), "status"] == "pass" and rows.loc[("Torch.max.0", 0), "status"] == "pass"
    assert set(rows.loc["Torch.sort.1", "status"]) == {"pass"} and set(rows.loc["Torch.sort.1", "reason"]) == {"passed"}


def test_a_default_run_names_the_index_output_of_training_beside_a_replay_that_passes(tmp_path):
    rows = _rows(_selections(tmp_path / "dump"), tmp_path / "out", "device")
    message = rows.loc[("Torch.argmax.0", 0), "message"]
    assert message.startswith("its recorded value is out of range: ")
    assert message.endswith("this machine's replay on cpu is not (pass): the kernel that ran in training (or the "
                            "program around it) computed it")  # fmt: skip


def _bad_records(root: Path) -> Path:
    values, order = torch.sort(X)
    dump = _dump(
        root,
        [
            ("Torch.sort.0", [X], [values, order]),  # its values' file torn below
            ("Torch.sort.1", [X], [values, order.int()]),  # its record says int64 below: the file holds int32
            ("Functional.relu.0", [X], [torch.relu(X), torch.relu(X)]),  # an output relu does not make
            ("Functional.relu.1", [X], [torch.relu(X)]),  # a sound record: still a pass
        ],
    )
    torn = root / "dump_tensor_data" / "Torch.sort.0.forward.output.0.pt"
    torn.write_bytes(torn.read_bytes()[: torn.stat().st_size // 2])
    doc = json.loads(dump.read_text())
    doc["data"]["Torch.sort.1.forward"]["output"][1]["dtype"] = "torch.int64"
    dump.write_text(json.dumps(doc))
    return dump


def test_a_recorded_output_a_replay_cannot_grade_is_a_bad_record_on_its_row(tmp_path):
    # Before: each was silently not graded, its row a pass with an empty Message.
    rows = _rows(_bad_records(tmp_path / "dump"), tmp_path / "out", "device")
    bad = {
        ("Torch.sort.0", 0): "a bad record: Torch.sort.0.forward.output.0.pt: unreadable: not a torch.save archive",
        ("Torch.sort.1", 1): "a bad record: Torch.sort.1.forward.output.1.pt: dtype torch.int32 does not match the "
                             "recorded torch.int64; this machine's replay on cpu is pass",
        ("Functional.relu.0", 1): "a bad record: it holds 2 outputs, the call makes 1; recorded output 1 has no "
                                  "counterpart, and no recorded output is graded (which output is which is unknown)",
    }  # fmt: skip
    for place, said in bad.items():
        row = rows.loc[place]
        assert row["status"] == "error" and row["forward_status"] == "error", (place, row["message"])
        assert row["reason"] == "bad_recorded_output" and bool(row["recorded"])
        assert row["message"].startswith("its recorded value is not graded, ") and said in row["message"]
        assert f"forward.output.{place[1]}: its recorded value is not graded, a bad record: " in row["api_message"]
    # the sort's other output, whose file is sound, is still graded and passes
    assert rows.loc[("Torch.sort.0", 1), "status"] == "pass" and rows.loc[("Torch.sort.1", 0), "status"] == "pass"
    assert rows.loc[("Functional.relu.1", 0), "status"] == "pass"
