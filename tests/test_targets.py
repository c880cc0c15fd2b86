"""--target recorded and --target compile: what is graded, and what a corrupted recording looks like."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from helpers import one_api_dump

from precheck.commands.cli import main
from precheck.execution.options import CheckOptions
from precheck.run_ut import run_ut

DATA = Path(__file__).parent / "data"
MLP = DATA / "mlp_fp32_tensor/step0/proc8486/dump.json"
GPT2 = DATA / "gpt2_bf16_tensor/step0/proc8493/dump.json"
GPT2_STATS = DATA / "gpt2_bf16_statistics/step0/proc8497/dump.json"
RECORDED = CheckOptions(target="recorded")


def rows_of(summary) -> dict[str, list[str]]:
    return {r.name: [r.forward, r.backward, r.message] for r in summary.results}


def corrupt(dump_dir: Path, name: str, fn) -> None:
    path = dump_dir / "dump_tensor_data" / name
    torch.save(fn(torch.load(path, weights_only=True)), path)


@pytest.fixture
def mlp_copy(tmp_path) -> Path:
    shutil.copytree(MLP.parent, tmp_path / "dump")
    return tmp_path / "dump"


def test_untouched_fp32_recording_passes(tmp_path):
    summary = run_ut(MLP, tmp_path, options=RECORDED)
    assert all(r.forward == "pass" and r.backward == "pass" for r in summary.results), rows_of(summary)
    assert "against their recorded outputs" in summary.describe()
    # The target is named in every details row.
    assert all(d.comparison.message.startswith("target: recorded outputs") for r in summary.results for d in r.details)


def test_corrupted_outputs_are_errors_on_exactly_those_apis(mlp_copy, tmp_path):
    gen = torch.Generator().manual_seed(0)
    corrupt(
        mlp_copy,
        "Functional.gelu.0.forward.output.0.pt",  # 1% relative noise
        lambda t: t * (1 + 0.01 * torch.randn(t.shape, generator=gen)),
    )

    def one_nan(t):
        t = t.clone()
        t.view(-1)[7] = float("nan")
        return t

    def one_sign(t):
        t = t.clone()
        flat = t.view(-1)
        i = int(flat.abs().argmax())
        flat[i] = -flat[i]
        return t

    corrupt(mlp_copy, "Torch.softmax.0.forward.output.0.pt", one_nan)  # one NaN
    corrupt(mlp_copy, "Functional.linear.1.forward.output.0.pt", one_sign)  # a sign flip
    corrupt(
        mlp_copy,
        "Functional.layer_norm.0.forward.output.0.pt",  # off-by-one shift
        lambda t: torch.roll(t, 1, dims=-1),
    )
    summary = run_ut(mlp_copy / "dump.json", tmp_path / "out", options=RECORDED)
    rows = rows_of(summary)
    bad = {"Functional.gelu.0", "Torch.softmax.0", "Functional.linear.1", "Functional.layer_norm.0"}
    assert {name for name, (fwd, _, _) in rows.items() if fwd == "error"} == bad, rows
    assert rows["Functional.linear.0"][:2] == ["pass", "pass"] and rows["Tensor.sum.0"][:2] == ["pass", "pass"]
    assert "inf/nan mismatch at 1 position(s)" in rows["Torch.softmax.0"][2]
    # Corrupted outputs do not touch the recorded gradients: backward still passes.
    assert all(bwd == "pass" for _, bwd, _ in rows.values())


def test_corrupted_gradient_is_a_backward_error(mlp_copy, tmp_path):
    corrupt(mlp_copy, "Torch.softmax.0.backward.output.0.pt", lambda t: t * 1.05)
    rows = rows_of(run_ut(mlp_copy / "dump.json", tmp_path / "out", options=RECORDED))
    assert rows["Torch.softmax.0"][:2] == ["pass", "error"]
    assert "backward.output.0" in rows["Torch.softmax.0"][2]


def test_recorded_gradients_are_graded_where_msprobe_recorded_them(tmp_path):
    """msprobe saves Functional.linear's gradients in addmm's order (bias, input, weight transposed); the first
    linear's input needs no gradient, so its record holds bias and weight transposed at places 0 and 2."""
    summary = run_ut(MLP, tmp_path, options=RECORDED)
    linear = next(r for r in summary.results if r.name == "Functional.linear.0")
    assert [(d.name, d.comparison.status) for d in linear.details] == [
        ("Functional.linear.0.forward.output.0", "pass"),
        ("Functional.linear.0.backward.output.0", "pass"),
        ("Functional.linear.0.backward.output.2", "pass"),
    ]
    assert "gradient at AddmmBackward0 input 2 (TBackward0 of input 1)" in linear.details[2].comparison.message


