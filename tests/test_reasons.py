"""Reasons as data: every graded row's code, standard and honest multiple are kept beside the msprobe CSVs
(precheck/frames/reasons.py), and the advice reads them, never the Message prose."""

from __future__ import annotations

import ast
import csv
import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import DATA, misbehaving_env

from api_registry import registry
from precheck import load
from precheck.core.reasons import Reason
from precheck.dump.decode import Case, Stats, TensorSpec
from precheck.execution.check import check_case
from precheck.execution.options import CheckOptions
from precheck.frames import reasons
from precheck.grader import compare
from precheck.report.advice import NO_REASONS, advise
from precheck.report.html import write_report
from precheck.report.skips import describe_skips, skip_reasons
from precheck.results import device_lost
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


def _stats(shape: list[int], data_name: str | None = None) -> dict:
    spec = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": shape, "Max": 1.0, "Min": -1.0, "Mean": 0.0,
            "Norm": 1.5, "requires_grad": False}  # fmt: skip
    return {**spec, "data_name": data_name} if data_name else spec


SKIPS = {  # a record -> the code of its SKIP row, decided where the row is made
    "Mint.abs.0": ({"input_args": [_stats([4])]}, Reason.SKIP_OTHER_FRAMEWORK),
    "Torch.no_such_api.0": ({"input_args": [_stats([4])]}, Reason.SKIP_UNSUPPORTED),
    "Functional.relu.0": (
        {"input_args": [_stats([4], "Functional.relu.0.forward.input.0.pt")]},
        Reason.SKIP_MISSING_FILE,
    ),  # fmt: skip
    "Functional.gelu.0": ({"input_args": [_stats([4])], "input_kwargs": [1]}, Reason.SKIP_BAD_RECORD),
    "Torch.matmul.0": ({"input_args": [_stats([2048, 2048]), _stats([2048, 2048])]}, Reason.SKIP_MEMORY),
}


@pytest.fixture(scope="module")
def skips(tmp_path_factory):
    root = tmp_path_factory.mktemp("skips")
    data = {f"{name}.forward": {"input_kwargs": {}, "output": [_stats([4])], **record}
            for name, (record, _) in SKIPS.items()}  # fmt: skip
    dump = root / "dump.json"
    dump.write_text(json.dumps({"task": "tensor", "level": "L1", "framework": "pytorch", "data": data}))
    options = CheckOptions(max_memory=1 << 20)
    summary = run_ut(dump, root / "run", device="cpu", workers=1, backend="inprocess", options=options)
    return Path(summary.result_path), Path(summary.details_path)


def test_each_skip_row_says_why_as_a_code(skips):
    _, details = skips
    found = reasons.read(details)
    assert {name: found[f"{name}.forward.output.0"].reason for name in SKIPS} == {n: c for n, (_, c) in SKIPS.items()}


def test_skips_group_by_code_with_every_message_a_placeholder(skips, tmp_path):
    result, details = skips
    for path in (result, details):
        shutil.copy(path, tmp_path / path.name)
    shutil.copy(reasons.path_for(details), reasons.path_for(tmp_path / details.name))
    _placeholder_messages(tmp_path / result.name)
    counts, total = skip_reasons(tmp_path / result.name)
    assert total == len(SKIPS) and sum(counts.values()) == len(SKIPS)
    lines = describe_skips(counts, total, shown=len(SKIPS))
    assert "    1 API: MindSpore APIs read as PyTorch's: add --framework mindspore" in "\n".join(lines)
    assert any(line.startswith("    1 API: tensor files not found (the first: placeholder): copy") for line in lines)
    assert any(line.startswith("    1 API: above --max-memory: raise it") for line in lines)


def test_a_device_failure_is_a_code_decided_where_it_was_caught_not_its_words(monkeypatch, tmp_path):
    """torch's AcceleratorError retires the worker whatever it says; an API's own error that says "CUDA error:
    out of memory" does not (process.py retires by results.device_lost)."""
    for key, value in misbehaving_env().items():
        monkeypatch.setenv(key, value)
    registry.cache_clear()
    try:
        got = {}
        for api in ("Torch.precheck_sticky", "Torch.precheck_wordy"):
            case = Case(
                name=f"{api}.0", api=api, order=0, args=(TensorSpec(torch.float32, (4,), Stats(1.0, -1.0, 0.0, 1.5)),)
            )
            result = check_case(case, tmp_path, CheckOptions(device="cpu", force_random=True))
            got[api] = (result.forward, result.details[0].comparison.reason, device_lost(result))
    finally:
        monkeypatch.delenv("PRECHECK_PLUGINS")
        registry.cache_clear()
    assert got == {
        "Torch.precheck_sticky": ("error", Reason.DEVICE_FAILED, True),
        "Torch.precheck_wordy": ("error", Reason.TARGET_FAILED, False),
    }


