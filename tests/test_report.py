"""precheck report: the page as a person sees it in headless Chromium (no network), its expert advice on the dumps
made to trigger each rule, and the command line around it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from helpers import DATA, browser, chromium, dom_of, real_dump_json, report_with_a_full_disk

from precheck import load
from precheck.commands.cli import main
from precheck.core.older_python import zip_strict
from precheck.execution.options import CheckOptions
from precheck.frames import reasons
from precheck.report.advice import advise
from precheck.report.html import write_report
from precheck.run_ut import run_ut

DETECTION = DATA / "detection" / "dev"


def _dump(folder: Path) -> Path:
    return next(folder.glob("step0/*/dump.json"))


@pytest.fixture(scope="module")
def opinfo(tmp_path_factory):
    out = tmp_path_factory.mktemp("opinfo")
    summary = run_ut(real_dump_json("opinfo_bf16_all_stats"), out, device="cpu", workers=1)
    return summary, write_report(summary.details_path)


@browser
def test_the_opinfo_report_plots_every_graded_output_and_lists_every_api(opinfo, tmp_path):
    summary, page = opinfo
    frame = load(summary.details_path)
    graded = frame[(frame["status"] != "SKIP") & (frame["max_abs_err"].notna() | frame["cosine"].notna())]
    dom = dom_of(tmp_path, page)
    assert dom.count('class="pt"') == 2 * len(graded) > 200  # in each of the two plots
    apis = frame["call"].nunique()
    assert f"{apis} of {apis} APIs" in dom
    assert len(re.findall(r'<tr id="api-\d+"', dom)) == min(apis, 200)  # the first page of the table
    shot = tmp_path / "opinfo.png"
    chromium(tmp_path, "--window-size=1280,1600", f"--screenshot={shot}", page.as_uri())
    assert shot.stat().st_size > 10_000


def test_dtypes_are_named_as_torch_names_them(opinfo):
    """msprobe's CSV cell for a Python bool output is "<class 'bool'>"; the page's dtype table says torch.bool."""
    summary, page = opinfo
    assert "<class 'bool'>" in summary.details_path.read_text(encoding="utf-8-sig")
    text = page.read_text(encoding="utf-8")
    assert "class &#x27;" not in text and "<class" not in text
    assert "<tr><th>torch.bool</th>" in text


def test_the_page_shows_the_versions_the_run_recorded(opinfo):
    import torch

    _, page = opinfo
    text = page.read_text(encoding="utf-8")
    assert f"<th>torch (the run)</th><td>{torch.__version__}</td>" in text and "(this report)" not in text


@browser
def test_a_filter_and_a_sort_work(opinfo, tmp_path):
    summary, page = opinfo
    frame = load(summary.details_path)
    errors = frame[(frame["forward_status"] == "error") | (frame["backward_status"] == "error")]["call"].unique()
    dom = dom_of(tmp_path, page, "?status=error&sort=call&desc=1")
    rows = re.findall(r'<tr id="api-\d+"><td>([^<]*)</td>', dom)
    assert sorted(rows, reverse=True) == rows == sorted(errors, reverse=True)
    assert f"{len(errors)} of {frame['call'].nunique()} APIs" in dom


@browser
def test_text_from_a_dump_never_becomes_markup(tmp_path):
    hostile = '<img src=x onerror="document.title=1">.forward.output.0'
    cells = [hostile, "torch.float64", "torch.float32", "(2,)", "0.5", "1.0"] + [" "] * 15 + ["error", "</script>"]
    page = write_report(_details_csv(tmp_path / "accuracy_checking_details_1.csv", [cells]))
    assert "<img src=x" not in page.read_text(encoding="utf-8")
    dom = dom_of(tmp_path, page)
    assert "<img" not in dom and "&lt;img src=x" in dom


def _rules(dump_json: Path, tmp_path: Path, target: str = "recorded") -> set[str]:
    summary = run_ut(dump_json, tmp_path, device="cpu", workers=1, options=CheckOptions(target=target))
    return {f.rule for f in advise(load(summary.details_path), dump_json)}


@pytest.mark.parametrize(
    "dump, rules",
    [
        (DETECTION / "cross_entropy_fp16_overflow_fp16", {"fp16_overflow", "nan_born_here"}),
        (
            DETECTION / "adaptive_pool_half_accumulation_fp16",
            {"low_precision_accumulation", "recorded_beyond_rounding"},
        ),
        (DATA / "advice" / "gpt_fp16_loss_scale_1", {"underflow"}),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else "",
)
def test_each_rule_fires_on_the_dump_made_to_trigger_it(dump, rules, tmp_path):
    assert rules <= _rules(_dump(dump), tmp_path)


def test_the_generated_inputs_rule_fires_on_a_statistics_dump(tmp_path):
    assert "generated_inputs" in _rules(real_dump_json("gpt2_bf16_statistics"), tmp_path, "device")


def test_the_random_law_rule_fires_on_a_dropout_that_breaks_its_law_and_not_on_honest_dropout(tmp_path):
    assert "random_law" in _rules(_dump(DATA / "advice" / "dropout_unscaled"), tmp_path / "bug")
    # the encoder's honest dropouts are checked by their law and pass: nothing to advise
    assert "random_law" not in _rules(real_dump_json("encoder_fp32_tensor"), tmp_path / "clean", "device")


def test_loss_scaling_silences_the_underflow_rule(tmp_path):
    assert "underflow" not in _rules(_dump(DATA / "advice" / "gpt_fp16_loss_scale_1024"), tmp_path)


def test_the_run_names_its_worst_apis_and_writes_the_report(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run_ut", "-api_info", str(real_dump_json("gpt2_bf16_tensor")), "-o", str(out), "-q", "--report"]) == 0
    text = capsys.readouterr().out
    assert "worst APIs:\n    Functional.layer_norm." in text and "backward.output." in text
    page = next(out.glob("report_*.html"))
    assert f"report:  {page}" in text
    assert main(["report", str(out), "-o", str(tmp_path / "again")]) == 0
    assert "precheck report: " in capsys.readouterr().out and list((tmp_path / "again").glob("report_*.html"))


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """The GPT-2 bf16 step on the CPU: layer_norm backward errors, dropout attention's backward SKIP."""
    out = tmp_path_factory.mktemp("gpt2")
    summary = run_ut(real_dump_json("gpt2_bf16_tensor"), out, device="cpu", workers=1)
    return summary, write_report(summary.details_path)


