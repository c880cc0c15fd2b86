"""Real msprobe dumps of four more training steps (benchmarks/model_dumps.py): BERT in training mode (dropout and
attention dropout), a CNN (batch norm, pooling, Dropout2d) in bf16 tensor mode, LLaMA (RMSNorm, rotary
embeddings, grouped-query attention) in fp32 statistics mode, and torch's TransformerEncoder (multi-head attention
with dropout) in fp32 tensor mode. Every record is graded; the random ones by their law;
the only errors are the CPU's own bf16 kernels losing precision against the float64 golden."""

from __future__ import annotations

import pytest
from helpers import real_dump_json

from precheck.grader.stochastic import STANDARD
from precheck.run_ut import run_ut

MODELS = {
    # name: (forward records, random calls, APIs graded error)
    "bert_bf16_tensor": (
        52,
        {"Functional.dropout", "Functional.scaled_dot_product_attention"},
        # the token-type embedding's weight gradient (24 rows summed into one, in bf16: 4.6x the honest bf16
        # kernel's error), the weight and bias gradients of the CPU's bf16 layer_norm backward (2.5-5x) and the
        # cross_entropy backward (log_softmax's and nll_loss's, each rounded to bf16: 2.5x)
        {"Functional.embedding.1", "Functional.cross_entropy.0"} | {f"Functional.layer_norm.{i}" for i in range(6)},
    ),
    # the CPU's bf16 batch norm: its errors lean one way per channel (z-score 11, an honest kernel's 1.5)
    "cnn_bf16_tensor": (13, {"Functional.dropout2d"}, {"Functional.batch_norm.0"}),
    "llama_fp32_statistics": (119, set(), set()),
    # torch's TransformerEncoder in training: dropout inside multi-head attention, its mask recovered
    "encoder_fp32_tensor": (28, {"Functional.dropout", "Functional.multi_head_attention_forward"}, set()),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model_run(request, tmp_path_factory):
    return request.param, run_ut(real_dump_json(request.param), tmp_path_factory.mktemp(request.param), device="cpu")


def test_every_record_is_graded(model_run):
    name, summary = model_run
    records, _, errors = MODELS[name]
    assert len(summary.results) == records
    assert summary.counts["SKIP"] == 0
    assert {r.name for r in summary.results if "error" in (r.forward, r.backward)} == errors


def test_random_calls_are_checked_by_their_law(model_run):
    name, summary = model_run
    _, random, _ = MODELS[name]
    statistical = {
        r.name.rsplit(".", 1)[0] for r in summary.results if any(d.comparison.standard == STANDARD for d in r.details)
    }
    assert statistical == random
    for r in summary.results:
        if r.name.rsplit(".", 1)[0] in random:
            assert r.forward == "pass", (r.name, r.message)
