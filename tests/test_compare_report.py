"""The report of a compare: the divergence curve, the first divergent record and the suspects' pre-check verdicts as
a person sees them in headless Chromium, and a compare's results as a DataFrame."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import DATA, browser, chromium, dom_of, report_with_a_full_disk

from precheck import load
from precheck.commands.cli import main
from precheck.report.compare_html import write_compare_report

CMP = DATA / "compare"


def _dump(variant: str) -> str:
    return str(CMP / variant / "step0" / "rank0" / "dump.json")


def _records(folder: Path) -> list[dict]:
    with open(next(folder.glob("compare_records_*.csv")), encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def gelu(tmp_path_factory):
    """The fp32 pair with a wrong GELU on the target, compared with --precheck --report."""
    out = tmp_path_factory.mktemp("gelu")
    argv = ["compare", "-target", _dump("fp32_tensor_gelu_bug"), "-bench", _dump("fp32_tensor"), "-o", str(out)]
    assert main([*argv, "--precheck", "--report"]) == 0
    return out, next(out.glob("compare_report_*.html"))


def test_compare_report_prints_where_the_page_is(gelu, capsys, tmp_path):
    out, page = gelu
    argv = ["compare", "-target", _dump("fp32_tensor_gelu_bug"), "-bench", _dump("fp32_tensor"), "-o", str(tmp_path)]
    assert main([*argv, "--report"]) == 0
    assert f"  report:  {next(tmp_path.glob('compare_report_*.html'))}" in capsys.readouterr().out
    assert main(["report", str(out), "-o", str(tmp_path / "again")]) == 0
    assert "precheck report: " in capsys.readouterr().out
    assert len(list((tmp_path / "again").glob("compare_report_*.html"))) == 1


@browser
def test_the_curve_plots_every_record_and_marks_the_first_divergent_one(gelu, tmp_path):
    out, page = gelu
    records = _records(out)
    dom = dom_of(tmp_path, page)
    assert dom.count('class="pt"') == len(records) == 16
    assert 'id="first-line"' in dom and "first divergent: Functional.gelu.0.forward" in dom
    first = re.search(r'<p id="first">(.*?)</p>', dom, re.S).group(1)
    assert "Functional.gelu.0.forward: its inputs agree" in first and "precheck: forward error" in first
    assert f"{len(records)} of {len(records)} records" in dom
    # the pre-check verdict sits in the suspect's row, and the suspects' run report is linked and on disk
    row = re.search(r'<tr id="rec-2">(.*?)</tr>', dom).group(1)
    assert "Functional.gelu.0.forward" in row and ">suspect<" in row and "forward error" in row
    link = re.search(r'<a href="(report_\d+\.html)">', dom).group(1)
    assert (page.parent / link).is_file()
    shot = tmp_path / "compare.png"
    chromium(tmp_path, "--window-size=1280,1600", f"--screenshot={shot}", page.as_uri())
    assert shot.stat().st_size > 10_000


@browser
def test_a_verdict_filter_and_a_sort_work_on_the_records(gelu, tmp_path):
    out, page = gelu
    inherited = [r["Record"] for r in _records(out) if r["Verdict"] == "inherited"]
    dom = dom_of(tmp_path, page, "?verdict=inherited&sort=record&desc=1")
    shown = re.findall(r'<tr id="rec-\d+"><td>([^<]*)</td>', dom)
    assert shown == sorted(inherited, reverse=True) and len(shown) == 12
    assert f"12 of {len(_records(out))} records" in dom


def test_the_compare_frame_holds_every_row_with_its_record_verdict(gelu):
    out, _ = gelu
    frame = load(next(out.glob("compare_result_*.csv")))
    with open(next(out.glob("compare_result_*.csv")), encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(frame) == len(rows) and list(frame["status"]) == [r["Result"] for r in rows]
    gelu_out = frame[(frame["record"] == "Functional.gelu.0.forward") & (frame["role"] == "output")].iloc[0]
    assert gelu_out["verdict"] == "suspect" and gelu_out["precheck"].startswith("forward error")
    assert gelu_out["call"] == "Functional.gelu.0" and gelu_out["output"] == 0 and gelu_out["cosine"] < 0.9999
    assert frame.attrs["mode"] == "tensor" and set(frame["direction"]) == {"forward", "backward"}


def test_statistics_percentages_are_fractions(tmp_path):
    argv = ["compare", "-target", _dump("bf16_statistics_gelu_bug"), "-bench", _dump("fp32_statistics")]
    assert main([*argv, "-o", str(tmp_path)]) == 0
    frame = load(tmp_path)
    with open(next(tmp_path.glob("compare_result_*.csv")), encoding="utf-8") as f:
        first = next(csv.DictReader(f))
    assert first["NormRelativeErr"].endswith("%")
    assert frame["norm_rel_diff"].iloc[0] == pytest.approx(float(first["NormRelativeErr"][:-1]) / 100)
    assert frame.attrs["mode"] == "statistics"


@browser
def test_msprobe_own_compare_csv_reads_and_renders(tmp_path):
    """msprobe writes no records CSV: the page plots its records with no verdict."""
    shutil.copy(CMP / "msprobe" / "tensor_fp32_gelu_bug.csv", tmp_path / "compare_result_20250101000000.csv")
    frame = load(tmp_path / "compare_result_20250101000000.csv")
    assert len(frame) > 40 and {"pass", "error"} <= set(frame["status"])
    page = write_compare_report(tmp_path / "compare_result_20250101000000.csv")
    dom = dom_of(tmp_path, page)
    assert dom.count('class="pt"') == frame["record"].nunique()
    assert "so no record has a verdict" in dom and 'id="first-line"' not in dom


@browser
def test_text_from_a_dump_never_becomes_markup_in_the_compare_report(gelu, tmp_path):
    out, _ = gelu
    hostile = "<img src=x onerror=document.title=1>"
    for source in out.glob("compare_*"):
        if source.suffix in (".csv", ".json"):
            text = source.read_text(encoding="utf-8").replace("Functional.gelu.0", hostile)
            (tmp_path / source.name).write_text(text, encoding="utf-8")
    summary = next(tmp_path.glob("compare_summary_*.json"))
    doc = json.loads(summary.read_text(encoding="utf-8"))
    assert hostile in doc["first_divergent"]["name"]
    doc["precheck_csv"] = None
    summary.write_text(json.dumps(doc), encoding="utf-8")
    page = write_compare_report(summary)
    assert "<img src=x" not in page.read_text(encoding="utf-8")
    dom = dom_of(tmp_path, page)
    assert "<img" not in dom and "&lt;img src=x" in dom


def test_a_compare_summary_without_its_csv_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "compare_summary_x.json").write_text("{}", encoding="utf-8")
    assert main(["report", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"precheck: error: {tmp_path}: no compare_result_*.csv in this folder"


def test_a_comparison_and_a_run_give_their_frames(tmp_path):
    from precheck.compare.dumps import compare_dumps
    from precheck.run_ut import run_ut

    result = compare_dumps(_dump("fp32_tensor_gelu_bug"), _dump("fp32_tensor"), tmp_path / "cmp")
    frame = result.frame()
    assert len(frame) == result.rows and set(frame["status"]) == set(result.results)
    assert frame.loc[frame["record"] == result.divergence.first.name, "verdict"].eq("suspect").all()
    summary = run_ut(_dump("fp32_tensor_gelu_bug"), tmp_path / "run", device="cpu", workers=1)
    run = summary.frame()
    assert set(run["call"]) >= {"Functional.gelu.0"} and run["status"].isin(["pass", "warning", "error", "SKIP"]).all()


@pytest.mark.parametrize("drop", ["Output deviation", "Inputs agree"])
def test_a_records_csv_missing_a_column_is_one_line_exit_2(gelu, tmp_path, capsys, drop):
    out, _ = gelu
    for source in out.glob("compare_*"):
        if source.suffix in (".csv", ".json"):
            shutil.copy(source, tmp_path / source.name)
    records = next(tmp_path.glob("compare_records_*.csv"))
    with open(records, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with open(records, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, [c for c in rows[0] if c != drop])
        writer.writeheader()
        writer.writerows({k: v for k, v in r.items() if k != drop} for r in rows)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"precheck: error: {records}: not a compare records CSV, missing columns: {drop}"


def test_a_compare_killed_midway_renders_as_unfinished(gelu, tmp_path, monkeypatch):
    """A compare stopped after 3 records (killed, out of memory) left CSVs that rendered as a finished compare
    whose runs agree everywhere; the page says it did not finish and how far it got."""
    from precheck.compare import dumps

    compare_pair, done = dumps._compare_pair, []

    def killed_after_three(*args):
        if len(done) == 3:
            raise KeyboardInterrupt
        done.append(compare_pair(*args))

    monkeypatch.setattr(dumps, "_compare_pair", killed_after_three)
    with pytest.raises(KeyboardInterrupt):
        dumps.compare_dumps(_dump("fp32_tensor"), _dump("fp32_tensor"), tmp_path)
    page = write_compare_report(tmp_path).read_text(encoding="utf-8")
    total = len(_records(gelu[0]))  # the same records as the complete compare of the gelu pair
    assert f"<b>This compare did not finish</b>: 3 of {total} records compared" in page
    assert "agree everywhere" not in page
    complete = write_compare_report(gelu[0], tmp_path / "complete").read_text(encoding="utf-8")
    assert "did not finish" not in complete


def test_a_compare_report_that_cannot_be_written_leaves_the_page_it_replaces(tmp_path):
    """The compare's page was written in place: a full disk or a kill mid-write left a part of a page where the
    last report was. It is written whole or not at all, as a run's page is."""
    argv = ["compare", "-target", _dump("fp32_tensor_gelu_bug"), "-bench", _dump("fp32_tensor"), "-o", str(tmp_path)]
    assert main(argv) == 0
    page = tmp_path / next(tmp_path.glob("compare_result*.csv")).name.replace("compare_result", "compare_report")
    page = page.with_suffix(".html")
    page.write_text("the page of the last report", encoding="utf-8")
    files = sorted(p.name for p in tmp_path.iterdir())
    proc = report_with_a_full_disk(tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"precheck: error: cannot write {page}: File too large"]
    assert page.read_text(encoding="utf-8") == "the page of the last report"
    assert sorted(p.name for p in tmp_path.iterdir()) == files


def test_the_compare_mode_is_the_one_its_summary_records(tmp_path):
    """The frame's (and the page's) mode is the one precheck compare recorded in its summary, even where the CSV's
    columns cannot tell it (here a statistics compare whose metric columns were cut); only a CSV with no summary
    beside it, as msprobe's own compare writes, has its mode told from its columns."""
    from precheck.compare.modes import MODES
    from precheck.frames.compare import load_compare
    from precheck.schema import COMPARE_MODES

    assert tuple(MODES) == COMPARE_MODES
    argv = ["compare", "-target", _dump("bf16_statistics_gelu_bug"), "-bench", _dump("fp32_statistics")]
    assert main([*argv, "-o", str(tmp_path)]) == 0
    compare_csv = next(tmp_path.glob("compare_result_*.csv"))
    with open(compare_csv, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    kept = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "Result"]
    with open(compare_csv, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, kept, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    assert load_compare(compare_csv).attrs["mode"] == "statistics"
    next(tmp_path.glob("compare_summary_*.json")).unlink()
    assert load_compare(compare_csv).attrs["mode"] == "md5"  # no summary: the columns are all there is