def _page_rows(page: Path) -> list[dict]:
    text = page.read_text(encoding="utf-8")
    return json.loads(re.search(r'<script type="application/json" id="rows">(.*?)</script>', text, re.S)[1])


def test_the_page_offers_repro_only_where_repro_works(gpt2, tmp_path):
    """The dropout attention's backward SKIP is not all pass, but repro refuses a random call: not offered."""
    from precheck.repro import ReproError, write_repro

    rows = {r["call"]: r for r in _page_rows(gpt2[1])}
    attention = rows["Functional.scaled_dot_product_attention.0"]
    assert attention["backward"] == "SKIP" and "repro" not in attention
    with pytest.raises(ReproError, match="random"):
        write_repro(attention["call"], real_dump_json("gpt2_bf16_tensor"), tmp_path)
    offered = [r for r in rows.values() if "repro" in r]
    assert any(r["call"].startswith("Functional.layer_norm.") for r in offered)
    for r in offered:
        assert write_repro(r["call"], real_dump_json("gpt2_bf16_tensor"), tmp_path / "repro").is_file()


def _grid(text: str, table_id: str) -> dict[str, dict[str, int]]:
    """A counts table of the page: row label -> status -> count."""
    table = re.search(rf'<table class="counts" id="{table_id}">(.*?)</table>', text)[1]
    rows = re.findall(r"<tr>(.*?)</tr>", table)
    statuses = re.findall(r"<th>(.*?)</th>", rows[0])[1:]
    grid = {}
    for row in rows[1:]:
        label = re.search(r"<th>(.*?)</th>", row)[1]
        grid[label] = dict(zip_strict(statuses, map(int, re.findall(r"<td>(\d+)</td>", row))))
    return grid


