"""--target recorded: every recorded gradient is graded against the golden where msprobe's hook recorded it.

msprobe's hook sits on the autograd node that made a call's output and saves the gradients at that node's inputs,
so a composite call's backward record holds an internal node's gradients (composite_model.py in tests/data says
which). Each is graded at the same input of the same node in the float64 golden's graph, never paired by shape.
"""

from __future__ import annotations

import re
import shutil
import weakref
from collections.abc import Callable

import pytest
import torch
from helpers import inplace_dump, one_api_dump, real_dump_json, without_collector

from precheck.dump.records import Case, load_dump
from precheck.execution.check import check_case
from precheck.execution.options import CheckOptions
from precheck.execution.sides import Side
from precheck.results import ApiResult
from precheck.run_ut import run_ut
from precheck.support import would_skip

RECORDED = CheckOptions(target="recorded")
COMPOSITE = real_dump_json("composite_fp32_tensor")
COMPOSITE_APIS = re.compile(r"\.(linear|matmul|cross_entropy|layer_norm|softmax|\w*attention\w*)\.\d+$")


def rows_of(summary) -> dict[str, tuple[str, str, str]]:
    return {r.name: (r.forward, r.backward, r.message) for r in summary.results}


def backward_rows(result) -> dict[str, object]:
    """The backward details rows of one API by their place in the record (``output.1``)."""
    return {d.name.split(".backward.")[1]: d for d in result.details if ".backward." in d.name}


@pytest.mark.parametrize(
    "dump",
    [
        "bert_bf16_tensor",
        "cnn_bf16_tensor",
        "composite_fp32_tensor",
        "encoder_fp32_tensor",
        "gpt2_bf16_tensor",
        "gpt2_bf16_statistics",
        "llama_fp32_statistics",
        "mlp_fp32_tensor",
    ],
)
def test_no_backward_skip_for_composite_calls(dump, tmp_path):
    """Linear, matmul, cross_entropy, layer_norm, softmax and attention that draw no random numbers have every
    recorded gradient graded, in tensor mode on its data and in statistics mode on its statistics."""
    summary = run_ut(real_dump_json(dump), tmp_path, options=RECORDED, workers=1)
    composite = [r for r in summary.results if COMPOSITE_APIS.search(r.name) and "random" not in r.message]
    assert composite, "the dump has no composite call"
    skipped = {r.name: r.message for r in composite if r.backward == "SKIP"}
    assert not skipped, skipped
    for r in composite:
        graded = backward_rows(r)
        assert graded, f"{r.name}: no backward row"
        if "statistics" in dump:
            assert all(d.comparison.standard == "statistics" for d in graded.values()), r.name
            assert r.backward in ("pass", "warning"), (r.name, r.message)


def test_cross_entropy_is_graded_at_its_log_softmax_output(tmp_path):
    """The loss is scaled by 1024; msprobe records nll_loss's gradient at the log_softmax output, -1024/N at each
    target and 0 elsewhere, not the gradient of the logits. Graded there it passes (paired with the logits'
    gradient it was a false error: cosine 0.88, max abs error 40)."""
    summary = run_ut(COMPOSITE, tmp_path, options=CheckOptions(target="recorded", keep_tensors=True), workers=1)
    ce = next(r for r in summary.results if r.name == "Functional.cross_entropy.0")
    assert (ce.forward, ce.backward) == ("pass", "pass"), ce.message
    row = backward_rows(ce)["output.0"]
    assert "gradient at NllLossBackward0 input 0 (LogSoftmaxBackward0 of input 0)" in row.comparison.message
    golden = row.golden
    assert golden.shape == (8, 5) and int((golden != 0).sum()) == 8
    assert torch.allclose(golden[golden != 0], torch.full((8,), -1024 / 8, dtype=torch.float64))


def test_gradients_that_share_a_shape_are_paired_by_their_place_in_the_node(tmp_path):
    """A 2-D linear without bias records mm's gradients (input, weight transposed), both (6, 6); a 3-D linear the
    flattened grad_output, (8, 6) like its weight transposed. Paired by shape, two of these were false errors."""
    rows = {r.name: r for r in run_ut(COMPOSITE, tmp_path, options=RECORDED, workers=1).results if ".linear." in r.name}
    square = backward_rows(rows["Functional.linear.2"])
    assert sorted(square) == ["output.0", "output.1"]
    assert "gradient at MmBackward0 input 1 (TBackward0 of input 1)" in square["output.1"].comparison.message
    view = backward_rows(rows["Functional.linear.1"])
    assert list(view) == ["output.0"]
    assert "gradient at ViewBackward0 input 0 (the output of AddmmBackward0)" in view["output.0"].comparison.message
    head = backward_rows(rows["Functional.linear.3"])  # addmm: bias, input, weight transposed
    assert [d.comparison.message.split("; ")[1] for d in head.values()] == [
        "gradient at AddmmBackward0 input 0 (input 2)",
        "gradient at AddmmBackward0 input 1 (input 0)",
        "gradient at AddmmBackward0 input 2 (TBackward0 of input 1)",
    ]
    assert all(r.backward == "pass" for r in rows.values()), {n: r.message for n, r in rows.items()}