def test_lm_head_gradient_is_graded_at_the_flattened_grad_output(tmp_path):
    summary = run_ut(GPT2, tmp_path, options=RECORDED)
    rows = rows_of(summary)
    # lm_head (no bias) on 3-D input: msprobe records the (32, 500) view of grad_output that mm saw.
    assert rows["Functional.linear.0"][1] == "pass", rows["Functional.linear.0"]
    assert summary.counts["error"] == 0
    graded = [r for r in summary.results if r.forward != "SKIP"]
    assert len(graded) == 47  # the recorded dropout masks and attention draws by their law
    assert sum(r.details[0].comparison.standard == "statistical" for r in graded) == 7
    # Only the random calls' gradients are not graded.
    assert {r.name for r in summary.results if r.backward == "SKIP"} == {
        r.name for r in graded if r.details[0].comparison.standard == "statistical"
    }


def test_statistics_records_are_graded_on_their_statistics_never_error(tmp_path):
    summary = run_ut(GPT2_STATS, tmp_path, options=RECORDED)
    graded = [r for r in summary.results if r.forward != "SKIP"]
    assert len(graded) == 40
    assert all(r.forward in ("pass", "warning") for r in graded)
    assert all("statistics only" in r.message for r in graded)
    assert all(d.comparison.standard == "statistics" for r in graded for d in r.details)