# Text a program may match because it is no verdict's: argparse's own error message (a required option misspelt).
_MATCHED_ON_PURPOSE = {
    ("precheck/commands/parser.py", "startswith"),
    # regress shows the clause of the current row's Message that names the direction that got worse, to a person:
    # its verdict is the statuses', and the clause is quoted, never matched for a phrase
    ("precheck/regress/verdict.py", "split"),
}
_TEXT_METHODS = {"find", "rfind", "index", "startswith", "endswith", "split", "rsplit", "partition", "rpartition",
                 "replace", "removeprefix", "removesuffix", "count"}  # fmt: skip
_PATTERN_METHODS = {"match", "search", "fullmatch", "findall", "finditer", "sub", "split"}


def _is_message(node: ast.AST) -> bool:
    """Whether an expression is a message's text: a name or attribute saying message, ``row["Message"]``,
    ``row.get("Message")``, or a call on one of them (``message.strip()``, ``unformula(row.get("Message"))``)."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return "message" in (node.id if isinstance(node, ast.Name) else node.attr).lower()
    if isinstance(node, ast.Subscript):
        key = node.slice.value if isinstance(node.slice, ast.Constant) else ""
        return "message" in str(key).lower() or _is_message(node.value)
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "get" and node.args and isinstance(node.args[0], ast.Constant):
            return "message" in str(node.args[0].value).lower()
        return _is_message(f.value) if isinstance(f, ast.Attribute) else any(map(_is_message, node.args))
    return False


def _matched_messages(path: Path) -> list[tuple[int, str]]:
    hits = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops):
            hits += [(node.lineno, "in")] if any(map(_is_message, node.comparators)) else []
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            how = node.func.attr
            if how in _TEXT_METHODS and _is_message(node.func.value):
                hits.append((node.lineno, how))
            elif how in _PATTERN_METHODS and any(map(_is_message, node.args)):
                hits.append((node.lineno, how))
    return hits


def test_no_program_reads_a_verdict_from_a_message():
    """No phrase of a verdict is matched anywhere: no ``in``, find/split/startswith or regular expression is
    applied to a message's text in precheck/ (the codes, clauses and flags are data), but for the allowed."""
    root = Path(__file__).parent.parent
    found = [
        f"{path.relative_to(root)}:{line} {how}"
        for path in sorted((root / "precheck").rglob("*.py"))
        for line, how in _matched_messages(path)
        if (str(path.relative_to(root)), how) not in _MATCHED_ON_PURPOSE
    ]
    assert found == []


def test_the_reference_names_every_reason_code():
    page = (Path(__file__).parent.parent / "docs" / "reference" / "csv-formats.md").read_text(encoding="utf-8")
    assert [r.value for r in Reason if f"`{r.value}`" not in page] == []


def _reason_rows(details: Path) -> list[str]:
    return [json.loads(line)["row"] for line in reasons.path_for(details).read_text(encoding="utf-8").splitlines()]


def _details_rows(details: Path) -> list[str]:
    with open(details, encoding="utf-8-sig", newline="") as f:
        return [row[0] for row in list(csv.reader(f))[1:]]


def test_the_reasons_file_is_in_the_csvs_order_whatever_order_the_apis_finish_in(tmp_path):
    from precheck.dump.records import load_dump
    from precheck.run_files.csv_files import CsvReport

    dump = load_dump(DATA / "mlp_fp32_tensor/step0/proc8486/dump.json")
    with CsvReport(tmp_path) as report:
        for case in reversed(list(dump.cases)):  # a pool's workers finish in any order
            report.add(check_case(case, dump.data_dir))
    rows = _details_rows(report.details_path)
    assert len(rows) > len(dump.cases) and _reason_rows(report.details_path) == rows


def test_a_resumed_run_keeps_one_reasons_line_per_row_in_the_csvs_order(tmp_path):
    mlp = DATA / "mlp_fp32_tensor/step0/proc8486/dump.json"
    first = run_ut(mlp, tmp_path, device="cpu", workers=1)
    lines = first.result_path.read_bytes().splitlines(keepends=True)
    first.result_path.write_bytes(b"".join(lines[:3]))  # interrupted after two of its six APIs
    resumed = run_ut(mlp, tmp_path, device="cpu", workers=1, csv_path=first.result_path)
    assert resumed.checked == 4 and _reason_rows(resumed.details_path) == _details_rows(resumed.details_path)