def _band_noise(t: torch.Tensor) -> torch.Tensor:
    """1% relative noise on the last band of a tensor (its last row), as a kernel wrong at an edge would be."""
    gen = torch.Generator().manual_seed(0)
    t = t.clone()
    band = t[..., -1, :]
    band.mul_(1 + 0.01 * torch.randn(band.shape, generator=gen, dtype=band.dtype))
    return t


@pytest.fixture(scope="module")
def clean_composite(tmp_path_factory) -> dict[str, tuple[str, str, str]]:
    return rows_of(run_ut(COMPOSITE, tmp_path_factory.mktemp("clean"), options=RECORDED, workers=1))


@pytest.mark.parametrize(
    "api, place",
    [
        ("Functional.cross_entropy.0", 0),
        ("Functional.linear.2", 1),
        ("Functional.linear.1", 0),
        ("Torch.matmul.1", 0),
        ("Functional.layer_norm.0", 0),
        ("Torch.softmax.0", 0),
        ("Functional.scaled_dot_product_attention.0", 1),
    ],
)
def test_a_corrupted_gradient_band_is_an_error_on_exactly_that_backward(api, place, clean_composite, tmp_path):
    dump = tmp_path / "dump"
    shutil.copytree(COMPOSITE.parent, dump)
    path = dump / "dump_tensor_data" / f"{api}.backward.output.{place}.pt"
    torch.save(_band_noise(torch.load(path, weights_only=True)), path)
    rows = rows_of(run_ut(dump / "dump.json", tmp_path / "out", options=RECORDED, workers=1))
    assert rows[api][:2] == (clean_composite[api][0], "error"), rows[api]
    assert f"backward.output.{place}: " in rows[api][2]
    changed = {name for name, row in rows.items() if row[:2] != clean_composite[name][:2]}
    assert changed == {api}


def test_a_call_that_returns_its_input_names_its_recorded_gradient(tmp_path):
    """``x.to(torch.float32)`` of a float32 x returns x itself: msprobe's hook lands on the node that made x, in
    another record, so nothing here is the recorded gradient's golden. It is named, not graded (paired with the
    input's gradient by shape it was a false error)."""
    dump = one_api_dump(real_dump_json("opinfo_fp32_all"), "Tensor.to.24", tmp_path / "dump")
    [result] = run_ut(dump, tmp_path / "out", options=RECORDED, workers=1).results
    assert (result.forward, result.backward) == ("pass", "SKIP")
    assert (
        "backward: recorded gradient 0 of shape (5,) has no golden counterpart (the call returned its input "
        "unchanged, so msprobe's hook recorded the gradients of the node that made that input, outside this "
        "record); not graded" in result.message
    )
    assert "recorded gradient 1 of shape (5,)" in result.message


@pytest.mark.parametrize("target", ["recorded", "device"])
def test_incoming_gradients_of_a_node_with_more_outputs_than_the_call(target, tmp_path):
    """``svdvals`` returns S of linalg_svd's (U, S, Vh); msprobe records the node's incoming gradients [null, dS,
    null]. dS is fed into S, so the backward is compared on every target."""
    dump = one_api_dump(real_dump_json("opinfo_fp32_all"), "Torch.svdvals.0", tmp_path / "dump")
    [result] = run_ut(dump, tmp_path / "out", options=CheckOptions(target=target), workers=1).results
    assert result.backward == "pass", result.message
    assert list(backward_rows(result)) == ["output.0"]