def test_every_count_on_the_page_agrees_with_the_csvs_and_the_console(gpt2):
    """APIs as the result CSV and the console count them, outputs as the details CSV holds them, each named."""
    import csv
    from collections import Counter

    summary, page = gpt2
    text = page.read_text(encoding="utf-8")
    with open(summary.result_path, encoding="utf-8-sig", newline="") as f:
        results = list(csv.DictReader(f))
    with open(summary.details_path, encoding="utf-8-sig", newline="") as f:
        details = list(csv.DictReader(f))
    apis = _grid(text, "api-counts")
    for direction, column in (("forward", "Forward Test Success"), ("backward", "Backward Test Success")):
        said = Counter(r[column].strip() for r in results if r[column].strip())
        assert {s: n for s, n in apis[direction].items() if n} == dict(said)
    console = summary.describe()
    assert "backward: pass 30, warning 8, error 5, SKIP 2" in console
    assert apis["backward"] == {"pass": 30, "warning": 8, "error": 5, "SKIP": 2}
    outputs = Counter(r["Status"] for r in details)
    badges = dict(re.findall(r'<span class="badge" style="[^"]*">(\w+) (\d+)</span>', text))
    assert {s: int(n) for s, n in badges.items()} == {s: outputs.get(s, 0) for s in badges}
    by_direction = _grid(text, "outputs-by-direction")
    for direction in ("forward", "backward"):
        want = Counter(r["Status"] for r in details if f".{direction}." in r["API Name"])
        assert {s: n for s, n in by_direction[direction].items() if n} == dict(want)
    assert f"{len(details)} compared outputs of {len(results)} APIs" in text
    plotted = sum(
        1 for r in details if r["Status"] != "SKIP" and (r["余弦相似度"].strip() or r["最大绝对误差"].strip())
    )
    skips = outputs.get("SKIP", 0)
    assert (
        f"Of the {len(details)} compared outputs, {plotted} have a cosine or max abs error and are plotted below, "
        f"{skips} are SKIP and {len(details) - plotted - skips} were graded without those metrics" in text
    )
    assert f"all {plotted} outputs with a cosine or max abs error, of {len(details)} compared" in text
    assert len(details) - plotted - skips > 0  # the dropout draws, checked by their law


def _plotted(svg: str) -> list[tuple[str, float]]:
    """(status, y) of each point of a plot."""
    marks = re.findall(r'<a class="pt"[^>]*data-status="(\w+)"><title>.*?</title><(circle|rect) ([^>]*)/>', svg)
    ys = []
    for status, shape, attributes in marks:
        values = dict(re.findall(r'(\w+)="([^"]*)"', attributes))
        ys.append((status, float(values["cy"]) if shape == "circle" else float(values["y"]) + 3.5))
    return ys


def test_the_second_plot_shows_why_a_point_is_red(gpt2):
    """The errors sit inside the card's pass corner of the cosine plot; in the honest-kernel plot every error is
    above the 2x line and every other output below it."""
    text = gpt2[1].read_text(encoding="utf-8")
    svg = re.search(r'<svg id="honest-plot".*?</svg>', text, re.S)[0]
    line = float(re.search(r'<line x1="[^"]*" y1="([^"]*)"[^>]*class="limit"/><text[^>]*>2x: error above', svg)[1])
    points = _plotted(svg)
    assert len(points) == len(_plotted(re.search(r'<svg id="plot".*?</svg>', text, re.S)[0])) == 114
    errors = [y for status, y in points if status == "error"]
    assert len(errors) == 10 and all(y < line for y in errors)
    assert all(y > line for status, y in points if status != "error")


def _row(name: str, dtype: str, status: str, message: str, **metrics: str) -> list[str]:
    from precheck.run_files.csv_files import DETAILS_HEADER

    cells = dict.fromkeys(DETAILS_HEADER[4:21], " ") | {"余弦相似度": "0.9", "最大绝对误差": "0.1"} | metrics
    return [name, "torch.float64", dtype, "(4,)", *cells.values(), status, message]


