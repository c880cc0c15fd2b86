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