@pytest.mark.parametrize(
    "task, target",
    [("tensor", "device"), ("tensor", "recorded"), ("statistics", "device"), ("statistics", "recorded")],
)
def test_inplace_calls_are_graded_forward_and_backward(task, target, tmp_path):
    """In-place calls on an input that needs a gradient are replayed on a copy of it, forward and backward (they
    were SKIP rows: 'a leaf Variable that requires grad is being used in an in-place operation'; dropout's an
    error row), and ``apis --check`` predicts no SKIP for them."""
    dump = inplace_dump(tmp_path / "dump", task)
    summary = run_ut(dump, tmp_path / "out", options=CheckOptions(target=target), workers=1)
    rows = rows_of(summary)
    graded = ("pass",) if task == "tensor" else ("pass", "warning")  # statistics: generated inputs, recorded stats
    for api in ("Functional.relu.0", "Tensor.add_.0", "Tensor.__iadd__.0"):
        assert rows[api][:2] in [(f, b) for f in graded for b in graded], rows
    # dropout's law is checked on its outputs (recorded ones need their data), its gradients on a device only
    dropout = {"device": ("pass", "pass"), "recorded": ("pass", "SKIP")}[target]
    if (task, target) == ("statistics", "recorded"):
        dropout = ("SKIP", "SKIP")
        assert rows["Functional.dropout.0"][2] == "random op: its recorded outputs are statistics only"
    assert rows["Functional.dropout.0"][:2] == dropout, rows
    assert not any("leaf" in message for _, _, message in rows.values())
    if target == "device":  # the target `apis --check` predicts for
        assert would_skip(dump) == (4, {})


def test_inplace_call_graded_at_its_own_node(tmp_path):
    """The recorded gradients of ``x.add_(y)`` are AddBackward0's at x and y, the call's own inputs: no row names
    precheck's copy of x as where the gradient was taken."""
    dump = inplace_dump(tmp_path / "dump", "tensor")
    summary = run_ut(dump, tmp_path / "out", options=RECORDED, workers=1)
    add = next(r for r in summary.results if r.name == "Tensor.add_.0")
    assert sorted(backward_rows(add)) == ["output.0", "output.1"]
    assert not any("Clone" in d.comparison.message for d in add.details), add.message


def test_a_bugged_inplace_output_is_an_error(tmp_path):
    """1% noise on the recorded outputs of the in-place calls is an error of each, as on any other call."""
    dump = inplace_dump(tmp_path / "dump", "tensor", noise=0.01)
    rows = rows_of(run_ut(dump, tmp_path / "out", options=RECORDED, workers=1))
    for api in ("Functional.relu.0", "Tensor.add_.0", "Tensor.__iadd__.0"):
        assert rows[api][:2] == ("error", "pass"), rows[api]


def check_composite_uncollected(after: Callable[[Case, ApiResult], None] = lambda case, result: None) -> None:
    """Checks each record of the composite dump against its recorded outputs with the cyclic collector off
    (helpers.without_collector), calling ``after`` with each case and its result as soon as it is checked."""
    dump = load_dump(COMPOSITE)
    with without_collector():
        for case in dump.cases:
            after(case, check_case(case, dump.data_dir, RECORDED))


def test_no_tensor_of_a_case_outlives_its_check(monkeypatch):
    """What a recorded-target check built (the golden's float64 copies, the gradients at the hooked node) is freed
    when its row is made, not when the cyclic collector next runs: held past its case, lm_head's golden (0.4 GB on
    a LLaMA step) was still alive through the cross_entropy after it, the run's peak."""
    made, copies = Side.tensor, []

    def watched(self, t):
        copy = made(self, t)
        copies.append(weakref.ref(copy))
        return copy

    def after(case, result):
        assert copies, case.name
        alive = [tuple(ref().shape) for ref in copies if ref() is not None]
        assert not alive, (case.name, result.forward, alive)
        copies.clear()

    monkeypatch.setattr(Side, "tensor", watched)
    check_composite_uncollected(after)


def test_the_golden_gradients_no_recorded_gradient_pairs_with_are_freed_before_grading(monkeypatch):
    """The recorded target grades the golden's gradients where msprobe's hook was (a linear's flattened
    grad_output); the call's own input gradients it did not take (lm_head's float64 weight gradient, 0.26 GB on
    a LLaMA step) are freed before the grading starts, not held through it."""
    from precheck.execution import check, recorded

    moved, graded_at = [], []
    run, grade = recorded.recorded_run, check._graded

    def recorded_run(case, builder, golden, no_node):
        target, kept, at = run(case, builder, golden, no_node)
        taken = {id(g) for g in (kept.grads or {}).values()}
        moved.extend(weakref.ref(g) for g in (golden.grads or {}).values() if g is not None and id(g) not in taken)
        return target, kept, at

    def graded(case, *rest):
        graded_at.append([tuple(ref().shape) for ref in moved if ref() is not None])
        return grade(case, *rest)

    monkeypatch.setattr(recorded, "recorded_run", recorded_run)
    monkeypatch.setattr(check, "_graded", graded)
    check_composite_uncollected()
    assert moved, "no call of the dump had its golden gradients moved to the hooked node"
    assert graded_at and not any(graded_at), graded_at
