"""run_ut on training steps as users write them, recorded by msprobe 26.2 (issue 37's corpus, tests/data/steps/):
autocast bf16, fp16 autocast with a GradScaler (finite and overflowing), clip_grad_norm_, torch.utils.checkpoint
(non-reentrant), LSTM/GRU, and tiny ConvNeXt, Swin, BERT, Mistral (gradient checkpointing), Gemma, BART and Whisper
configurations, each its whole step (benchmarks/training_steps.py; tests/data/record/make_fixtures.py records them).

The issue's targets: no row where the target or the golden raised; every graded forward output replayed in its
recorded dtype (the dtype the call ran in, autocast's included); no SKIP row but a random call's; foreach ops
graded; a GradScaler's overflow step reported as one, not as errors.
"""

from __future__ import annotations

import functools
import json
import math
import tempfile
from pathlib import Path

import pytest
import torch
from helpers import DATA

from precheck.core.reasons import Reason
from precheck.core.status import ERROR, SKIP
from precheck.dump.autocast import autocast_dtype
from precheck.dump.decode import Case, Stats, TensorSpec
from precheck.dump.records import load_dump
from precheck.results import ApiResult
from precheck.run_ut import run_ut
from precheck.walk import flatten

STEPS = DATA / "steps"
CORPUS = sorted(p.name for p in STEPS.glob("*_msprobe"))
RAISED = {Reason.TARGET_FAILED, Reason.DEVICE_FAILED, Reason.SKIP_GOLDEN_FAILED}


def _dump(name: str) -> Path:
    return next((STEPS / name).glob("step0/*/dump.json"))


@functools.cache
def _graded(name: str) -> tuple[list[ApiResult], dict[str, Case]]:
    """run_ut's results on one dump of the corpus (in-process, CPU), and its records by name: run once a dump."""
    with tempfile.TemporaryDirectory() as out:
        # one call per signature (--filter_api): a repeated layer's calls graded once keeps the file a few seconds
        results = run_ut(_dump(name), out, device="cpu", backend="inprocess", workers=1, filter_api=True).results
    cases = load_dump(_dump(name)).cases
    return results, {cases[i].name: cases[i] for i in range(len(cases))}


def test_the_corpus_is_there() -> None:
    steps = {name.rsplit("_", 2)[0] for name in CORPUS}
    assert len(steps) == 13 and {"mistral", "gemma", "bart", "whisper", "convnext", "swin", "bert"} <= steps
    assert len(CORPUS) == 19  # every step in the statistics task, the six hand-written ones in the tensor task too
    assert len(FOREACH) == 11


@pytest.mark.parametrize("name", CORPUS)
def test_no_row_where_the_target_or_golden_raised(name: str) -> None:
    results, _ = _graded(name)
    assert results
    raised = [
        (row.name, row.comparison.reason) for r in results for row in r.details if row.comparison.reason in RAISED
    ]
    assert not raised


@pytest.mark.parametrize("name", CORPUS)
def test_every_graded_output_replayed_in_its_recorded_dtype(name: str) -> None:
    """The target ran in the dtype the call recorded for its output (under autocast: the dtype autocast gave it)."""
    results, recorded = _graded(name)
    graded = 0
    for result in results:
        outputs = flatten(recorded[result.name].outputs)
        for row in result.rows("forward"):
            if row.comparison.target_dtype and row.index < len(outputs) and outputs[row.index] is not None:
                assert row.comparison.target_dtype == str(outputs[row.index].dtype), row.name
                graded += 1
    assert graded >= len(results) // 2


def _skips(name: str) -> list[tuple[str, str]]:
    results, _ = _graded(name)
    return [(r.name, row.comparison.reason) for r in results for row in r.details if row.status == SKIP]


@pytest.mark.parametrize("name", CORPUS)
def test_no_skip_row_but_a_random_calls(name: str) -> None:
    """Besides the foreach ops (the next test), every SKIP row is a random call no law can judge."""
    skips = [(api, why) for api, why in _skips(name) if not api.startswith("Torch._foreach_")]
    assert all(why == Reason.SKIP_RANDOM for _, why in skips), skips


# the statistics dumps with a foreach record: not the checkpointed steps', where msprobe records no forward call
# after the recomputation's early stop (docs/benchmarks.md, Training steps), clip_grad_norm_'s included
FOREACH = [n for n in CORPUS if n.endswith("statistics_msprobe") and "Torch._foreach_" in _dump(n).read_text()]


@pytest.mark.parametrize("name", FOREACH)
def test_foreach_ops_are_graded(name: str) -> None:
    """clip_grad_norm_'s Torch._foreach_norm is graded, every tensor of its list."""
    results, recorded = _graded(name)
    foreach = [r for r in results if r.name.startswith("Torch._foreach_")]
    assert foreach and all(
        r.forward != SKIP and len(r.details) == len(flatten(recorded[r.name].outputs)) for r in foreach
    )


@pytest.mark.parametrize("name", ["conv_overflow_fp16_statistics_msprobe", "conv_overflow_fp16_tensor_msprobe"])
def test_a_gradscaler_overflow_step_is_no_error(name: str) -> None:
    """Its scaled fp16 gradients overflow by design (the scaler then skips the step): inf is what ran, not an
    error of the kernel."""
    results, _ = _graded(name)
    overflow = Reason.NONFINITE_MISMATCH
    assert not [
        row.name for r in results for row in r.details if row.status == ERROR and row.comparison.reason == overflow
    ]


def test_the_overflow_step_overflowed() -> None:
    """The corpus's overflow step holds what makes it one: the scaled loss's gradient reaches the head as inf in
    fp16, NaN below it; the step at the lower scale is finite."""
    data = json.loads(_dump("conv_overflow_fp16_statistics_msprobe").read_text())["data"]
    assert data["Functional.linear.0.backward"]["input"][0]["Max"] == float("inf")
    assert math.isnan(data["Functional.conv2d.0.backward"]["output"][1]["Norm"])
    finite = json.loads(_dump("conv_gradscaler_fp16_statistics_msprobe").read_text())["data"]
    assert math.isfinite(finite["Functional.conv2d.0.backward"]["output"][1]["Norm"])


@pytest.mark.parametrize(
    ("api", "inputs", "expected"),
    [
        ("Functional.linear", (torch.bfloat16, torch.float32), torch.bfloat16),  # mistral's, as msprobe wrote it
        ("Functional.conv2d", (torch.float16, torch.float32, torch.float32), torch.float16),
        ("Functional.linear", (torch.float32, torch.float32), None),  # ran as it is replayed, or not: unknown
        ("Functional.linear", (torch.bfloat16, torch.bfloat16), None),
        ("Functional.linear", (torch.bfloat16, torch.float16), None),  # two half dtypes: which one, unknown
        ("Functional.softmax", (torch.bfloat16,), None),  # not a product
        ("Torch.cat", (torch.bfloat16, torch.float32), None),  # promote: only the output would say
    ],
)
def test_an_inputs_only_record_of_a_mixed_product_ran_in_its_half_dtype(api: str, inputs: tuple, expected) -> None:
    """msprobe writes a call that raised with its inputs only (transformers' checkpoint stops its recomputation
    by an exception from inside a linear): a bf16 activation times an fp32 weight ran under autocast, in bf16.
    Before, the record was not inferred and its replay raised "expected m1 and m2 to have the same dtype"."""
    specs = tuple(TensorSpec(d, (2, 2), Stats(None, None, None, None)) for d in inputs)
    case = Case(name=f"{api}.0", api=api, order=0, args=specs, kwargs={}, outputs=())
    assert autocast_dtype(case) == expected