def test_recorded_and_random_exclude_each_other(tmp_path, capsys):
    code = main(["run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "--target", "recorded", "--random"])
    err = capsys.readouterr().err
    assert code == 2 and "exclude each other" in err and err.count("\n") == 1


def test_missing_recorded_output_file_is_a_skip(mlp_copy, tmp_path):
    (mlp_copy / "dump_tensor_data" / "Functional.gelu.0.forward.output.0.pt").unlink()
    rows = rows_of(run_ut(mlp_copy / "dump.json", tmp_path / "out", options=RECORDED))
    assert rows["Functional.gelu.0"][0] == "SKIP"
    assert "recorded output: Functional.gelu.0.forward.output.0.pt: file not found" in rows["Functional.gelu.0"][2]
    assert rows["Functional.linear.0"][0] == "pass"


def test_compile_target_grades_a_compiled_kernel(tmp_path):
    dump = one_api_dump(MLP, "Torch.softmax.0", tmp_path / "dump")
    summary = run_ut(dump, tmp_path / "out", options=CheckOptions(target="compile"))
    assert [(r.forward, r.backward) for r in summary.results] == [("pass", "pass")]
    assert all(d.comparison.message.startswith("target: torch.compile") for d in summary.results[0].details)


def test_a_compile_run_ends_without_leaked_semaphores_and_leaves_inductors_config(tmp_path):
    """A --target compile run ended with "resource_tracker: There appear to be 2 leaked semaphore objects": the
    semaphores of inductor's pool of compile workers. Its calls compile in their thread now, inductor's setting
    restored after each (a check in a training's process must not change it)."""
    import subprocess
    import sys

    from torch._inductor import config

    argv = ["run_ut", "-api_info", str(MLP), "-o", str(tmp_path / "out"), "-q", "-d", "cpu", "--target", "compile"]
    done = subprocess.run([sys.executable, "-m", "precheck", *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "leaked" not in done.stderr, done.stderr
    threads = config.compile_threads
    dump = one_api_dump(MLP, "Functional.gelu.0", tmp_path / "dump")
    summary = run_ut(dump, tmp_path / "again", options=CheckOptions(target="compile"), workers=1)
    assert summary.counts["pass"] == 1 and config.compile_threads == threads


def test_compile_failure_is_a_skip_with_the_compilers_reason(tmp_path, monkeypatch):
    import torch._dynamo.exc as dynamo_exc

    from precheck.execution import sides

    def broken_compile(fn, **kwargs):
        def call(*a, **k):
            raise dynamo_exc.Unsupported("call_function UserDefinedObjectVariable is not supported\nmore")

        return call

    monkeypatch.setattr(sides, "_COMPILED", {})
    monkeypatch.setattr(sides.torch, "compile", broken_compile)
    summary = run_ut(MLP, tmp_path, options=CheckOptions(target="compile"), workers=1)  # the patch is ours
    assert {r.forward for r in summary.results} == {"SKIP"}
    assert (
        summary.results[0].message
        == "torch.compile failed: Unsupported: call_function UserDefinedObjectVariable is not supported"
    )


def test_every_target_the_command_line_offers_is_a_kind_of_target():
    from precheck.execution.options import TARGETS
    from precheck.execution.targets import target_for

    kinds = {name: type(target_for(CheckOptions(target=name))) for name in TARGETS}
    assert {kind.name for kind in kinds.values()} == set(TARGETS)
    assert kinds["recorded"].takes_generated_inputs is False and kinds["compile"].extra_timeout > 0
    with pytest.raises(ValueError, match="unknown target 'npu-graph'"):
        target_for(CheckOptions(target="npu-graph"))


@pytest.mark.parametrize(
    ("stats", "status"),
    [
        ({"Max": "NaN", "Min": "NaN", "Mean": "NaN", "Norm": "NaN"}, "error"),  # NaN everywhere
        ({"Max": "inf", "Norm": "inf"}, "error"),  # inf where the golden is finite, within bf16's range
        ({"Min": "-inf"}, "error"),
    ],
)
def test_a_non_finite_recorded_statistic_where_the_golden_is_finite_is_an_error(tmp_path, stats, status):
    """grade_statistics skipped every non-finite statistic: an add recorded as NaN everywhere passed."""
    import json

    dump = tmp_path / "dump"
    shutil.copytree(GPT2_STATS.parent, dump)
    path = dump / "dump.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["data"]["Tensor.__add__.1.forward"]["output"][0].update(stats)
    path.write_text(json.dumps(doc), encoding="utf-8")
    summary = run_ut(path, tmp_path / "out", options=RECORDED)
    row = next(r for r in summary.results if r.name == "Tensor.__add__.1")
    assert row.forward == status and "a non-finite value the golden does not hold" in row.message
    assert sum(r.forward == "error" for r in summary.results) == 1  # the other records as before


def test_a_recorded_statistics_overflow_where_the_golden_is_beyond_the_dtype_is_a_warning():
    from precheck.dump.decode import Stats, TensorSpec
    from precheck.execution.statistics import grade_statistics

    inf = float("inf")
    golden = torch.tensor([1e5, 1.0, -2.0], dtype=torch.float64)  # beyond float16's 65504
    spec = TensorSpec(torch.float16, (3,), Stats(inf, -2.0, inf, inf))
    verdict = grade_statistics(spec, golden)
    assert verdict.status == "warning" and verdict.message.startswith("statistics: overflow, Max inf vs golden")
    spec = TensorSpec(torch.float32, (3,), Stats(inf, -2.0, inf, inf))  # within float32's range: an error
    assert grade_statistics(spec, golden).status == "error"
    nan = float("nan")
    held = torch.tensor([nan, 1.0, -2.0], dtype=torch.float64)  # the golden holds the NaN itself: no proof
    assert grade_statistics(TensorSpec(torch.float16, (3,), Stats(nan, nan, nan, nan)), held).status != "error"
