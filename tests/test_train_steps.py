"""Training steps as users write them (issue 37), recorded by precheck.record into tests/data/record/ (its
train_steps.py and make_fixtures.py): clip_grad_norm_'s ``Torch._foreach_norm`` is graded output by output, and
a GradScaler step whose fp16 gradients overflow by design is reported as an overflow, not as an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from precheck.run_ut import run_ut

RECORD = Path(__file__).parent / "data" / "record"


def _dump(name: str) -> Path:
    (found,) = (RECORD / name / "step0").glob("proc*/dump.json")
    return found


def _details(summary) -> dict[str, object]:
    return {d.name: d for r in summary.results for d in r.details}


@pytest.mark.parametrize("step", ["clip_fp32_tensor", "scaler_fp16_tensor"])
def test_clip_grad_norm_s_foreach_norm_is_graded_output_by_output(step, tmp_path):
    summary = run_ut(_dump(step), tmp_path, device="cpu", workers=1)
    (norm,) = (r for r in summary.results if r.name == "Torch._foreach_norm.0")
    rows = {d.name: d.status for d in norm.details}
    # One output per gradient of the MLP: fc1's weight and bias, fc2's weight and bias.
    assert rows == {f"Torch._foreach_norm.0.forward.output.{i}": "pass" for i in range(4)}
    assert not [r.name for r in summary.results if r.forward == "SKIP"]
