"""precheck regress: the regression gate between a baseline and a current result CSV (hand-made pairs in every
dialect msprobe and precheck write, the CLI's exit codes, the report files, and a real msprobe CSV against a
precheck run of the same dump)."""

from __future__ import annotations

import csv
import io
import itertools
import json
import shutil
from pathlib import Path

import pytest
from helpers import DATA, real_dump_json

from precheck.commands.cli import main
from precheck.regress import (
    FAIL,
    IMPROVED,
    MISSING,
    NEW,
    PASS_OUTCOME,
    STILL_FAILING,
    RegressError,
    Statuses,
    api_outcome,
    direction_outcome,
    read_result_csv,
    regress,
    write_report,
)

BOM = b"\xef\xbb\xbf"
MSPROBE_RESULT = DATA / "msprobe" / "gpt2_bf16_tensor_result.csv"
MSPROBE_DETAILS = DATA / "msprobe" / "accuracy_checking_details_20261122032509.csv"


# ================================================================================================= helpers


def write_result(
    path: Path,
    rows: list[tuple[str, ...]],
    *,
    bom: bool = True,
    crlf: bool = True,
    header: str = "API name",
    message: bool = True,
) -> Path:
    """A result CSV as bytes: rows are (api, forward, backward[, message]); ``message=False`` writes msprobe's
    3-field rows (Message only where a row gives one); a backward of "" is written as msprobe's blank " "."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n" if crlf else "\n")
    writer.writerow([header, "Forward Test Success", "Backward Test Success", "Message"])
    for api, fwd, bwd, *msg in rows:
        row = [api, fwd, bwd or " "]
        if message or msg:
            row.append(msg[0] if msg else " ")
        writer.writerow(row)
    path.write_bytes((BOM if bom else b"") + buf.getvalue().encode("utf-8"))
    return path


# One API per outcome (and per interesting direction), baseline statuses.
BASELINE_ROWS = [
    ("Torch.same.0", "pass", "pass"),  # PASS
    ("Torch.warn_stays.0", "warning", ""),  # PASS (warning -> warning, blank backward both sides)
    ("Torch.worse.0", "pass", "pass"),  # FAIL  (backward pass -> warning)
    ("Torch.lost.0", "error", "pass"),  # FAIL  (error -> SKIP: a check lost)
    ("Torch.better.0", "error", "warning"),  # IMPROVED
    ("Torch.still.0", "error", "error"),  # STILL_FAILING
    ("Torch.gone.0", "pass", "pass", "bye"),  # MISSING
]
CURRENT_ROWS = [  # another order, other spellings, 3-field rows
    ("Torch.fresh.0", "Warning", "PASS"),  # NEW
    ("Torch.still.0", "ERROR", "Error"),
    ("Torch.better.0", "Pass", "pass"),
    ("Torch.worse.0", "PASS", "Warning"),
    ("Torch.lost.0", "Skip", "Skip", "random op"),
    ("Torch.warn_stays.0", "warning", ""),
    ("Torch.same.0", "pass", "pass"),
]
EXPECTED = {
    "Torch.same.0": PASS_OUTCOME,
    "Torch.warn_stays.0": PASS_OUTCOME,
    "Torch.worse.0": FAIL,
    "Torch.lost.0": FAIL,
    "Torch.better.0": IMPROVED,
    "Torch.still.0": STILL_FAILING,
    "Torch.gone.0": MISSING,
    "Torch.fresh.0": NEW,
}


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """Baseline as precheck writes it (BOM, CRLF, 4 fields); current as msprobe's stage 2 might (no BOM, LF,
    ``API Name``, 3 fields, mixed-case statuses)."""
    base = write_result(tmp_path / "base.csv", BASELINE_ROWS)
    cur = write_result(tmp_path / "cur.csv", CURRENT_ROWS, bom=False, crlf=False, header="API Name", message=False)
    return base, cur


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("precheck: error: "), err
    assert "Traceback" not in err
    return lines[0]


# ================================================================================================= the rules

S = {"pass": "pass", "warning": "warning", "error": "error", "SKIP": "SKIP", "blank": None}
# baseline -> current: outcome of one direction (the table of the module docstring, written out)
DIRECTION_TABLE = {
    ("pass", "pass"): "PASS",
    ("pass", "warning"): "FAIL",
    ("pass", "error"): "FAIL",
    ("pass", "SKIP"): "FAIL",
    ("pass", "blank"): "FAIL",
    ("warning", "pass"): "IMPROVED",
    ("warning", "warning"): "PASS",
    ("warning", "error"): "FAIL",
    ("warning", "SKIP"): "FAIL",
    ("warning", "blank"): "FAIL",
    ("error", "pass"): "IMPROVED",
    ("error", "warning"): "IMPROVED",
    ("error", "error"): "STILL_FAILING",
    ("error", "SKIP"): "FAIL",
    ("error", "blank"): "FAIL",
    ("SKIP", "pass"): "IMPROVED",
    ("SKIP", "warning"): "IMPROVED",
    ("SKIP", "error"): "FAIL",
    ("SKIP", "SKIP"): "PASS",
    ("SKIP", "blank"): "PASS",
    ("blank", "pass"): "IMPROVED",
    ("blank", "warning"): "IMPROVED",
    ("blank", "error"): "FAIL",
    ("blank", "SKIP"): "PASS",
    ("blank", "blank"): "PASS",
}


@pytest.mark.parametrize("old,new", sorted(DIRECTION_TABLE))
def test_direction_outcome_table(old: str, new: str) -> None:
    assert direction_outcome(S[old], S[new]) == DIRECTION_TABLE[old, new]


@pytest.mark.parametrize(
    "base,cur,expected",
    [
        (("pass", "error"), ("error", "pass"), FAIL),  # worse forward, better backward: FAIL wins
        (("error", "error"), ("warning", "error"), IMPROVED),  # better forward, still failing backward
        (("error", "pass"), ("error", "pass"), STILL_FAILING),  # still failing forward, pass backward
        (("warning", None), ("warning", None), PASS_OUTCOME),
        (("error", "pass"), ("error", None), FAIL),  # backward lost: FAIL beats STILL_FAILING
    ],
)
def test_api_outcome_precedence(base: tuple, cur: tuple, expected: str) -> None:
    assert api_outcome(Statuses(*base), Statuses(*cur)) == expected


def test_presence_decides_missing_and_new() -> None:
    assert api_outcome(Statuses("error", "error"), None) == MISSING
    assert api_outcome(None, Statuses("error", "error")) == NEW


# ================================================================================================= reading and matching


def test_every_outcome_on_a_crafted_pair(pair: tuple[Path, Path]) -> None:
    report = regress(*pair)
    assert {a.api: a.outcome for a in report.apis} == EXPECTED
    # baseline order, then the new API
    assert [a.api for a in report.apis] == [r[0] for r in BASELINE_ROWS] + ["Torch.fresh.0"]
    assert report.counts == {"FAIL": 2, "MISSING": 1, "IMPROVED": 1, "STILL_FAILING": 1, "NEW": 1, "PASS": 2}
    by_api = {a.api: a for a in report.apis}
    # statuses normalised to precheck's spelling, blank as None, absent side as None
    assert by_api["Torch.worse.0"].current == Statuses("pass", "warning")
    assert by_api["Torch.lost.0"].current == Statuses("SKIP", "SKIP")
    assert by_api["Torch.warn_stays.0"].baseline == Statuses("warning", None)
    assert by_api["Torch.gone.0"].current is None and by_api["Torch.fresh.0"].baseline is None


@pytest.mark.parametrize(
    "bom,crlf,header,message",
    list(itertools.product([True, False], [True, False], ["API name", "API Name", "api NAME"], [True, False])),
)
def test_every_dialect_reads_the_same(tmp_path: Path, bom: bool, crlf: bool, header: str, message: bool) -> None:
    path = write_result(tmp_path / "r.csv", CURRENT_ROWS, bom=bom, crlf=crlf, header=header, message=message)
    raw = path.read_bytes()
    assert raw.startswith(BOM) == bom and (b"\r\n" in raw) == crlf
    assert read_result_csv(path) == {
        "Torch.fresh.0": Statuses("warning", "pass"),
        "Torch.still.0": Statuses("error", "error"),
        "Torch.better.0": Statuses("pass", "pass"),
        "Torch.worse.0": Statuses("pass", "warning"),
        "Torch.lost.0": Statuses("SKIP", "SKIP"),
        "Torch.warn_stays.0": Statuses("warning", None),
        "Torch.same.0": Statuses("pass", "pass"),
    }


def test_blank_backward_is_not_graded(tmp_path: Path) -> None:
    """ " " (msprobe's blank) and an empty cell both mean "no backward": blank -> blank passes, a graded backward
    that becomes blank is a lost check, a blank that becomes graded is gained coverage."""
    base = tmp_path / "b.csv"
    base.write_bytes(
        BOM + b"API name,Forward Test Success,Backward Test Success,Message\r\n"
        b"A.x.0,pass, \r\nA.y.0,pass,pass\r\nA.z.0,pass,\r\n"
    )
    cur = write_result(
        tmp_path / "c.csv", [("A.x.0", "pass", ""), ("A.y.0", "pass", ""), ("A.z.0", "pass", "pass")], message=False
    )
    assert b"A.x.0,pass, \r\n" in cur.read_bytes()  # msprobe's 3-field row with a blank backward
    assert {a.api: a.outcome for a in regress(base, cur).apis} == {
        "A.x.0": PASS_OUTCOME,
        "A.y.0": FAIL,
        "A.z.0": IMPROVED,
    }


def test_order_of_rows_does_not_matter(tmp_path: Path) -> None:
    base = write_result(tmp_path / "base.csv", BASELINE_ROWS)
    cur = tmp_path / "cur.csv"
    reports = []
    for rows in (CURRENT_ROWS, CURRENT_ROWS[::-1], sorted(CURRENT_ROWS)):
        write_result(cur, rows)
        reports.append(regress(base, cur))
    assert reports[0].apis == reports[1].apis == reports[2].apis
    assert reports[0].to_json() == reports[1].to_json() == reports[2].to_json()


def test_new_apis_follow_the_baseline_in_the_current_files_order(tmp_path: Path) -> None:
    base = write_result(tmp_path / "b.csv", [("M.b.0", "pass", "pass"), ("M.a.0", "pass", "pass")])
    cur = write_result(
        tmp_path / "c.csv",
        [("Z.new.0", "pass", ""), ("M.a.0", "pass", "pass"), ("A.new.0", "pass", ""), ("M.b.0", "pass", "pass")],
    )
    assert [(a.api, a.outcome) for a in regress(base, cur).apis] == [
        ("M.b.0", "PASS"),
        ("M.a.0", "PASS"),
        ("Z.new.0", "NEW"),
        ("A.new.0", "NEW"),
    ]


# ================================================================================================= the CLI


def cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(["regress", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_exit_1_on_fail_and_missing_prints_summary_and_paths(pair, tmp_path, capsys) -> None:
    base, cur = pair
    code, out, err = cli(capsys, "--baseline", str(base), "--current", str(cur), "-o", str(tmp_path / "rep"))
    assert code == 1
    assert "8 APIs" in out
    assert "FAIL 2, MISSING 1, IMPROVED 1, STILL_FAILING 1, NEW 1, PASS 2" in out
    assert str(tmp_path / "rep" / "regress_report.md") in out and str(tmp_path / "rep" / "regress_report.json") in out
    assert "2 got worse (FAIL)" in err and "1 went MISSING" in err
    assert (tmp_path / "rep" / "regress_report.md").is_file() and (tmp_path / "rep" / "regress_report.json").is_file()


@pytest.mark.parametrize(
    "current_rows,strict,expected",
    [
        ([("A.a.0", "pass", "pass"), ("A.b.0", "error", "")], False, 0),  # PASS + STILL_FAILING
        ([("A.a.0", "pass", "pass"), ("A.b.0", "error", ""), ("A.n.0", "error", "error")], False, 0),  # + NEW
        ([("A.a.0", "pass", "pass"), ("A.b.0", "error", "")], True, 0),  # strict, nothing improved
        ([("A.a.0", "pass", "pass"), ("A.b.0", "warning", "")], False, 0),  # IMPROVED
        ([("A.a.0", "pass", "pass"), ("A.b.0", "warning", "")], True, 1),  # IMPROVED, --strict
        ([("A.a.0", "warning", "pass"), ("A.b.0", "error", "")], False, 1),  # FAIL
        ([("A.b.0", "error", "")], False, 1),  # MISSING
    ],
)
def test_cli_exit_codes(tmp_path, capsys, current_rows, strict, expected) -> None:
    base = write_result(tmp_path / "base.csv", [("A.a.0", "pass", "pass"), ("A.b.0", "error", "")])
    cur = write_result(tmp_path / "cur.csv", current_rows, message=False)
    code, out, err = cli(
        capsys, "--baseline", str(base), "--current", str(cur), "-o", str(tmp_path), *(["--strict"] if strict else [])
    )
    assert code == expected
    assert ("precheck: regress:" in err) == (expected != 0)
    assert err.startswith("precheck: warning: neither run has a run record")  # CSVs alone: settings not compared
    if strict and expected:
        assert "--strict" in err


def test_cli_takes_run_folders_and_reads_their_newest_runs(tmp_path, capsys) -> None:
    folders = []
    for side, newest in (("base", BASELINE_ROWS), ("cur", CURRENT_ROWS)):
        folder = tmp_path / side
        folder.mkdir()
        for stamp, rows in (("20260101000000", [("Torch.old.0", "error", "error")]), ("20260102000000", newest)):
            write_result(folder / f"accuracy_checking_result_{stamp}.csv", rows)
            (folder / f"accuracy_checking_details_{stamp}.csv").write_bytes(b"")
        folders.append(str(folder))
    code, out, _ = cli(capsys, "--baseline", folders[0], "--current", folders[1], "-o", str(tmp_path / "rep"))
    assert code == 1 and "FAIL 2, MISSING 1, IMPROVED 1, STILL_FAILING 1, NEW 1, PASS 2" in out
    report = json.loads((tmp_path / "rep" / "regress_report.json").read_text())
    assert report["current"] == str(tmp_path / "cur" / "accuracy_checking_result_20260102000000.csv")
    code, _, err = cli(capsys, "--baseline", str(tmp_path / "rep"), "--current", folders[1])
    assert (
        code == 2 and err == f"precheck: error: {tmp_path / 'rep'}: no accuracy_checking_result_*.csv in this folder\n"
    )


def test_cli_default_report_dir_is_the_current_folder(pair, tmp_path, capsys, monkeypatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    cli(capsys, "--baseline", str(pair[0]), "--current", str(pair[1]))
    assert sorted(p.name for p in work.iterdir()) == ["regress_report.html", "regress_report.json", "regress_report.md"]


def _details_csv(tmp_path: Path) -> Path:
    return Path(shutil.copy(MSPROBE_DETAILS, tmp_path / "details.csv"))


def put(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda d: d / "nope.csv", "no such file"),
        (lambda d: d, "no accuracy_checking_result_*.csv in this folder"),  # a folder that holds no run
        (_details_csv, "no 'Forward Test Success', 'Backward Test Success' column"),
        (lambda d: put(d / "x.json", b'{"a": 1}'), "not a result CSV"),
        (lambda d: put(d / "e.csv", b""), "not a result CSV"),
        (lambda d: put(d / "b.csv", b"\xff\xfe\x00\x81binary"), "not UTF-8"),
        (lambda d: write_result(d / "u.csv", [("A.a.0", "passed", "pass")]), "'passed'"),
        (lambda d: write_result(d / "d.csv", [("A.a.0", "pass", "pass"), ("A.a.0", "error", "pass")]), "twice"),
        (
            lambda d: put(d / "s.csv", b"API name,Forward Test Success,Backward Test Success,Message\nA.a.0,pass\n"),
            "expected 3 or 4",
        ),
        (
            lambda d: put(d / "n.csv", b"API name,Forward Test Success,Backward Test Success\n ,pass,pass\n"),
            "no API name",
        ),
    ],
)
@pytest.mark.parametrize("side", ["baseline", "current"])
def test_cli_exit_2_on_unusable_input(tmp_path, capsys, make, needle, side) -> None:
    bad = make(tmp_path)
    good = write_result(tmp_path / "good.csv", [("A.a.0", "pass", "pass")])
    files = {"baseline": good, "current": good, side: bad}
    out_dir = tmp_path / "rep"
    code, out, err = cli(
        capsys, "--baseline", str(files["baseline"]), "--current", str(files["current"]), "-o", str(out_dir)
    )
    assert code == 2 and out == ""
    line = one_line_error(err)
    assert needle in line and str(bad) in line
    assert not out_dir.exists()  # no report from unusable input
    with pytest.raises(RegressError):
        regress(files["baseline"], files["current"])


def test_cli_exit_2_when_the_report_cannot_be_written(pair, tmp_path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = cli(capsys, "--baseline", str(pair[0]), "--current", str(pair[1]), "-o", str(blocker))
    assert code == 2 and "cannot write the report" in one_line_error(err)


# ================================================================================================= the report files


def test_markdown(pair: tuple[Path, Path]) -> None:
    base, cur = pair
    assert (
        regress(base, cur).to_markdown()
        == f"""# precheck regress

- baseline: `{base}`
- current: `{cur}`

| outcome | APIs |
|---|---|
| FAIL | 2 |
| MISSING | 1 |
| IMPROVED | 1 |
| STILL_FAILING | 1 |
| NEW | 1 |
| PASS | 2 |
| total | 8 |

## The settings were not compared

- neither run has a run record (accuracy\\_checking\\_result\\_&lt;ts&gt;.run.json beside its result CSV): \
the settings the two runs were graded with (torch version, target, device, standard, thresholds) were not compared

## FAIL (2)

| API | baseline forward | baseline backward | current forward | current backward | reason |
|---|---|---|---|---|---|
| Torch.worse.0 | pass | pass | pass | warning |  |
| Torch.lost.0 | error | pass | SKIP | SKIP | random op |

## MISSING (1)

| API | baseline forward | baseline backward | current forward | current backward | reason |
|---|---|---|---|---|---|
| Torch.gone.0 | pass | pass | absent | absent | absent from the current run |

## IMPROVED (1)

| API | baseline forward | baseline backward | current forward | current backward | reason |
|---|---|---|---|---|---|
| Torch.better.0 | error | warning | pass | pass |  |

## STILL_FAILING (1)

| API | baseline forward | baseline backward | current forward | current backward | reason |
|---|---|---|---|---|---|
| Torch.still.0 | error | error | error | error |  |

## NEW (1)

| API | baseline forward | baseline backward | current forward | current backward | reason |
|---|---|---|---|---|---|
| Torch.fresh.0 | absent | absent | warning | pass |  |
"""
    )


def test_markdown_lists_only_outcomes_that_occurred_and_blank_as_dash(tmp_path: Path) -> None:
    base = write_result(tmp_path / "b.csv", [("A.a.0", "pass", ""), ("A.b.0", "pass", "pass")])
    cur = write_result(tmp_path / "c.csv", [("A.a.0", "warning", ""), ("A.b.0", "pass", "pass")])
    md = regress(base, cur).to_markdown()
    assert "## FAIL (1)" in md and "| A.a.0 | pass | - | warning | - |  |" in md
    assert "## PASS" not in md and "## MISSING" not in md and "A.b.0" not in md


def test_json(pair: tuple[Path, Path], tmp_path: Path) -> None:
    base, cur = pair
    md_path, json_path = write_report(regress(base, cur), tmp_path / "out")
    assert (md_path.name, json_path.name) == ("regress_report.md", "regress_report.json")
    text = json_path.read_text(encoding="utf-8")
    doc = json.loads(text)
    assert text == json.dumps(doc, indent=2, sort_keys=True) + "\n"  # sorted keys, nothing else
    assert doc["baseline"] == str(base) and doc["current"] == str(cur)
    assert doc["counts"] == {"FAIL": 2, "MISSING": 1, "IMPROVED": 1, "STILL_FAILING": 1, "NEW": 1, "PASS": 2}
    assert [a["api"] for a in doc["apis"]] == [r[0] for r in BASELINE_ROWS] + ["Torch.fresh.0"]
    by_api = {a["api"]: a for a in doc["apis"]}
    assert by_api["Torch.lost.0"] == {
        "api": "Torch.lost.0",
        "outcome": "FAIL",
        "baseline": {"forward": "error", "backward": "pass"},
        "current": {"forward": "SKIP", "backward": "SKIP"},
        "rank": None,  # one run's CSVs: no rank (a step's run names each API's, tests/test_regress_steps.py)
        "reason": "random op",  # its current row's Message, the first clause
    }
    assert by_api["Torch.warn_stays.0"]["current"] == {"forward": "warning", "backward": None}
    assert by_api["Torch.gone.0"]["current"] is None and by_api["Torch.fresh.0"]["baseline"] is None
    assert set(doc) == {"baseline", "current", "counts", "settings_differ", "settings_unchecked", "ranks", "apis"}
    assert doc["ranks"] == []
    assert doc["settings_differ"] == []  # CSVs without run records: nothing says how they were graded
    assert doc["settings_unchecked"] == ["baseline", "current"]  # and the report says so
    assert md_path.read_bytes() == regress(base, cur).to_markdown().encode("utf-8")


def _record(result: Path, **settings: object) -> None:
    """The run record precheck writes beside a result CSV, with ``settings`` over a plain run's."""
    record = {"target": "device", "device": "cpu", "standard": "default", "cosine": 0.99, "max_abs": 1e-4,
              "bench_device": None, "seed": 0, "dump": str(result), "versions": {"torch": "2.13.0+cpu"}}  # fmt: skip
    for key, value in settings.items():
        record["versions" if key == "torch" else key] = {"torch": value} if key == "torch" else value
    result.with_name(result.name.removesuffix(".csv") + ".run.json").write_text(json.dumps(record))


def test_runs_graded_with_different_settings_are_named_and_fail_the_gate(tmp_path, capsys) -> None:
    # A --target device baseline against a --target recorded run said "FAIL 2, IMPROVED 5", no word of the targets.
    rows = [("A.a.0", "pass", "pass"), ("A.b.0", "error", "")]
    base = write_result(tmp_path / "accuracy_checking_result_20260101000000.csv", rows)
    cur = write_result(tmp_path / "accuracy_checking_result_20260102000000.csv", rows)
    _record(base, seed=0)
    _record(cur, target="recorded", seed=3, torch="2.5.1", dump="elsewhere")  # seed and dump decide no verdict
    code, out, err = cli(capsys, "--baseline", str(base), "--current", str(cur), "-o", str(tmp_path / "r"))
    differ = "target: device in the baseline, recorded in the current run; torch: 2.13.0+cpu in the baseline, "
    assert code == 1 and "PASS 1" in out
    assert err.startswith(f"precheck: warning: the two runs were made with different settings: {differ}2.5.1 in the")
    assert "precheck: regress: their settings differ (--settings-may-differ to compare them all the same)" in err
    md = (tmp_path / "r" / "regress_report.md").read_text()
    assert "## The two runs were made with different settings\n\n- target: device in the baseline, recorded" in md
    doc = json.loads((tmp_path / "r" / "regress_report.json").read_text())
    assert [d.split(":")[0] for d in doc["settings_differ"]] == ["target", "torch"]
    code, _, err = cli(capsys, "--baseline", str(base), "--current", str(cur), "-o", str(tmp_path), "--settings-may-d")
    assert code == 0 and "different settings" in err
    _record(cur, seed=3)
    assert cli(capsys, "--baseline", str(base), "--current", str(cur), "-o", str(tmp_path))[:3:2] == (0, "")


def test_reports_are_byte_identical_for_the_same_inputs(pair, tmp_path, capsys) -> None:
    base, cur = pair
    outputs = []
    files = ("regress_report.html", "regress_report.json", "regress_report.md")
    for name in ("one", "two"):
        cli(capsys, "--baseline", str(base), "--current", str(cur), "-o", str(tmp_path / name))
        outputs.append([(tmp_path / name / f).read_bytes() for f in files])
    assert outputs[0] == outputs[1]
    assert b"\r\n" not in b"".join(outputs[0])
    cli(capsys, "--baseline", str(base), "--current", str(cur), "-o", str(tmp_path / "one"))  # overwrite
    assert [(tmp_path / "one" / f).read_bytes() for f in files] == outputs[0]
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == list(files)


# ================================================================================================= real files


def _oracle(old: str | None, new: str | None) -> str:
    """What the statuses imply, written independently of precheck.regress: ranks, not graded = None."""
    rank = {"pass": 0, "warning": 1, "error": 2}
    a, b = rank.get((old or "").lower()), rank.get((new or "").lower())
    if a is None and b is None:
        return "PASS"
    if a is None:
        return "FAIL" if b == 2 else "IMPROVED"
    if b is None or b > a:
        return "FAIL"
    if b < a:
        return "IMPROVED"
    return "STILL_FAILING" if b == 2 else "PASS"


def _raw(path: Path) -> dict[str, tuple[str, str]]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f))
    return {r[0]: (r[1].strip(), r[2].strip()) for r in rows[1:] if r}


