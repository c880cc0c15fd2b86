"""compare across precisions (issue 38) where the dtypes' range, not a kernel, sets the numbers: twins recorded in
this process by precheck.record (fp32, and under autocast), as benchmarks/bench_compare_precision.py found them on a
Llama (a finfo.min mask beside bf16 scores) and a ConvNeXt (a 1e-6 layer scale whose gradient underflows fp16)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

import precheck
from precheck.compare import localize
from precheck.compare.divergence import agreement
from precheck.compare.dumps import compare_dumps


def _twins(tmp_path: Path, step, dtype: torch.dtype) -> tuple:
    """``step`` recorded, seeded, under autocast to ``dtype`` (the target) and in fp32 (the bench): their dumps."""
    dumps = []
    for name, low in (("target", True), ("bench", False)):
        torch.manual_seed(0)
        with precheck.record(tmp_path / name), torch.autocast("cpu", dtype=dtype, enabled=low):
            step().backward()
        dumps.append(next((tmp_path / name).glob("step0/*/dump.json")))
    return dumps


def _attention() -> torch.Tensor:
    """A Llama's eager attention: bf16 scores plus an fp32 mask of torch.finfo(float32).min, softmax in fp32."""
    q, k, v = (torch.randn(2, 8, 16, requires_grad=True) for _ in range(3))
    mask = torch.full((8, 8), torch.finfo(torch.float32).min).triu(1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * 0.25 + mask
    return torch.matmul(F.softmax(scores, dim=-1, dtype=torch.float32), v).float().square().sum()


def _layer_scale() -> torch.Tensor:
    """A ConvNeXt block's end: a 1e-6 layer scale (fp32) times an fp16 branch, fed a gradient of about 2e-2."""
    x, w = torch.rand(4, 16, requires_grad=True), torch.rand(16, 16, requires_grad=True)  # no cancelling sum
    scale = torch.full((16,), 1e-6, requires_grad=True)
    return (scale * F.linear(x, w)).sum() * 0.02


def test_a_finfo_min_mask_does_not_hide_the_rounding_beside_it(tmp_path):
    """The softmax's input read a deviation of 1e-42 (the mask was the bench's largest magnitude), so its fp32
    output, carrying bf16 rounding, was the first divergent record: "its inputs agree ... the API is suspect"."""
    target, bench = _twins(tmp_path, _attention, torch.bfloat16)
    result = compare_dumps(target, bench, tmp_path / "out")
    assert result.divergence.first is None, result.divergence.first.why()
    assert result.divergence.verdicts["suspect"] == 0


def test_a_gradient_flushed_to_zero_by_fp16s_range_is_an_underflow_not_a_divergence(tmp_path):
    """The layer scale's gradient into the fp16 branch, 2e-8, is 0 in fp16: it was named first divergent
    (deviation 1.0). The row says it is an underflow, and no record is named."""
    target, bench = _twins(tmp_path, _layer_scale, torch.float16)
    result = compare_dumps(target, bench, tmp_path / "out")
    assert result.divergence.first is None, result.divergence.first.why()
    rows = (tmp_path / "out").glob("compare_result_*.csv")
    text = next(rows).read_text(encoding="utf-8")
    assert "underflow: 64 values below fp16's smallest subnormal on the target flushed to zero" in text


def _cancelling_sum() -> torch.Tensor:
    """An fp32 sum of a bf16 linear's output over rows whose mean is taken out: the sum cancels, and the bf16
    rounding it received is magnified far beyond CARRIED times its inputs' (a layer_norm's bias gradient)."""
    x = torch.randn(256, 64)
    w, s = torch.randn(64, 64, requires_grad=True), torch.randn(64, requires_grad=True)
    return (F.linear(x - x.mean(0), w).float() * s).sum()


def test_a_sum_whose_cancellation_magnifies_bf16_rounding_is_cleared_by_replay(tmp_path):
    """The tolerance named Tensor.sum.0.forward ("its inputs agree ... the API is suspect"); replayed, neither side
    is worse than an honest kernel, so it and the later picks are cleared, and the summary says which and why."""
    target, bench = _twins(tmp_path, _cancelling_sum, torch.bfloat16)
    result = compare_dumps(target, bench, tmp_path / "out")
    where = result.divergence.localization
    assert result.divergence.first is None, result.divergence.first.why()
    assert where["tolerance_first"] == "Tensor.sum.0.forward" and result.divergence.suspects == []
    assert [c["record"] for c in where["cleared"]][:2] == ["Tensor.sum.0.forward", "Tensor.__mul__.0.backward"]
    assert "no worse than an honest kernel (target pass, bench pass)" in where["cleared"][0]["why"]
    line = agreement(result.divergence.rounding(), where)
    assert "beyond the tolerance cleared by replay, no worse than an honest kernel on either side: Tensor.sum" in line


def test_candidates_that_spend_the_replays_budget_leave_the_tolerances_pick_its_own(tmp_path, monkeypatch):
    """A clean Llama pair had 147 candidates: the 50 calls went to those before the tolerance's pick, which then
    stood ungraded, a false headline. The picks have calls of their own past the candidates' budget."""
    monkeypatch.setattr(localize, "MAX_REPLAYED", 0)  # every candidate past the budget
    target, bench = _twins(tmp_path, _cancelling_sum, torch.bfloat16)
    result = compare_dumps(target, bench, tmp_path / "out")
    assert result.divergence.first is None, result.divergence.first.why()
    assert result.divergence.localization["cleared"][0]["record"] == "Tensor.sum.0.forward"