def test_every_advice_card_ends_with_what_to_do(tmp_path):
    rows = [
        _row("Torch.exp.0.forward.output.0", "torch.float16", "error", "inf/nan mismatch at 1 position(s)"),
        _row("Torch.mul.0.forward.output.0", "torch.float16", "error", "x", 小值域错误占比="0.5"),
        _row("Torch.add.0.forward.output.0", "torch.float32", "error", "y; inputs generated from statistics (seed 0)"),
        _row("Functional.dropout.0.forward.output.0", "torch.float32", "error", "random op, checked statistically: z"),
        _row("Torch.mm.0.forward.output.0", "torch.bfloat16", "error", "worse than an honest bf16 kernel: error 3x"),
        _row("Torch.div.0.forward.output.0", "torch.bfloat16", "warning", "only 99% within 1e-3", ULP误差最大值="0.5"),
    ]
    details = _details_csv(tmp_path / "accuracy_checking_details_1.csv", rows)
    codes = [("nonfinite_mismatch", 1, False), ("rule_failed", 0, False), ("rule_failed", 0, True),
             ("random_law", 0, False), ("honest_normwise", 0, False), ("rule_failed", 0, False)]  # fmt: skip
    reasons.path_for(details).write_text(
        "".join(
            json.dumps({"row": r[0], "reason": c, "standard": "", "ratio": None, "nonfinite": n,
                        "generated": g}) + "\n"
            for r, (c, n, g) in zip_strict(rows, codes)
        )
    )  # fmt: skip
    page = write_report(details).read_text("utf-8")
    cards = re.findall(r'<div class="finding" data-rule="(\w+)">(.*?)</div>', page)
    assert {rule for rule, _ in cards} == {
        "fp16_overflow", "underflow", "generated_inputs", "random_law", "beyond_rounding", "within_rounding"
    }  # fmt: skip
    for rule, card in cards:
        said = re.search(r'</h3><p>[^<]*</p><p class="action"><b>What to do:</b> ([^<]+)</p><details>', card)
        assert said and said[1][0].isupper() and said[1].endswith("."), (rule, card[:300])


def test_the_worst_apis_say_the_reason_that_decided(gpt2):
    """Each error's cosine and max abs error pass the card's rule: the line says the honest-kernel multiple."""
    from precheck.frames.run import worst_errors

    lines = worst_errors(gpt2[0].details_path)
    assert lines[0] == (
        "    Functional.layer_norm.2 backward.output.2: worse than an honest bf16 kernel: error 4.76x the honest "
        "kernel's (normwise, 2x allowed)"
    )
    assert len(lines) == 5 and all("x the honest kernel's" in line and "cosine" not in line for line in lines)


def test_a_backward_error_is_named_by_its_backward_reason(tmp_path):
    from precheck.frames.run import worst_errors

    blank = [" "] * 17
    forward = ["Torch.mm.0.forward.output.0", "torch.float64", "torch.bfloat16", "(4, 4)", "0.5", "0.3", *blank[2:]]
    forward += ["warning", "cosine 0.5 <= 0.99; what bf16 explains: within its rounding"]
    backward = ["Torch.mm.0.backward.output.1", "torch.float64", "torch.bfloat16", "(4, 4)", "0.99999", "6e-05"]
    backward += [*blank[2:], "error", "placeholder"]  # the words are the reasons file's, never cut from here
    details = _details_csv(tmp_path / "accuracy_checking_details_1.csv", [forward, backward])
    clause = "worse than an honest bf16 kernel: error 3x the honest kernel's (normwise, 2x allowed)"
    line = {"row": backward[0], "reason": "honest_normwise", "standard": "default", "ratio": 3.0, "nonfinite": 0,
            "generated": False, "clause": clause}  # fmt: skip
    (tmp_path / "accuracy_checking_reasons_1.jsonl").write_text(json.dumps(line) + "\n")
    assert worst_errors(details) == [
        "    Torch.mm.0 backward.output.1: worse than an honest bf16 kernel: error 3x the honest kernel's "
        "(normwise, 2x allowed)"
    ]


