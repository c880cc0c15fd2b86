"""A call whose recorded input is memory no call wrote (issue: 1F1B stage 1's linear on its receive buffer read
before the receive completed, Max 1.7e28 and Norm inf): the exact CPU kernel, within fp32's rounding, was a
warning because its max abs error (2.5e20, its rounding at 6e27) failed the default standard's 1e-4. The row now
says the input reads as uninitialised memory and is graded by the honest kernel's verdict, scale-free: a pass
for an exact kernel, an error for one worse than an honest kernel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import _rec, forward_rec, tensor_rec

from precheck.dump.records import Stats, TensorSpec
from precheck.dump.steps import find_dumps
from precheck.execution.options import CheckOptions
from precheck.inputs.unwritten import unwritten
from precheck.ranks import run_step
from precheck.run_ut import run_ut

DATA = Path(__file__).parent / "data" / "sharded"
SAID = "input_args[0]: reads as uninitialised memory, a buffer read before it was written (recorded Max 1.74e+28"
WAIVED = "max abs error (forward.output.0 2.51e+20, backward.output.1 6.99e+19) not held to 0.0001"


def _linear_row(results) -> object:
    (row,) = [r for r in results if r.name == "Functional.linear.0"]
    return row


@pytest.mark.parametrize("how", ["rank alone", "step folder"])
def test_the_1f1b_linear_on_its_unwritten_receive_buffer_passes_saying_why(tmp_path, how):
    """Rank 1 runs the clean code: its linear.0 was a warning ("max abs error 2.51e+20 >= 0.0001; what fp32
    explains: within its rounding"), alone and in the step folder; the clean twin's (Max 3e-41) passed as now."""
    step = DATA / "pipeline_1f1b_bug0_statistics" / "step0"
    if how == "rank alone":
        results = run_ut(step / "rank1" / "dump.json", tmp_path, device="cpu", workers=1).results
    else:
        summary = run_step(find_dumps(step), tmp_path, device="cpu", workers=1, backend="inprocess")
        results = summary.ranks["rank1"].results
    row = _linear_row(results)
    assert (row.forward, row.backward) == ("pass", "pass"), row.message
    assert SAID in row.message and WAIVED in row.message, row.message
    assert "graded by the honest kernel's verdict" in row.message
    twin = run_ut(DATA / "pipeline_1f1b_statistics" / "step0" / "rank1" / "dump.json", tmp_path / "twin",
                  device="cpu", workers=1).results  # fmt: skip
    clean = _linear_row(twin)
    assert (clean.forward, clean.backward) == ("pass", "pass"), clean.message
    assert "uninitialised" not in clean.message


def _garbage_linear(tmp_path: Path, noise: float) -> Path:
    """A tensor dump of F.linear on an input of huge random values, its recorded output off by ``noise``
    (relative): what --target recorded grades as the training's kernel."""
    data = tmp_path / "dump_tensor_data"
    data.mkdir()
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(4, 8, generator=gen) * 1e28
    w, b = torch.randn(8, 8, generator=gen), torch.randn(8, generator=gen)
    out = F.linear(x, w, b) * (1 + noise)
    args = [_rec(t, data, f"Functional.linear.0.forward.input.{i}.pt") for i, t in enumerate((x, w, b))]
    record = forward_rec(*args, output=[_rec(out, data, "Functional.linear.0.forward.output.0.pt")])
    doc = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
           "data": {"Functional.linear.0.forward": record}}  # fmt: skip
    (tmp_path / "dump.json").write_text(json.dumps(doc))
    return tmp_path / "dump.json"


@pytest.mark.parametrize(("noise", "status"), [(0.0, "pass"), (1e-3, "error")])
def test_a_recorded_kernel_on_unwritten_memory_is_graded_by_the_honest_kernel(tmp_path, noise, status):
    """Exact: a pass (it was a warning on max abs error alone); 1e-3 off: still an error, worse than an honest
    fp32 kernel, however large the values."""
    path = _garbage_linear(tmp_path, noise)
    (row,) = run_ut(path, tmp_path / "out", device="cpu", workers=1, options=CheckOptions(target="recorded")).results
    assert row.forward == status, row.message
    assert "input_args[0]: reads as uninitialised memory" in row.message
    assert ("worse than an honest fp32 kernel" in row.message) == (status == "error"), row.message


def _spec(dtype: torch.dtype, top: float, bottom: float = 0.0) -> TensorSpec:
    return TensorSpec(dtype, (4,), Stats(top, bottom, None, None))


@pytest.mark.parametrize(
    ("spec", "garbage"),
    [
        (_spec(torch.float32, 1.7443590651219484e28), True),
        (_spec(torch.bfloat16, 4.732584021665573e30), True),
        (_spec(torch.float32, 0.0, -6.585170580900543e22), True),
        (_spec(torch.float32, 3.0923854510720063e-41, -1.01e-17), False),  # tiny: nothing tells it from data
        (_spec(torch.float32, 0.0, torch.finfo(torch.float32).min), False),  # a causal mask of finfo.min
        (_spec(torch.bfloat16, 0.0, torch.finfo(torch.bfloat16).min), False),
        (_spec(torch.bfloat16, 0.0, float(torch.tensor(torch.finfo(torch.float32).min).bfloat16())), False),
        (_spec(torch.float32, 0.0, float(torch.tensor(-1e30, dtype=torch.float32))), False),  # a -1e30 mask
        (_spec(torch.bfloat16, 0.0, float(torch.tensor(-1e30, dtype=torch.bfloat16))), False),
        (_spec(torch.float16, 65504.0, -65504.0), False),
        (_spec(torch.float32, 1e18, -1e18), False),  # below 2^64: its square is a float32
    ],
)
def test_which_statistics_read_as_unwritten_memory(spec, garbage):
    assert bool(unwritten(spec)) == garbage, unwritten(spec)


def test_an_out_buffer_of_unwritten_memory_is_no_input_read(write_dump, tmp_path):
    """``out=`` is memory the call writes: torch.empty's garbage there is no scale of the call's inputs."""
    a = tensor_rec("torch.float32", [2, 2], Max=1.0, Min=-1.0, Mean=0.0, Norm=1.5)
    out = tensor_rec("torch.float32", [2, 2], Max=6.9e29, Min=0.0, Mean=1e29, Norm=float("inf"))
    path = write_dump({"Torch.mul.0.forward": forward_rec(a, a, kwargs={"out": out}, output=[a])}, task="statistics")
    (row,) = run_ut(path, tmp_path / "out", device="cpu", workers=1).results
    assert "uninitialised" not in row.message, row.message
