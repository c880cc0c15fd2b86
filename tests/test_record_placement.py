"""``precheck.record`` placed as msprobe's guide places its PrecisionDebugger: made before the model, started and
stopped around each step. A function the model took from torch when it was built is recorded, and nothing outside
start() and stop() is."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import precheck


class _Activation(nn.Module):
    """transformers' GELUActivation: it keeps the function it is given when the model is built."""

    def __init__(self) -> None:
        super().__init__()
        self.act = F.gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x)


def _names(dump_json: Path) -> list[str]:
    return list(json.loads(dump_json.read_text(encoding="utf-8"))["data"])


def test_a_recorder_made_before_the_model_records_what_the_model_kept_and_only_between_start_and_stop(
    tmp_path: Path,
) -> None:
    original = F.gelu
    recorder = precheck.record(tmp_path, steps=[1])
    model = nn.Sequential(nn.Linear(4, 4), _Activation())
    x = torch.randn(2, 4)
    for _ in range(3):
        model(x).sum().backward()  # before start(): not recorded
        recorder.start()
        model(x).sum().backward()
        recorder.stop()
        torch.relu(x)  # after stop(): not recorded
        recorder.step()
    (dump_json,) = recorder.written
    assert dump_json.parent.parent.name == "step1"
    assert _names(dump_json) == [
        "Functional.linear.0.forward",
        "Functional.gelu.0.forward",
        "Tensor.sum.0.forward",
        "Tensor.sum.0.backward",
        "Functional.gelu.0.backward",
        "Functional.linear.0.backward",
    ]
    assert F.gelu is original  # the step() that ended the last chosen step took the wrappers off


def _data_names(value: object) -> list[str]:
    if isinstance(value, dict):
        own = [value["data_name"]] if isinstance(value.get("data_name"), str) else []
        return own + [n for v in value.values() for n in _data_names(v)]
    return [n for v in value for n in _data_names(v)] if isinstance(value, list) else []


def test_a_call_that_raises_leaves_no_record_and_no_file(tmp_path: Path) -> None:
    """A program's own fallback (a call that raises, caught), and torch's non-reentrant checkpoint, whose
    recomputation stops early by raising through the call it is in."""
    layer = nn.Linear(4, 4)
    x = torch.randn(2, 4, requires_grad=True)
    with precheck.record(tmp_path) as recorder:
        try:
            torch.mm(x, x)
        except RuntimeError:
            pass
        y = torch.utils.checkpoint.checkpoint(lambda t: F.gelu(layer(t)).exp(), x, use_reentrant=False)
        y.sum().backward()
    (dump_json,) = recorder.written
    names = _data_names(json.loads(dump_json.read_text(encoding="utf-8"))["data"])
    assert sorted(p.name for p in (dump_json.parent / "dump_tensor_data").iterdir()) == sorted(names)
