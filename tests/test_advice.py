"""Expert advice on real dumps: what each clean bundled dump is told (only the run's own errors, explained), the
accumulation rule's evidence (the reduced length against the error), and the two sides of the dtype's rounding."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import DATA

from api_registry.reduced import reduced_length
from precheck import load
from precheck.execution.options import CheckOptions
from precheck.report.advice import advise
from precheck.run_ut import run_ut

DETECTION = DATA / "detection" / "dev"
# Every bundled dump of a clean step run_ut can replay (../shared/dumps holds copies of three of them); the dumps
# made to trigger a rule, the detection benchmark's bugs and MindSpore's dumps (--target mindspore) are not here.
CLEAN = [
    *(DATA / n for n in ("mlp_fp32_tensor", "encoder_fp32_tensor", "composite_fp32_tensor", "opinfo_fp32_all")),
    *(DATA / n for n in ("llama_fp32_statistics", "gpt2_bf16_tensor", "gpt2_bf16_statistics", "bert_bf16_tensor")),
    *(DATA / n for n in ("cnn_bf16_tensor", "opinfo_bf16_all_stats")),
    *(DETECTION / n for n in ("clean_gpt_fp32", "clean_gpt_bf16", "clean_cnn_fp16")),
    DATA / "advice" / "gpt_fp16_loss_scale_1024",
    *(DATA / "compare" / n for n in ("fp32_tensor", "fp32_statistics", "fp32_md5", "fp32_tensor_unfused_ln")),
    *(DATA / "compare" / n for n in ("pt_fp32_tensor_for_ms", "bf16_tensor")),
]
# The one inf/nan a clean dump's run grades error: bf16 matrix_exp on inputs drawn from statistics (its inputs'
# recorded statistics are finite, so the NaN is born in the call).
NAN_BORN = {"opinfo_bf16_all_stats": {"Torch.matrix_exp.0.forward.output.0"}}


def _dump(folder: Path) -> Path:
    return next(folder.glob("step0/*/dump.json"))


def _run(folder: Path, out: Path, **options) -> tuple:
    dump = _dump(folder)
    summary = run_ut(dump, out, device="cpu", workers=1, options=CheckOptions(**options))
    frame = load(summary.details_path)
    return frame, {f.rule: f for f in advise(frame, dump)}


def _names(rows) -> set[str]:
    return {f"{r.call}.{r.direction}.output.{r.output}" for r in rows.itertuples()}


@pytest.fixture(scope="module", params=CLEAN, ids=lambda p: p.name)
def clean(request, tmp_path_factory):
    folder = request.param
    return folder.name, *_run(folder, tmp_path_factory.mktemp(folder.name))


def test_a_clean_dump_is_told_only_why_its_run_graded_errors(clean):
    """No false alarm: a finding on a clean dump names exactly the rows its run graded error, and only the rules
    that explain such a verdict fire (beyond the dtype's rounding; resting on generated inputs; inf/nan born
    here). Every other rule, accumulation in low precision included, stays silent. The half-precision steps do
    grade errors: the CPU's own bf16/fp16 layer-norm, normalize, batch-norm and cross-entropy kernels are 2-7x an
    honest kernel's error."""
    name, frame, findings = clean
    errors = frame[frame["status"] == "error"]
    nonfinite = errors["message"].str.contains("inf/nan", regex=False)
    expected = {"beyond_rounding": _names(errors[~nonfinite])}
    if "stat" in name:
        expected["generated_inputs"] = _names(errors)
    expected["nan_born_here"] = NAN_BORN.get(name, set())
    assert {rule: set(f.rows) for rule, f in findings.items()} == {k: v for k, v in expected.items() if v}
    if "fp32" in name:
        assert findings == {}
    else:  # the guard is not empty: the CPU's own half-precision backwards (layer norm, normalize ...) err
        assert not errors.empty and "beyond_rounding" in findings
    for f in findings.values():
        assert f.count == len(f.rows) and len(f.evidence) == min(f.count, 20)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    folder = DETECTION / "adaptive_pool_half_accumulation_fp16"
    return _run(folder, tmp_path_factory.mktemp("pool"), target="recorded")


def test_accumulation_evidence_is_the_reduced_length_against_the_error(pool):
    """The fp16 pooling that sums its 8x8 window in fp16: n = 64, an error of about 2.6 roundings, what adding
    64 terms in fp16 predicts (sqrt(64)/3), where a kernel that accumulates in fp32 rounds once."""
    frame, findings = pool
    found = findings["low_precision_accumulation"]
    assert found.rows == ("Functional.adaptive_avg_pool2d.0.forward.output.0",)
    line = found.evidence[0]
    assert "reduces n = 64: error " in line and "one rounding allows 1, accumulating in the dtype predicts ~2.7" in line
    observed = float(re.search(r"error ([\d.]+) roundings", line).group(1))
    assert 1.5 < observed < 4