def test_report_of_a_folder_without_a_run_is_one_line_exit_2(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"precheck: error: {tmp_path}: no accuracy_checking_details_*.csv in this folder"


@pytest.mark.parametrize("name", ["train.py", "notes.csv"])
def test_report_of_a_file_that_is_no_runs_csv_says_which_files_it_reads(tmp_path, capsys, name):
    script = tmp_path / name
    script.write_text("import torch\na, b = 1, 2\n" + "x,y,z,w,v,u\n" * 20, encoding="utf-8")
    assert main(["report", str(script)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"precheck: error: {script}: not a run's CSV nor a compare's file; precheck report reads a")
    assert "accuracy_checking_details_<ts>.csv" in err and "Error tokenizing" not in err and err.count("\n") == 1


def _details_csv(path: Path, rows: list[list[str]]) -> Path:
    from precheck.run_files.csv_files import DETAILS_HEADER

    lines = [",".join(DETAILS_HEADER)] + [",".join(f'"{c}"' for c in row) for row in rows]
    path.write_text("\ufeff" + "\r\n".join(lines) + "\r\n", encoding="utf-8")
    return path


@browser
def test_a_run_that_compared_nothing_has_a_report_too(tmp_path):
    page = write_report(_details_csv(tmp_path / "accuracy_checking_details_1.csv", []))
    dom = dom_of(tmp_path, page)
    assert "0 compared outputs of 0 APIs" in dom and "0 of 0 APIs" in dom and 'class="pt"' not in dom


def test_a_row_no_grader_wrote_is_shown_not_a_traceback(tmp_path, capsys):
    odd = ["Odd name", "x", "y", "weird"] + ["abc"] * 17 + ["error", "m"]
    _details_csv(tmp_path / "accuracy_checking_details_1.csv", [odd])
    assert main(["report", str(tmp_path)]) == 0
    frame = load(tmp_path)
    assert frame.loc[0, "call"] == "Odd name" and frame.loc[0, "direction"] == "" and frame["cosine"].isna().all()
    assert "Odd name" in next(tmp_path.glob("report_*.html")).read_text(encoding="utf-8")


def test_a_report_that_cannot_be_written_costs_the_run_only_the_report(tmp_path, capsys, monkeypatch):
    import precheck.report.pages

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "out" / "report.html"))

    monkeypatch.setattr(precheck.report.pages, "write_report", refuse)  # the page run_ut writes
    dump = str(real_dump_json("mlp_fp32_tensor"))
    assert main(["run_ut", "-api_info", dump, "-o", str(tmp_path / "out"), "-q", "--report"]) == 0
    captured = capsys.readouterr()
    assert "precheck run_ut: 6 APIs" in captured.out
    assert captured.err.strip().splitlines() == [
        f"precheck: warning: no report: [Errno 13] Permission denied: '{tmp_path / 'out' / 'report.html'}'"
    ]


def test_a_large_run_plots_its_errors_first_and_at_most_max_points():
    import pandas as pd

    from precheck.report.html import MAX_POINTS, _points

    statuses = ["pass"] * 1000 + ["warning"] * 6000 + ["error"] * 100 + ["SKIP"] * 50
    frame = pd.DataFrame({"status": statuses, "cosine": 0.5, "max_abs_err": 1.0})
    points, total = _points(frame)
    assert total == 7100 and len(points) == MAX_POINTS
    assert points["status"].value_counts().to_dict() == {"warning": MAX_POINTS - 100, "error": 100}
    assert points.index.is_unique and points.index.is_monotonic_increasing


ROW = ["Torch.add.0.forward.output.0", "torch.float32", "torch.float32", "(2,)", "1.0", "0.0"] + [" "] * 15
HOSTILE_SIDECARS = {
    "not an object": (b"[1, 2]", "not a run record (a JSON list, not an object)"),
    "not UTF-8": (b'{"standard": "\xff\xfe"}', "not UTF-8 (byte 14)"),
    "not JSON": (b'{"standard": ', "not JSON (Expecting value: line 1 column 14 (char 13))"),
    "nested junk": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "a wrong type": (b'{"max_abs": "1e-4; rm -rf /"}', "max_abs is not a finite number"),
    "a huge number": (b'{"cosine": 1' + b"0" * 400 + b"}", "cosine is not a finite number"),
    "an infinite number": (b'{"max_abs": 1e999}', "max_abs is not a finite number"),
    "versions not texts": (b'{"versions": {"torch": {"a": [1]}}}', "versions is not an object of texts"),
    "a huge file": (b'{"x": "' + b"x" * (2 << 20) + b'"}', "over 1 MiB, larger than any run record"),
}


@pytest.mark.parametrize("content, problem", HOSTILE_SIDECARS.values(), ids=HOSTILE_SIDECARS)
def test_a_hostile_sidecar_is_one_warning_and_the_report_shows_the_csvs(tmp_path, capsys, content, problem):
    _details_csv(tmp_path / "accuracy_checking_details_1.csv", [ROW + ["pass", " "]])
    sidecar = tmp_path / "accuracy_checking_result_1.run.json"
    sidecar.write_bytes(content)
    assert main(["report", str(tmp_path)]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"precheck: warning: {sidecar}: {problem}; the report shows what the CSVs say without it"
    ]
    page = (tmp_path / "report_1.html").read_text(encoding="utf-8")
    assert "1 compared outputs of 1 APIs" in page and "<th>torch (this report)</th>" in page
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "accuracy_checking_details_1.csv", "accuracy_checking_result_1.run.json", "report_1.html"
    ]  # fmt: skip


