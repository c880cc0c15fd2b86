"""The default standard's honest verdict (precheck/grader/honest.py): synthetic kernel bugs of each failure class of
issue 12 are errors, honest kernels in the target dtype are not, whatever the loss scale; and run_ut runs the
honest kernel only when a verdict needs it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import real_dump_json

from precheck.execution.options import CheckOptions
from precheck.grader import ERROR, PASS, WARNING, compare
from precheck.grader.honest import measure
from precheck.run_ut import run_ut

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def verdict(target: torch.Tensor, golden: torch.Tensor, honest: torch.Tensor, **kw) -> tuple[str, str]:
    c = compare(target, golden, honest=honest, **kw)
    return c.status, c.message


def _layer_norm_backward(scale: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(missing the x-hat term, golden, honest) gradient of a layer norm at loss scale ``scale``."""
    x = torch.randn(32, 128, generator=gen(1), dtype=F64).to(dtype)
    go = (torch.randn(32, 128, generator=gen(2), dtype=F64) * 1e-5 * scale).to(dtype)

    def grad(x: torch.Tensor, go: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_()
        return torch.autograd.grad(F.layer_norm(x, (128,)), x, go)[0]

    golden, honest = grad(x.double(), go.double()), grad(x.float(), go.float()).to(dtype)
    sigma = torch.sqrt(x.double().var(-1, unbiased=False, keepdim=True) + 1e-5)
    bad = (go.double() - go.double().mean(-1, keepdim=True)) / sigma
    return bad.to(dtype), golden, honest


def test_class1_missing_backward_term_is_error_at_every_loss_scale():
    for dtype in (F32, BF16, F16):
        for scale in (1.0, 1024.0):
            status, message = verdict(*_layer_norm_backward(scale, dtype))
            assert status == ERROR, (dtype, scale, message)
            assert "worse than an honest" in message
    # at loss scale 1 the rule itself holds (max abs error far below 1e-4): the error is the honest verdict's
    bad, golden, honest = _layer_norm_backward(1.0, F32)
    assert (bad.double() - golden).abs().max() < 1e-4


def test_class1_honest_gradient_is_never_error_at_any_loss_scale():
    for dtype in (BF16, F16):
        for scale in (1.0, 1024.0, 2.0**16):
            _, golden, honest = _layer_norm_backward(scale, dtype)
            assert compare(honest, golden, honest=honest).status != ERROR


def _conv(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = torch.randn(4, 8, 32, 32, generator=gen(3)).to(dtype)
    w = (torch.randn(8, 8, 3, 3, generator=gen(4)) / 8).to(dtype)
    golden = F.conv2d(x.double(), w.double(), padding=1)
    honest = F.conv2d(x.float(), w.float(), padding=1).to(dtype)
    return honest.clone(), golden, honest


def test_class2_one_outlier_in_ten_thousand_is_error():
    for dtype in (BF16, F16, F32):
        target, golden, honest = _conv(dtype)  # 32,768 outputs
        assert verdict(target, golden, honest)[0] != ERROR
        target.view(-1)[12345] += 4 * golden.abs().max().to(dtype)
        status, message = verdict(target, golden, honest)
        assert status == ERROR and "an element off by" in message, (dtype, message)


def test_class2_wrong_edge_band_under_one_percent_is_error():
    for dtype in (BF16, F32):
        target, golden, honest = _conv(dtype)
        target[:, :, -1, :8] = 0  # 0.8% of the outputs: a band at the bottom edge left at zero
        assert verdict(target, golden, honest)[0] == ERROR


def _softmax_fp16_sum(x: torch.Tensor) -> torch.Tensor:
    """softmax whose exponentials are summed in fp16, one rounding per addition."""
    e = torch.exp(x - x.amax(-1, keepdim=True))
    total = torch.zeros(x.shape[0], 1, dtype=F16)
    for j in range(x.shape[1]):
        total = total + e[:, j : j + 1]
    return e / total


def test_class3_half_precision_accumulation_below_the_rule_noise_is_error():
    x = (torch.randn(64, 1000, generator=gen(5)) * 3).half()
    golden = torch.softmax(x.double(), -1)
    honest = torch.softmax(x.float(), -1).half()
    status, message = verdict(_softmax_fp16_sum(x), golden, honest)
    assert status == ERROR and "the honest kernel's (normwise" in message, message
    status, message = verdict(honest, golden, honest)
    assert status == WARNING and "what fp16 explains: within its rounding" in message


def test_class3_bf16_linear_with_an_outlier_is_not_like_every_clean_linear():
    x = torch.randn(16, 256, generator=gen(6)).bfloat16()
    w = torch.randn(128, 256, generator=gen(7)).bfloat16()
    golden, honest = x.double() @ w.double().T, (x.float() @ w.float().T).bfloat16()
    assert verdict(honest, golden, honest)[0] == WARNING
    target = honest.clone()
    target[3, 7] += 4  # a quarter of the output's RMS (16) off: 64 roundings at its scale
    assert verdict(target, golden, honest)[0] == ERROR


def test_half_accumulation_twice_the_honest_error_is_error_and_the_message_has_the_figure():
    x = torch.randn(64, 64, generator=gen(8)).bfloat16()
    w = torch.randn(64, 64, generator=gen(9)).bfloat16()
    golden, honest = x.double() @ w.double().T, (x.float() @ w.float().T).bfloat16()
    acc = torch.zeros(64, 64, dtype=BF16)
    for k in range(64):  # a bf16 accumulator, one rounding per product added
        acc = acc + x[:, k : k + 1] * w[:, k]
    status, message = verdict(acc, golden, honest)
    assert status == ERROR and "x the honest kernel's (normwise, 2x allowed)" in message, message
    status, message = verdict(honest, golden, honest)
    assert status == WARNING and "what bf16 explains: within its rounding" in message


def test_class4_tiny_vector_one_element_does_not_decide():
    for dtype in (BF16, F16):
        golden = torch.randn(64, generator=gen(10), dtype=F64) * 0.01
        golden[5] = 1e-7  # an element near zero: 1% of it is far below the vector's rounding
        honest = golden.to(dtype)
        target = honest.clone()
        target[5] = target[5] * 3  # 200% off, at 2e-5 of the vector's scale
        assert verdict(target, golden, honest)[0] != ERROR
        target[7] = golden[7] * 1.2  # 20% off at the vector's scale: a bug
        assert verdict(target, golden, honest)[0] == ERROR


def test_class5_fp32_cancellation_is_not_an_error():
    a = torch.randn(16, 16, generator=gen(11), dtype=F64) * 3
    golden, target = torch.linalg.matrix_exp(a), torch.linalg.matrix_exp(a.float())
    status, message = verdict(target, golden, target)
    assert status == WARNING and "what fp32 explains" in message
    assert compare(target, golden).status == WARNING  # modeled honest fp32 kernel: no false error either
    # its small elements carry error at the large ones' scale: 2e-5 relative, hundreds of fp32 roundings
    assert float(((target.double() - golden).abs() / golden.abs()).max()) > 1e-5


def test_cpu_bf16_batch_norm_stays_an_error_against_float64():
    # activations whose channels have means of their own, as a convolution's have
    x = (
        torch.randn(8, 16, 32, 32, generator=gen(12)) * 1.5 + 2 * torch.randn(1, 16, 1, 1, generator=gen(18))
    ).bfloat16()
    w, b = (
        (1 + 0.1 * torch.randn(16, generator=gen(13))).bfloat16(),
        (0.5 * torch.randn(16, generator=gen(14))).bfloat16(),
    )

    def bn(dtype: torch.dtype) -> torch.Tensor:
        return F.batch_norm(x.to(dtype), None, None, w.to(dtype), b.to(dtype), training=True)

    golden, honest, cpu = bn(F64), bn(F32).bfloat16(), bn(BF16)
    status, message = verdict(cpu, golden, honest)
    assert status == ERROR and "lean one way" in message, message
    assert verdict(honest, golden, honest)[0] == WARNING


def test_an_output_within_its_rounding_is_never_an_error():
    for dtype in (BF16, F16, F32):
        golden = torch.randn(4096, generator=gen(15), dtype=F64) * 100
        rounded = golden.to(dtype)
        assert compare(rounded, golden, honest=torch.zeros_like(rounded)).status != ERROR
        assert measure(rounded, golden, dtype).worst <= 1.0


def test_library_compare_without_honest_keeps_the_users_pass():
    golden = torch.randn(256, generator=gen(16), dtype=F64) * 1e-6
    target = (golden * 1.05).float()  # 5% off, far below max-abs 1e-4: the rule holds
    assert compare(target, golden).status == PASS
    assert compare(target, golden, honest=golden.float()).status == ERROR


def test_honest_source_is_called_only_when_needed():
    calls = []

    def honest():
        calls.append(1)
        return golden.to(BF16)

    golden = torch.randn(512, generator=gen(17), dtype=F64)
    assert compare(golden.to(BF16), golden, honest=honest).status == WARNING
    assert calls == []  # within bf16 rounding: no honest run
    target = golden.to(BF16)
    target[0] += 1
    assert compare(target, golden, honest=honest).status == ERROR
    assert calls == [1]


def test_fp16_overflow_shared_by_the_honest_kernel_is_not_an_error():
    golden = torch.tensor([70000.0, 1.0, 2.0, 3.0], dtype=F64)
    target = golden.to(F16)  # inf: beyond fp16's range
    # The golden in fp16 overflows too (an honest kernel's need not be run to show it): a warning saying so.
    assert compare(target, golden).status == WARNING
    status, message = verdict(target, golden, golden.float().to(F16))
    assert status == WARNING and message.startswith("overflow: inf at 1 position(s)")
    wrong = target.clone()
    wrong[1] = float("inf")
    assert verdict(wrong, golden, golden.float().to(F16))[0] == ERROR


def test_run_ut_warnings_say_what_the_dtype_explains(tmp_path):
    """End to end on the GPT-2 bf16 dump: every warning says it is what bf16 explains, with the figure."""
    summary = run_ut(real_dump_json("gpt2_bf16_tensor"), tmp_path, device="cpu", workers=1)
    warnings = [d.comparison.message for r in summary.results for d in r.details if d.comparison.status == WARNING]
    assert warnings and all("what bf16 explains: " in m for m in warnings)
    linear = next(r for r in summary.results if r.name == "Functional.linear.0")
    assert linear.forward == WARNING


def test_run_ut_runs_the_honest_kernel_only_when_a_verdict_needs_it(tmp_path, monkeypatch):
    from precheck.execution import honest_run

    runs = []
    real = honest_run.run_side
    monkeypatch.setattr(honest_run, "run_side", lambda *a, **k: runs.append(a[0].entry.name) or real(*a, **k))
    dump = real_dump_json("gpt2_bf16_tensor")
    summary = run_ut(dump, tmp_path, device="cpu", workers=1, options=CheckOptions(target="recorded"))
    graded = [r for r in summary.results if r.forward in (PASS, WARNING, ERROR)]
    assert 0 < len(runs) < len(graded)  # the calls within bf16 rounding everywhere never ran it
    runs.clear()
    run_ut(real_dump_json("mlp_fp32_tensor"), tmp_path / "mlp", device="cpu", workers=1)
    assert runs == []  # an fp32 call on the CPU is its own honest kernel


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_metrics_pass_measures_what_the_verdict_would_measure_on_full_copies(dtype):
    """The verdict takes its normwise, worst-element and lean measures from the metrics' one pass; they are the
    measures it would take itself on full float64 copies (within summation order), near-zero elements included."""
    from precheck.grader import metrics as grader_metrics
    from precheck.grader.honest import _from_metrics, measure

    gen = torch.Generator().manual_seed(3)
    golden = torch.randn(200_000, dtype=torch.float64, generator=gen)
    golden[::7] *= 1e-6  # elements near zero, judged at the output's scale
    target = (golden * (1 + 3e-3 * torch.randn(golden.shape, dtype=torch.float64, generator=gen))).to(dtype)
    m = grader_metrics.float_metrics(target, golden, dtype)
    fused, full = _from_metrics(m, dtype), measure(target, golden, dtype)
    assert fused.count == full.count == golden.numel()
    for name in ("normwise", "worst", "lean"):
        assert getattr(fused, name) == pytest.approx(getattr(full, name), rel=1e-12), name


def test_an_inf_leaves_the_measure_to_the_verdict():
    from precheck.grader import metrics as grader_metrics
    from precheck.grader.honest import _from_metrics

    golden = torch.ones(10, dtype=torch.float64)
    target = golden.float().clone()
    target[3] = float("inf")
    assert _from_metrics(grader_metrics.float_metrics(target, golden, torch.float32), torch.float32) is None
    golden[3] = float("inf")
    assert _from_metrics(grader_metrics.float_metrics(target, golden, torch.float32), torch.float32) is None


def _recorded_silu() -> tuple[torch.Tensor, torch.Tensor]:
    """The bf16 SiLU input and the 6-bit output a training step recorded (tests/data/record/gpt_model.py)."""
    data = next(Path(__file__).parent.glob("data/record/gpt_bf16_silu6_tensor/step0/*/dump_tensor_data"))
    load = lambda where: torch.load(data / f"Functional.silu.0.forward.{where}.0.pt", weights_only=True)  # noqa: E731
    return load("input"), load("output")


def test_the_importable_grader_gives_a_bad_kernel_run_uts_verdict_with_or_without_its_honest_run():
    # precheck.grade(silu_6bit_bf16, F.silu(x.double())) said "warning: 1.7x a modeled honest bf16 kernel's", so
    # assert_precise passed what run_ut grades error at 4.55x a run honest kernel.
    import precheck
    from precheck.grader.honest import honest_run

    x, out = _recorded_silu()
    golden = F.silu(x.double())
    modeled = precheck.grade(out, golden)
    run = precheck.grade(out, golden, honest=honest_run(F.silu, x))
    assert modeled.status == run.status == ERROR
    assert 4.0 < modeled.ratio < 5.0 and abs(modeled.ratio - run.ratio) < 0.05 * run.ratio, (modeled.ratio, run.ratio)
    assert "4.5" in modeled.message and "an honest kernel's (modeled, not run)" in modeled.message
    with pytest.raises(AssertionError, match="worse than an honest bf16 kernel"):
        precheck.assert_precise(out, golden)
    honest_silu = F.silu(x)  # the CPU's own bf16 SiLU, computed in fp32 and rounded once
    assert precheck.grade(honest_silu, golden).status != ERROR
    assert precheck.grade(honest_silu, golden, honest=honest_run(F.silu, x)).status != ERROR