@pytest.fixture(scope="module")
def precheck_result(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from precheck.run_ut import run_ut

    out = tmp_path_factory.mktemp("run_ut")
    return run_ut(real_dump_json("gpt2_bf16_tensor"), out, device="cpu").result_path


def test_real_msprobe_csv_against_itself(tmp_path, capsys) -> None:
    raw = MSPROBE_RESULT.read_bytes()
    assert raw.startswith(BOM) and b"Functional.embedding.0,pass,pass\r\n" in raw  # msprobe's 3-field rows
    lf_copy = tmp_path / "lf.csv"
    lf_copy.write_bytes(raw[3:].replace(b"\r\n", b"\n"))
    report = regress(MSPROBE_RESULT, lf_copy)
    assert len(report.apis) == 47
    assert report.counts == {"FAIL": 0, "MISSING": 0, "IMPROVED": 0, "STILL_FAILING": 2, "NEW": 0, "PASS": 45}
    assert [a.api for a in report.apis if a.outcome == STILL_FAILING] == [
        "Functional.scaled_dot_product_attention.0",
        "Functional.scaled_dot_product_attention.1",
    ]
    code, _, _ = cli(
        capsys, "--baseline", str(MSPROBE_RESULT), "--current", str(lf_copy), "-o", str(tmp_path), "--strict"
    )
    assert code == 0


def test_real_msprobe_baseline_against_a_precheck_run(precheck_result: Path, tmp_path, capsys) -> None:
    msprobe, ours = _raw(MSPROBE_RESULT), _raw(precheck_result)
    assert len(msprobe) == len(ours) == 47 and set(msprobe) == set(ours)
    report = regress(MSPROBE_RESULT, precheck_result)
    assert len(report.apis) == 47
    assert report.counts["NEW"] == report.counts["MISSING"] == 0
    assert [a.api for a in report.apis] == list(msprobe)  # msprobe's order
    for a in report.apis:
        # the statuses in the report are the files' own, normalised
        assert (a.baseline.forward, a.baseline.backward) == tuple(s.lower() or None for s in msprobe[a.api])
        assert (a.current.forward or "", a.current.backward or "") == tuple(
            s if s == "SKIP" else s.lower() for s in ours[a.api]
        )
        fwd = _oracle(*[s[0] for s in (msprobe[a.api], ours[a.api])])
        bwd = _oracle(*[s[1] for s in (msprobe[a.api], ours[a.api])])
        implied = next(o for o in ("FAIL", "IMPROVED", "STILL_FAILING", "PASS") if o in (fwd, bwd))
        assert a.outcome == implied, a
    by_api = {a.api: a for a in report.apis}
    # msprobe compares two dropout draws (pass by luck of its seed) and grades SDPA (dropout_p=0.1) error;
    # precheck checks both by the law of their draws, SDPA's backward it leaves unchecked: a lost check
    assert by_api["Functional.dropout.0"].current == Statuses("pass", "pass")
    for api in ("Functional.scaled_dot_product_attention.0", "Functional.scaled_dot_product_attention.1"):
        assert by_api[api].current == Statuses("pass", "SKIP") and by_api[api].outcome == FAIL
    assert by_api["Tensor.__add__.0"].baseline.backward is None  # msprobe's blank backward
    assert sum(a.outcome == FAIL for a in report.apis) >= 7
    assert (
        cli(capsys, "--baseline", str(MSPROBE_RESULT), "--current", str(precheck_result), "-o", str(tmp_path))[0] == 1
    )
    # the other way round: SKIP -> pass is gained coverage, SKIP -> error a new error
    back = {a.api: a.outcome for a in regress(precheck_result, MSPROBE_RESULT).apis}
    assert back["Functional.dropout.0"] == PASS_OUTCOME
    assert back["Functional.scaled_dot_product_attention.0"] == FAIL