def test_a_sidecar_that_is_a_fifo_never_hangs_the_report(tmp_path, capsys):
    _details_csv(tmp_path / "accuracy_checking_details_1.csv", [ROW + ["pass", " "]])
    sidecar = tmp_path / "accuracy_checking_result_1.run.json"
    os.mkfifo(sidecar)
    assert main(["report", str(tmp_path)]) == 0
    assert f"{sidecar}: not a regular file" in capsys.readouterr().err
    assert (tmp_path / "report_1.html").is_file()


def test_a_sidecar_naming_a_fifo_as_its_dump_never_hangs_the_report(tmp_path, capsys):
    """The advice reads the dump a sidecar names where a row says a NaN was born: a FIFO there is no dump."""
    _details_csv(tmp_path / "accuracy_checking_details_1.csv", [ROW + ["error", "inf/nan mismatch at 1 of 2"]])
    os.mkfifo(tmp_path / "dump.json")
    (tmp_path / "accuracy_checking_result_1.run.json").write_text(json.dumps({"dump": str(tmp_path / "dump.json")}))
    assert main(["report", str(tmp_path)]) == 0 and capsys.readouterr().err == ""
    assert (tmp_path / "report_1.html").is_file()


def test_text_no_encoding_can_write_is_written_as_its_escape(tmp_path, capsys):
    """A lone surrogate in the sidecar (JSON allows one) once cost the page: a traceback and an empty file."""
    _details_csv(tmp_path / "accuracy_checking_details_1.csv", [ROW + ["pass", " "]])
    (tmp_path / "accuracy_checking_result_1.run.json").write_text('{"note": "a\\ud800b"}', encoding="utf-8")
    assert main(["report", str(tmp_path)]) == 0
    assert "<th>note</th><td>a\\ud800b</td>" in (tmp_path / "report_1.html").read_text(encoding="utf-8")


def test_a_report_stopped_while_writing_leaves_the_page_it_replaces_and_no_part(tmp_path):
    _details_csv(tmp_path / "accuracy_checking_details_1.csv", [ROW + ["error", "m"]])
    page = tmp_path / "report_1.html"
    page.write_text("the page of the last report", encoding="utf-8")
    proc = report_with_a_full_disk(tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"precheck: error: cannot write {page}: File too large"]
    assert page.read_text(encoding="utf-8") == "the page of the last report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["accuracy_checking_details_1.csv", "report_1.html"]


def test_the_report_counts_timed_out_apis_apart(tmp_path):
    """A call past its time limit is a SKIP row (results.timed_out): the summary says how many, apart from the
    SKIPs that no more time would grade, and what to do about them."""
    graded = ["Torch.tanh.0.forward.output.0", "torch.float64", "torch.float32", "(2,)", "1.0", "0.0"]
    timed_out = ["Torch.precheck_hang.0.forward.output.0", " ", " ", " ", " ", " "]
    cells = [
        graded + [" "] * 15 + ["pass", " "],
        timed_out + [" "] * 15 + ["SKIP", "timed out after 0.3 s; not graded"],
        ["Torch.nope.0.forward.output.0", " ", " ", " ", " ", " "] + [" "] * 15 + ["SKIP", "not supported"],
    ]
    details = _details_csv(tmp_path / "accuracy_checking_details_1.csv", cells)
    codes = ["passed", "timed_out", "skipped"]  # the reasons file says which SKIP timed out, not the Message
    reasons.path_for(details).write_text(
        "".join(
            json.dumps({"row": r[0], "reason": c, "standard": "", "ratio": None, "nonfinite": 0, "generated": False})
            + "\n"
            for r, c in zip_strict(cells, codes)
        )
    )
    page = write_report(details).read_text("utf-8")
    assert "; 1 APIs timed out (SKIP, not graded; raise --timeout to grade them)</p>" in page
