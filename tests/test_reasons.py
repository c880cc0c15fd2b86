"""Reasons as data: every graded row's code, standard and honest multiple are kept beside the msprobe CSVs
(precheck/report/reasons.py), and the advice reads them, never the Message prose."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
import torch
from helpers import DATA

from precheck.execution.options import CheckOptions
from precheck.grader import compare
from precheck.grader.reasons import Reason
from precheck.report import reasons
from precheck.report.advice import NO_REASONS, advise
from precheck.report.html import write_report
from precheck.results import load
from precheck.run_ut import run_ut

# Dumps whose runs (target recorded) fire the advice's rules: fp16 overflow and nan born here; accumulation in low
# precision and errors beyond what the dtype explains; a random law broken.
FIRING = [DATA / "detection" / "dev" / "cross_entropy_fp16_overflow_fp16", DATA / "advice" / "dropout_unscaled",
          DATA / "detection" / "dev" / "adaptive_pool_half_accumulation_fp16"]  # fmt: skip


def test_the_grader_says_what_decided_each_verdict_as_a_code():
    g = torch.linspace(-1, 1, 4096, dtype=torch.float64)
    off = g.to(torch.bfloat16).clone()
    off[::7] += 0.5  # far beyond an honest bf16 kernel
    cases = [
        (compare(g.float(), g), Reason.PASSED),
        (compare(g.to(torch.bfloat16), g), Reason.WITHIN_ROUNDING),
        (compare(off, g, honest=g.to(torch.bfloat16)), Reason.HONEST_NORMWISE),
        (compare(torch.full((8,), float("inf")), torch.ones(8, dtype=torch.float64)), Reason.NONFINITE_MISMATCH),
        (compare(torch.ones(2), torch.ones(3, dtype=torch.float64)), Reason.SHAPE_MISMATCH),
        (compare(torch.ones(2, dtype=torch.int64), torch.ones(2, dtype=torch.float64)), Reason.DTYPE_KIND),
        (compare(off, g, standard="binary"), Reason.RULE_FAILED),
    ]
    assert [c.reason for c, _ in cases] == [want for _, want in cases]
    assert cases[2][0].ratio is not None and f"error {cases[2][0].ratio:.3g}x" in cases[2][0].message


def _placeholder_messages(details: Path) -> None:
    """Every Message cell of a details CSV replaced by one word: no prose left to match."""
    with open(details, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f))
    rows[1:] = [[*r[:-1], "placeholder"] for r in rows[1:]]
    with open(details, "w", encoding="utf-8-sig", newline="") as f:
        csv.writer(f).writerows(rows)


@pytest.fixture(scope="module", params=FIRING, ids=lambda p: p.name)
def fired(request, tmp_path_factory):
    dump = next(request.param.glob("step0/*/dump.json"))
    out = tmp_path_factory.mktemp(request.param.name)
    summary = run_ut(dump, out / "run", device="cpu", workers=1, options=CheckOptions(target="recorded"))
    return dump, Path(summary.details_path)


def test_the_advice_finds_the_same_without_any_message(fired, tmp_path):
    """Findings come from the reasons file: with every Message replaced by a placeholder, each rule fires on the
    same rows."""
    dump, details = fired
    findings = {(f.rule, f.rows) for f in advise(load(details), dump)}
    assert findings
    copy = tmp_path / details.name
    shutil.copy(details, copy)
    shutil.copy(reasons.path_for(details), reasons.path_for(copy))
    _placeholder_messages(copy)
    assert {(f.rule, f.rows) for f in advise(load(copy), dump)} == findings


def test_a_run_without_a_reasons_file_still_opens_and_says_findings_need_a_newer_run(fired, tmp_path):
    dump, details = fired
    copy = tmp_path / details.name
    shutil.copy(details, copy)
    frame = load(copy)
    assert len(frame) == len(load(details)) and frame["reason"].isna().all() and advise(frame, dump) == []
    page = write_report(copy, tmp_path / "page").read_text(encoding="utf-8")
    assert NO_REASONS.replace("'", "&#x27;") in page
