"""Training steps as users write them (issue 37), recorded by precheck.record into tests/data/record/ (its
train_steps.py and make_fixtures.py): clip_grad_norm_'s ``Torch._foreach_norm`` is graded output by output, and
a GradScaler step whose fp16 gradients overflow by design is reported as an overflow, not as an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from precheck.core.reasons import Reason
from precheck.execution.options import CheckOptions
from precheck.run_ut import run_ut

RECORD = Path(__file__).parent / "data" / "record"


def _dump(name: str) -> Path:
    (found,) = (RECORD / name / "step0").glob("proc*/dump.json")
    return found


def _details(summary) -> dict[str, tuple[str, str, str]]:
    return {d.name: (d.comparison.status, d.comparison.reason, d.comparison.message) for r in summary.results
            for d in r.details}  # fmt: skip


@pytest.mark.parametrize("step", ["clip_fp32_tensor", "scaler_fp16_tensor"])
def test_clip_grad_norm_s_foreach_norm_is_graded_output_by_output(step, tmp_path):
    summary = run_ut(_dump(step), tmp_path, device="cpu", workers=1)
    (norm,) = (r for r in summary.results if r.name == "Torch._foreach_norm.0")
    rows = {d.name: d.status for d in norm.details}
    # One output per gradient of the MLP: fc1's weight and bias, fc2's weight and bias.
    assert rows == {f"Torch._foreach_norm.0.forward.output.{i}": "pass" for i in range(4)}
    assert not [r.name for r in summary.results if r.forward == "SKIP"]


# The scaled gradients pass fp16's 65504 in the backward of ``h * 8``; the recorded fp16 gradients of the second
# linear (its bias's, summed over the batch) pass it too. The golden, rounded to fp16, is inf there as well.
# Autocast's linear (fp16 activations, fp32 weight and bias) computes its weight's and bias's gradients in fp16 and
# casts them to fp32: their inf is fp16's overflow, though the golden fits fp32 (precheck/dump/autocast.py)
OVERFLOWED = {
    "device": [
        "Tensor.__mul__.0.backward.output.0",
        "Functional.linear.1.backward.output.1",
        "Functional.linear.1.backward.output.2",
    ],
    "recorded": ["Tensor.__mul__.0.backward.output.0", "Functional.linear.1.backward.output.0"],
}


@pytest.mark.parametrize("target", ["device", "recorded"])
def test_a_grad_scaler_step_that_overflows_is_an_overflow_not_an_error(target, tmp_path):
    summary = run_ut(_dump("scaler_fp16_tensor"), tmp_path, device="cpu", workers=1,
                     options=CheckOptions(target=target))  # fmt: skip
    rows = _details(summary)
    for name in OVERFLOWED[target]:
        status, reason, message = rows[name]
        assert (status, reason) == ("warning", Reason.OVERFLOW), message
        assert "overflow: inf at" in message and "beyond fp16's range (65504)" in message
    # Its later calls, the optimizer's unscale_ and clip_grad_norm_ among them, are fed its inf and nan: they pass.
    assert rows["Torch._foreach_norm.0.forward.output.0"][0] == "pass"
    errors = {n: m for n, (status, _, m) in rows.items() if status == "error"}
    assert not errors