def test_an_error_that_does_not_grow_with_n_is_not_accumulation(pool):
    """The conv2d backward the run grades error (2.55x an honest kernel's) sums 144 terms, yet errs by about one
    rounding: beyond an honest kernel, not the sqrt(n) growth of adding in fp16."""
    frame, findings = pool
    conv = "Functional.conv2d.1.backward.output.0"
    assert conv in findings["recorded_beyond_rounding"].rows and conv not in findings["low_precision_accumulation"].rows


def _shaped(*shape: int) -> SimpleNamespace:
    return SimpleNamespace(shape=shape)


@pytest.mark.parametrize(
    "api, args, kwargs, grad_of, n",
    [
        ("Tensor.sum", (_shaped(4, 5, 6), [0, 2]), {}, None, 24),
        ("Torch.mean", (_shaped(4, 5, 6),), {}, None, 120),
        ("Torch.softmax", (_shaped(2, 7),), {"dim": -1}, None, 7),
        ("Functional.layer_norm", (_shaped(2, 16, 64), [64]), {}, None, 64),
        ("Functional.linear", (_shaped(8, 32), _shaped(10, 32)), {}, None, 32),
        ("Functional.linear", (_shaped(8, 32), _shaped(10, 32)), {}, 0, 10),
        ("Functional.linear", (_shaped(8, 32), _shaped(10, 32)), {}, 1, 8),
        ("Torch.addmm", (_shaped(10), _shaped(8, 32), _shaped(32, 10)), {}, None, 32),
        ("Functional.conv2d", (_shaped(4, 12, 8, 8), _shaped(16, 3, 3, 3)), {"groups": 4}, None, 27),
        ("Functional.avg_pool2d", (_shaped(4, 3, 8, 8), 2), {}, None, 4),
        ("Functional.adaptive_avg_pool2d", (_shaped(4, 16, 8, 8), 1), {}, None, 64),
        ("Aten.sum.dim_IntList", (_shaped(3, 9), [1]), {}, None, 9),
        ("Functional.relu", (_shaped(4, 5),), {}, None, None),
        ("Torch.sum", (_shaped(4, 5),), {}, 0, None),  # a sum's gradient is a broadcast: it sums nothing
        ("Functional.linear", ("not a tensor", None), {}, None, None),
    ],
)
def test_the_reduced_length_is_read_as_the_api_reads_its_arguments(api, args, kwargs, grad_of, n):
    assert reduced_length(api, args, kwargs, grad_of) == n


@pytest.fixture(scope="module")
def stricter(tmp_path_factory):
    folder = DATA / "gpt2_bf16_tensor"
    return {s: _run(folder, tmp_path_factory.mktemp(s), standard=s) for s in ("msprobe", "thousandth")}


def test_a_standard_stricter_than_the_dtype_is_told_so(stricter):
    """msprobe's standard wants 99.9% of bf16 elements within 1e-3 relative error, finer than bf16's rounding
    (3.9e-3): its 14 warnings on the GPT-2 step are all within half a ULP, the dtype's rounding."""
    frame, findings = stricter["msprobe"]
    found = findings["within_rounding"]
    assert set(found.rows) == _names(frame[frame["status"] != "pass"]) and found.count == 14
    said = "this error is the dtype's rounding, not a kernel bug: the standard is stricter than the dtype"
    assert said in found.advice
    assert "Functional.layer_norm.0.forward.output.0" in found.rows
    assert all("every element within 0.5 ULP of the golden" in line for line in found.evidence)
    assert "beyond_rounding" not in findings


def test_a_failure_beyond_one_ulp_is_not_called_rounding(stricter):
    """Under the thousandth standard the layer-norm backwards fail by 9-96 ULP: not the dtype's rounding, so the
    rule does not say so; the forward layer norm (0.5 ULP) it does."""
    frame, findings = stricter["thousandth"]
    rows = set(findings["within_rounding"].rows)
    layer_norm = frame["call"].str.startswith("Functional.layer_norm")
    backwards = _names(frame[layer_norm & (frame["direction"] == "backward")])
    assert backwards and not backwards & rows and "Functional.layer_norm.0.forward.output.0" in rows
