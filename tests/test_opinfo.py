"""PyTorch's OpInfo samples recorded by msprobe (risk_level ALL, ~440 distinct APIs): a pre-check that SKIPs hides
problems, so nearly every record is graded, and a random call is never graded by comparing two draws."""

from __future__ import annotations

import pytest
from helpers import real_dump_json

from api_registry import lookup
from precheck.dump.records import load_dump
from precheck.grader.stochastic import STANDARD, VERDICT
from precheck.run_ut import RunSummary, run_ut

DUMPS = {"opinfo_fp32_all": 688, "opinfo_bf16_all_stats": 612}
MHA = "Functional.multi_head_attention_forward.0"  # dropout inside attention: random, no check of its law


@pytest.fixture(scope="module", params=sorted(DUMPS))
def run(request, tmp_path_factory) -> tuple[str, RunSummary]:
    return request.param, run_ut(real_dump_json(request.param), tmp_path_factory.mktemp(request.param), device="cpu")


def test_at_least_99_percent_of_records_are_graded(run):
    name, summary = run
    assert len(summary.results) == DUMPS[name]
    skipped = [r for r in summary.results if r.forward == "SKIP"]
    assert len(skipped) <= 0.01 * DUMPS[name], [(r.name, r.message) for r in skipped]
    assert MHA in {r.name for r in skipped}
    for r in skipped:
        assert r.message.startswith(("random op", "cannot run the recorded call")), (r.name, r.message)


def test_random_calls_are_graded_by_their_law_never_against_a_golden(run):
    name, summary = run
    random = set()
    for case in load_dump(real_dump_json(name)).cases:
        entry = lookup(case.api)
        if entry is not None and entry.random_reason(case.args, case.kwargs):
            random.add(case.name)
    # dropout family, rrelu, samplers, bernoulli, fractional max pooling ...: recognised per call
    assert len(random) >= 10 and {"Tensor.exponential_.0", "Functional.rrelu.0", "Torch.bernoulli.0"} <= random
    for r in summary.results:
        standards = {d.comparison.standard for d in r.details}
        if r.name not in random:
            assert STANDARD not in standards, r.name
        elif r.forward != "SKIP":
            assert standards == {STANDARD}, (r.name, standards)
            assert all(d.comparison.message.startswith(VERDICT) for d in r.details), r.name
        else:
            assert r.message.startswith("random op"), (r.name, r.message)


@pytest.mark.parametrize("run", ["opinfo_fp32_all"], indirect=True)
def test_an_fp32_recording_replayed_on_the_cpu_has_no_error(run):
    _, summary = run
    assert summary.counts["error"] == 0
    assert summary.counts["pass"] >= 0.97 * DUMPS["opinfo_fp32_all"]
