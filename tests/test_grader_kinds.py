"""precheck.grader.compare of a target and a golden of different dtype kinds (integer against floating point):
an error saying the two cannot be compared, as msprobe's run_ut reports it, never a silent pass on equal values."""

from __future__ import annotations

import pytest
import torch

from precheck.grader import compare


@pytest.mark.parametrize(
    ("target", "golden"),
    [
        (torch.tensor([1, 2, 3], dtype=torch.int64), torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)),
        (torch.tensor([1.0, 2.0, 3.0], dtype=torch.float32), torch.tensor([1, 2, 3], dtype=torch.int32)),
        (torch.tensor([True, False]), torch.tensor([1.0, 0.0], dtype=torch.float64)),
    ],
)
def test_an_integer_against_a_float_is_an_error_that_says_they_cannot_be_compared(target, golden):
    result = compare(target, golden)
    assert result.status == "error"
    assert result.message == f"golden dtype is {golden.dtype} but target dtype is {target.dtype}, cannot compare"


def test_same_kinds_still_compare():
    assert compare(torch.tensor([1, 2], dtype=torch.int32), torch.tensor([1, 2], dtype=torch.int64)).status == "pass"
    assert compare(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0], dtype=torch.float64)).status == "pass"
