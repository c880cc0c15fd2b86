"""Never run what a dump smuggles in: CSV formula injection, malformed record names, tensor files that leave the
dump directory or carry pickled code. Every hostile record is a SKIP row with its reason; the run goes on and the
other APIs are graded."""

from __future__ import annotations

import csv
import json
import os
import pickle
import re
import shutil
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from precheck.commands.cli import main
from precheck.dump.records import MAX_NAME, pair_records
from precheck.escape import unescape, unformula
from precheck.grader import Comparison
from precheck.grader.metrics import Metrics
from precheck.results import DetailRow, Direction
from precheck.run_files.csv_files import MAX_CELL, cell, detail_row, text, write_csv
from precheck.run_ut import run_ut

FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)", re.IGNORECASE)
STATUSES = {"pass", "warning", "error", "SKIP", " "}


def tensor(data_name: str | None = None, shape=(2, 3), dtype="torch.float32", **extra) -> dict:
    rec = {
        "type": "torch.Tensor",
        "dtype": dtype,
        "shape": list(shape),
        "Max": 1.0,
        "Min": -1.0,
        "Mean": 0.0,
        "Norm": 2.0,
        "requires_grad": False,
        **extra,
    }
    if data_name is not None:
        rec["data_name"] = data_name
    return rec


def write(path: Path, data: dict, task: str = "tensor") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"task": task, "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}),
        encoding="utf-8",
    )
    return path


def read(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f))


def rows_by_name(path: Path) -> dict[str, list[str]]:
    return {r[0]: r for r in read(path)[1:]}


def assert_no_formula(rows: list[list[str]], numeric_columns: range = range(0)) -> None:
    """No cell starts a spreadsheet formula, except a plain number; numeric columns hold numbers or a blank."""
    for row in rows:
        for i, value in enumerate(row):
            if i in numeric_columns:
                assert value == " " or isinstance(float(value), float), (i, value)
            elif value.startswith(FORMULA_START):
                assert NUMBER.fullmatch(value), (i, value, row[0])


# ------------------------------------------------------------------------------------ 1. formula injection


@pytest.mark.parametrize(
    "value",
    [
        "=1+1",
        "+1+1",
        "-2+3",
        "@SUM(A1)",
        '=HYPERLINK("http://x")',
        "-x.pt: refused",
        "+cmd|' /C calc'!A0",
        "\uff1d1+1",
        "-",
        "-inf and more",
        "-1+cmd|' /C calc'!A0",
    ],
)
def test_text_that_starts_a_formula_gets_a_quote(value):
    assert cell(value) == "'" + value
    assert text(value) == "'" + value
    # Reversible: a text that already starts with the quote is a different cell, never the same one.
    assert text("'" + value) == "''" + value != text(value)
    assert unescape(unformula(text("'" + value))) == "'" + value


@pytest.mark.parametrize("value", ["\t=1+1", "\r=1+1", "a\x1b[31mred\x07", "two\nlines", "\u202eevil"])
def test_control_characters_become_escapes_and_no_formula(value):
    written = text(value)
    assert written.isprintable() and written[:1] not in "=+-@'"
    assert unescape(unformula(written)) == value


@pytest.mark.parametrize("value", [-0.5, -1e-300, -0.0, 0.0, 1.5, float("-inf"), float("inf"), float("nan"), -3, 7])
def test_numbers_are_written_unchanged(value):
    written = cell(value)
    assert written == (f"{value:.14f}" if isinstance(value, float) else str(value))
    assert not written.startswith("'")
    parsed = float(written)
    expected = float(f"{value:.14f}")
    assert parsed == expected or (parsed != parsed and value != value)


@pytest.mark.parametrize(
    "value", ["-0.5", "-0.50000000000000", "-inf", "+inf", "-Infinity", "nan", "+1e5", "-1.5E-07", "-.5", "-3"]
)
def test_numbers_written_as_text_are_unchanged(value):
    assert cell(value) == value and text(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "pass",
        "warning",
        "error",
        "SKIP",
        " ",
        "torch.float32",
        "(2, 3)",
        "Torch.add.0",
        "forward.output.0: max abs error 0.1 >= 0.0001",
        "'quoted",
        "C:\\dumps\\a.pt",
    ],
)
def test_ordinary_text_is_unchanged(value):
    assert cell(value) == value


def test_blank_cells_stay_one_space():
    assert cell(None) == " " and cell("") == " "


def test_detail_row_quotes_name_message_and_dtypes_keeps_metrics_and_status():
    metrics = Metrics(cosine=-0.5, max_abs_err=float("inf"), error_balance=-1e-3, rmse=float("nan"), ulp_max=-2.0)
    row = detail_row(
        DetailRow(
            "=evil()+1",
            Direction.FORWARD,
            0,
            Comparison("warning", "-1 of 6 elements is off", metrics, "@golden", "+target", (2, 3)),
        )
    )
    assert row[0] == "'=evil()+1.forward.output.0"
    assert row[1:4] == ["'@golden", "'+target", "(2, 3)"]
    assert row[21:] == ["warning", "'-1 of 6 elements is off"]
    values = dict(zip(range(4, 21), row[4:21]))
    assert float(values[4]) == -0.5 and float(values[5]) == float("inf") and float(values[10]) == -1e-3
    assert values[11] == "nan" and float(values[18]) == -2.0
    assert_no_formula([row], numeric_columns=range(4, 21))


def test_write_csv_quotes_text_cells_and_keeps_rendered_numbers(tmp_path):
    path = tmp_path / "x.csv"
    write_csv(
        path,
        ["API Name", "ratio", "status", "Message"],
        [
            ['=HYPERLINK("http://x").0.forward.output.0', "-0.50000000000000", "pass", "@evil"],
            ["Torch.add.0.forward.output.0", "-inf", "error", "-x.pt: refused"],
        ],
    )
    rows = read(path)
    assert rows[0] == ["API Name", "ratio", "status", "Message"]
    assert rows[1] == ['\'=HYPERLINK("http://x").0.forward.output.0', "-0.50000000000000", "pass", "'@evil"]
    assert rows[2] == ["Torch.add.0.forward.output.0", "-inf", "error", "'-x.pt: refused"]


def test_cells_are_cut_at_the_spreadsheet_limit_and_lone_surrogates_escaped():
    long = text("x" * 200_000)
    assert len(long) <= MAX_CELL and long.endswith("more characters)")
    assert text("\ud800abc") == "\\ud800abc"


@pytest.fixture
def good_files(tmp_path):
    data = tmp_path / "dump" / "dump_tensor_data"
    data.mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(torch.randn(2, 3), data / "a.pt")
    torch.save(torch.randn(2, 3), data / "b.pt")
    return data


def good_add() -> dict:
    return {"input_args": [tensor("a.pt"), tensor("b.pt")], "input_kwargs": {}, "output": [tensor()]}


HOSTILE_KEYS = [
    '=HYPERLINK("http://evil","click").0.forward',
    "+cmd|' /C calc'!A0.forward",
    "-2+3.0.forward",
    "@SUM(1+1)*cmd|' /C calc'!A0.forward",
    "\t=1+1.forward",
    "\r=1+1.forward",
    "\uff1dSUM(1).forward",
]
HOSTILE_FILES = ["=cmd|' /C calc'!A0.pt", "-2+3.pt", "+1.pt", "@SUM(1).pt"]


def test_run_ut_quotes_hostile_names_and_messages(good_files, tmp_path):
    data = {"Torch.add.0.forward": good_add()}
    data.update({key: good_add() for key in HOSTILE_KEYS})
    for i, name in enumerate(HOSTILE_FILES, start=1):
        data[f"Torch.add.{i}.forward"] = {"input_args": [tensor(name), tensor("b.pt")]}
    dump = write(good_files.parent / "dump.json", data)
    summary = run_ut(dump, tmp_path / "out", device="cpu", workers=1)
    result = read(summary.result_path)
    details = read(summary.details_path)
    assert len(result) == 1 + len(data)
    assert_no_formula(result)
    assert_no_formula(details[1:], numeric_columns=range(4, 21))
    by_name = {r[0]: r for r in result[1:]}
    assert by_name["Torch.add.0"][1] == "pass"
    # Tab and carriage return are escaped in a malformed name (one printable line), so no quote is needed there.
    expected = {k.replace("\t", "\\x09").replace("\r", "\\x0d") if k[0] in "\t\r" else "'" + k for k in HOSTILE_KEYS}
    assert expected <= set(by_name), sorted(by_name)
    for name in expected:
        assert by_name[name][1] == "SKIP" and "malformed" in by_name[name][3]
    for i, name in enumerate(HOSTILE_FILES, start=1):
        row = by_name[f"Torch.add.{i}"]
        assert row[1] == "SKIP" and row[3] == f"'{name}: file not found in {good_files}", row
    # the good row's metrics are numbers
    add = next(r for r in details if r[0] == "Torch.add.0.forward.output.0")
    assert all(isinstance(float(v), float) for v in add[4:21] if v != " ")


# ------------------------------------------------------------------------------------ 2. malformed names

MALFORMED = [
    "Torch..0.forward",
    "x.forward",
    ".forward",
    "",
    " ",
    "forward",
    "Torch.add.0.forward\n",
    "Torch.add.0.forward\r\n",
    "Torch.add.0 .forward",
    'a,b,"c".0.forward',
    'x"y".forward',
    "line1\nline2.0.forward",
    "nul\x00byte.0.forward",
    "\ud800.forward",
    "tab\there.0.forward",
    "emoji \U0001f525.0.forward",
    "x" * 10_000 + ".0.forward",
    "Torch." + "a" * 300_000 + ".0.forward",
    "Torch.add.0.backward\n",
    "Torch.add.-1.forward",
    "1Torch.add.0.forward",
    "Torch.add.٣.forward",
]  # an Arabic-Indic digit is not a call number
UNSUPPORTED = ["Torch.加法.0.forward", "Tensor.ñ.0.forward", "Functional.x" + "y" * 200 + ".0.forward"]


def test_malformed_names_are_skip_rows_and_the_csv_parses_back(good_files, tmp_path):
    data = {"Torch.add.0.forward": good_add(), "Torch.mul.0.forward": good_add()}
    data.update({key: good_add() for key in MALFORMED + UNSUPPORTED})
    data["Module.layer.0.forward"] = good_add()  # ignored, as msprobe's module records are
    data["Torch.sub.0.backward"] = {"input": [tensor()], "output": [tensor()]}  # orphan backward: no row
    dump = write(good_files.parent / "dump.json", data)
    out = tmp_path / "out"
    assert main(["run_ut", "-api_info", str(dump), "-o", str(out), "-q", "-d", "cpu", "-n", "1"]) == 0
    result = read(next(out.glob("accuracy_checking_result_*.csv")))
    details = read(next(out.glob("accuracy_checking_details_*.csv")))
    expected = 2 + len(MALFORMED) + len(UNSUPPORTED)
    assert len(result) == 1 + expected and all(len(r) == 4 for r in result)
    assert len(details) == 1 + expected and all(len(r) == 23 for r in details)
    statuses = [r[1] for r in result[1:]]
    assert statuses[:2] == ["pass", "pass"] and statuses[2:] == ["SKIP"] * (expected - 2)
    names = [r[0] for r in result[1:]]
    assert len(set(names)) == len(names), "every row keeps its own name"
    for row in result[1:] + details[1:]:
        assert all(len(v) <= MAX_CELL for v in row)
        assert "\n" not in row[0] and "\r" not in row[0] and "\x00" not in row[0]
    messages = {r[0]: r[3] for r in result[1:]}
    assert sum("malformed record name" in m for m in messages.values()) == len(MALFORMED)
    assert sum(m.startswith("not supported") for m in messages.values()) == len(UNSUPPORTED)
    assert "Torch.加法.0" in messages and messages["Torch.加法.0"] == "not supported: Torch.加法"
    assert messages["Torch.add.0.forward\\x0a"].startswith("malformed")
    assert unescape(names[names.index("nul\\x00byte.0.forward")]) == "nul\x00byte.0.forward"
    long_rows = [n for n in names if "characters, sha256" in n]
    assert len(long_rows) == 2 and all(len(n) <= MAX_NAME + 20 for n in long_rows)


def test_a_key_with_a_trailing_newline_never_replaces_the_real_record():
    cases = pair_records(
        {"Torch.add.0.forward": {"input_args": [tensor()]}, "Torch.add.0.forward\n": {"input_args": []}}
    )
    assert [(c.name, c.problem is None) for c in cases] == [("Torch.add.0", True), ("Torch.add.0.forward\n", False)]
    assert len(cases[0].args) == 1


def test_long_keys_are_cut_but_stay_distinct():
    a, b = "x" * 1000 + "a.0.forward", "x" * 1000 + "b.0.forward"
    cases = pair_records({a: {}, b: {}})
    assert cases[0].name != cases[1].name
    assert all(len(c.name) <= MAX_NAME + 20 and "1011 characters" in c.name for c in cases)
    assert all("at most 256" in c.problem for c in cases)


def test_a_problem_quoting_a_huge_value_is_cut():
    shape = list(range(100_000)) + [-1]
    [case] = pair_records({"Torch.add.0.forward": {"input_args": [tensor(shape=shape)]}})
    assert case.problem.startswith("bad record: input_args[0]: shape must be") and len(case.problem) < 700


def test_a_huge_task_value_is_one_short_line(tmp_path):
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"task": "x" * 1_000_000, "data": {}}))
    from precheck.dump.records import DumpError, load_dump

    with pytest.raises(DumpError) as info:
        load_dump(path)
    assert len(str(info.value)) < 300 + len(str(path))


# ------------------------------------------------------------------------------------ 3. hostile tensor files


class _Payload:
    """Unpickling this object runs os.mkdir(marker): what a hostile .pt file would do."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


@pytest.fixture
def hostile_dump(good_files, tmp_path):
    """A dump whose records point at files outside the dump directory or at files carrying code, between good
    records. Returns (dump.json, marker paths, outside file)."""
    data_dir = good_files
    outside = tmp_path / "outside.pt"
    torch.save(torch.ones(2, 3), outside)
    torch.save(torch.ones(2, 3), tmp_path / "dump" / "x.pt")  # one level up from dump_tensor_data
    os.symlink(outside, data_dir / "link.pt")
    os.symlink("loop.pt", data_dir / "loop.pt")
    markers = {k: tmp_path / f"marker_{k}" for k in ("pt", "raw", "npy")}
    torch.save(_Payload(markers["pt"]), data_dir / "evil.pt")
    (data_dir / "raw.pt").write_bytes(pickle.dumps(_Payload(markers["raw"])))
    array = np.empty((2, 3), dtype=object)
    array[:] = None
    array[0, 0] = _Payload(markers["npy"])
    with open(data_dir / "evil.npy", "wb") as f:
        np.save(f, array, allow_pickle=True)
    with open(data_dir / "big.npy", "wb") as f:  # a 128-byte file declaring a 40 GB array
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (10**5, 10**5)})
    hostile = {
        "Torch.add.1": ("../x.pt", "refused, the path leaves the dump directory"),
        "Torch.add.2": (str(outside), "refused, the path leaves the dump directory"),
        "Torch.add.3": ("/etc/passwd", "refused, the path leaves the dump directory"),
        "Torch.add.4": ("dump_tensor_data/../../x.pt", "refused, the path leaves the dump directory"),
        "Torch.add.5": ("link.pt", "refused, the path leaves the dump directory"),
        "Torch.add.6": ("evil.pt", "refused, holds something other than a dense tensor (posix.mkdir)"),
        "Torch.add.7": ("raw.pt", "unreadable"),
        "Torch.add.8": ("evil.npy", "unreadable"),
        "Torch.add.9": ("a\x00b.pt", "refused, not a usable file name"),
        "Torch.add.10": ("loop.pt", "refused, not a usable file name"),
        "Torch.add.11": ("big.npy", "unreadable"),
        "Torch.add.12": ("", "refused, names the dump directory itself"),
        "Torch.add.13": ("n" * 5000 + ".pt", ""),
    }
    data = {"Torch.add.0.forward": good_add()}
    for name, (data_name, _) in hostile.items():
        data[f"{name}.forward"] = {"input_args": [tensor("a.pt"), tensor(data_name)], "output": [tensor()]}
    data["Torch.add.99.forward"] = good_add()
    # A good forward whose backward record's incoming gradient leaves the directory: forward graded,
    # backward SKIP with the reason.
    grad = {
        "input_args": [tensor("a.pt", requires_grad=True), tensor("b.pt", requires_grad=True)],
        "output": [tensor()],
    }
    data["Torch.add.100.forward"] = grad
    data["Torch.add.100.backward"] = {"input": [tensor("../x.pt")], "output": [tensor(), tensor()]}
    dump = write(tmp_path / "dump" / "dump.json", data)
    return dump, markers, hostile


def test_unsafe_loading_would_run_the_payload(tmp_path):
    """Control: the payload does run when a file is loaded the unsafe way, so its marker proves something."""
    marker = tmp_path / "control"
    torch.save(_Payload(marker), tmp_path / "control.pt")
    torch.load(tmp_path / "control.pt", weights_only=False)
    assert marker.exists()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_hostile_files_are_skip_rows_and_the_run_goes_on(hostile_dump, tmp_path):
    dump, markers, hostile = hostile_dump
    summary = run_ut(dump, tmp_path / "out", device="cpu", workers=1)
    assert not any(m.exists() for m in markers.values()), "pickled code ran"
    rows = rows_by_name(summary.result_path)
    assert len(rows) == len(hostile) + 3
    assert rows["Torch.add.0"][1:3] == ["pass", " "] and rows["Torch.add.99"][1:3] == ["pass", " "]
    for name, (data_name, reason) in hostile.items():
        _, forward, backward, message = rows[name]
        assert forward == "SKIP", (name, message)
        shown = data_name.replace("\x00", "\\x00")[:200]
        assert message.startswith(shown) and reason in message, (name, message)
        assert "\n" not in message and len(message) < 600
    _, forward, backward, message = rows["Torch.add.100"]
    assert forward == "pass" and backward == "SKIP"
    assert "backward: ../x.pt: refused, the path leaves the dump directory" in message


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_hostile_files_through_the_command_line(hostile_dump, tmp_path, capsys):
    dump, markers, hostile = hostile_dump
    out = tmp_path / "cli"
    assert main(["run_ut", "-api_info", str(dump), "-o", str(out), "-q", "-d", "cpu", "-n", "1"]) == 0
    assert not any(m.exists() for m in markers.values())
    rows = read(next(out.glob("accuracy_checking_result_*.csv")))
    assert len(rows) == 1 + len(hostile) + 3
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_recorded_outputs_are_loaded_as_safely(good_files, tmp_path):
    marker = tmp_path / "marker_recorded"
    torch.save(_Payload(marker), good_files / "evil_out.pt")
    torch.save(torch.ones(2, 3), tmp_path / "dump" / "x.pt")
    torch.save(torch.ones(2, 3), good_files / "sum.pt")
    data = {
        f"Torch.add.{i}.forward": {"input_args": [tensor("a.pt"), tensor("b.pt")], "output": [tensor(out)]}
        for i, out in enumerate(["../x.pt", "evil_out.pt", "/etc/passwd"])
    }
    data["Torch.add.3.forward"] = good_add()
    a, b = torch.load(good_files / "a.pt"), torch.load(good_files / "b.pt")
    torch.save(a + b, good_files / "sum.pt")
    data["Torch.add.3.forward"]["output"] = [tensor("sum.pt")]
    dump = write(good_files.parent / "dump.json", data)
    summary = run_ut(dump, tmp_path / "out", device="cpu", workers=1, options=_recorded())
    assert not marker.exists()
    rows = rows_by_name(summary.result_path)
    assert rows["Torch.add.0"][1] == "SKIP" and "../x.pt: refused" in rows["Torch.add.0"][3]
    assert rows["Torch.add.1"][1] == "SKIP" and "evil_out.pt: refused" in rows["Torch.add.1"][3]
    assert rows["Torch.add.2"][1] == "SKIP" and "/etc/passwd: refused" in rows["Torch.add.2"][3]
    assert rows["Torch.add.3"][1] == "pass"


def _recorded():
    from precheck.execution.options import CheckOptions

    return CheckOptions(target="recorded")


def test_resuming_does_not_repeat_a_quoted_name(good_files, tmp_path):
    dump = write(good_files.parent / "dump.json", {"Torch.add.0.forward": good_add(), "=cmd().0.forward": {}})
    first = run_ut(dump, tmp_path / "out", device="cpu", workers=1)
    again = run_ut(dump, tmp_path / "out", device="cpu", workers=1, csv_path=first.result_path)
    assert again.results == []
    assert [r[0] for r in read(first.result_path)[1:]] == ["Torch.add.0", "'=cmd().0.forward"]


# --------------------------------------------------- 4. a dump's files, read once through the descriptor checked

COMPARE = Path(__file__).parent / "data" / "compare"
GELU_INPUT = "Functional.gelu.0.forward.input.0.pt"
MARK = 1234.5  # what the file outside the dump holds: its float32 bytes must never be read, graded or saved


def _outside(tmp_path: Path, like: torch.Tensor) -> Path:
    outside = tmp_path / "outside" / "secret.pt"
    outside.parent.mkdir()
    torch.save(torch.full_like(like, MARK), outside)
    return outside


def _link_in_place(path: Path, to: Path) -> None:
    path.rename(path.with_name(f"{path.name}.moved"))
    path.symlink_to(to)


def _holds_mark(folder: Path) -> list[Path]:
    mark = struct.pack("<f", MARK)
    return [p for p in folder.rglob("*") if p.is_file() and mark in p.read_bytes()]


def test_compare_and_its_precheck_never_read_a_tensor_file_linked_out_of_the_dump(tmp_path, capsys):
    """compare followed a tensor file that links out of the dump (its values entered the metrics) and
    --precheck copied it into its own dump, past run_ut's refusal: now the row says why it was not compared,
    as run_ut says it, and the file is not copied."""
    target = tmp_path / "target"
    shutil.copytree(COMPARE / "fp32_tensor_gelu_bug" / "step0" / "rank0", target)
    linked = target / "dump_tensor_data" / GELU_INPUT
    _link_in_place(linked, _outside(tmp_path, torch.load(linked)))
    bench = COMPARE / "fp32_tensor" / "step0" / "rank0"
    out = tmp_path / "o"
    assert main(["compare", "-target", str(target), "-bench", str(bench), "-o", str(out), "--precheck"]) == 0
    rows = list(csv.DictReader(open(next(out.glob("compare_result_*.csv")), encoding="utf-8")))
    row = next(r for r in rows if r["NPU Name"] == "Functional.gelu.0.forward.input.0")
    assert f"not compared: {GELU_INPUT}: refused, the path leaves the dump directory" in row["Err_message"]
    assert row["Cosine"] == "unsupported" and row["MaxAbsErr"] == "unsupported"
    copied = out / "precheck_dump" / "dump_tensor_data"
    assert (copied / "Functional.gelu.0.forward.output.0.pt").is_file(), "the suspect's own files are copied"
    assert not os.path.lexists(copied / GELU_INPUT)
    assert not _holds_mark(out)


def _swapped_after_the_check(monkeypatch, checked: Path, outside: Path, swapped: Path | None = None) -> None:
    """The file ``checked`` (or ``swapped``, a folder on its path) becomes a link to ``outside`` right after the
    file's path is checked, before it is read: the race that got outside bytes read 2 times in 3000, made
    certain."""
    from precheck.dump import safe_files

    located = safe_files._located

    def then_swapped(data_dir: Path, name: str) -> tuple[Path, Path]:
        found = located(data_dir, name)
        if found[1] == checked.resolve():
            _link_in_place(swapped or checked, outside)
        return found

    monkeypatch.setattr(safe_files, "_located", then_swapped)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_link_swapped_in_after_the_check_is_never_read_graded_or_saved(good_files, tmp_path, monkeypatch):
    a, b = torch.load(good_files / "a.pt"), torch.load(good_files / "b.pt")
    torch.save(a + b, good_files / "sum.pt")
    data = {f"Torch.add.{i}.forward": {**good_add(), "output": [tensor("sum.pt")]} for i in range(2)}
    dump = write(good_files.parent / "dump.json", data)
    _swapped_after_the_check(monkeypatch, good_files / "a.pt", _outside(tmp_path, a))
    errors = tmp_path / "errors"
    options = replace(_recorded(), save_error_data=str(errors))
    summary = run_ut(dump, tmp_path / "out", device="cpu", workers=1, options=options)
    rows = rows_by_name(summary.result_path)
    message = "a.pt: refused, a symbolic link on its path (it changed after it was checked)"
    assert rows["Torch.add.0"][1] == "SKIP" and rows["Torch.add.0"][3] == message
    assert rows["Torch.add.1"][3] == "a.pt: refused, the path leaves the dump directory", "then the check sees it"
    assert not _holds_mark(errors) and not _holds_mark(tmp_path / "out")
    assert str(MARK) not in summary.details_path.read_text(encoding="utf-8")


def test_compare_never_reads_a_link_swapped_in_after_the_check(tmp_path, monkeypatch):
    from precheck.compare.dumps import compare_dumps

    target = tmp_path / "target"
    shutil.copytree(COMPARE / "fp32_tensor_gelu_bug" / "step0" / "rank0", target)
    swapped = target / "dump_tensor_data" / GELU_INPUT
    _swapped_after_the_check(monkeypatch, swapped, _outside(tmp_path, torch.load(swapped)))
    result = compare_dumps(target, COMPARE / "fp32_tensor" / "step0" / "rank0", tmp_path / "o")
    rows = list(csv.DictReader(open(result.csv_path, encoding="utf-8")))
    row = next(r for r in rows if r["NPU Name"] == "Functional.gelu.0.forward.input.0")
    assert f"{GELU_INPUT}: refused, a symbolic link on its path (it changed after it was checked)" in row["Err_message"]
    assert row["Cosine"] == "unsupported"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_folder_on_the_path_swapped_for_a_link_is_never_followed(good_files, tmp_path, monkeypatch):
    """A record names ``sub/a.pt``, and ``sub`` becomes a link to a folder outside the dump after the check: each
    folder is opened without following a link, so the outside ``a.pt`` is never read (an open that refused a
    link only as its last component followed it)."""
    (good_files / "sub").mkdir()
    (good_files / "a.pt").rename(good_files / "sub" / "a.pt")
    outside = _outside(tmp_path, torch.load(good_files / "sub" / "a.pt")).parent
    (outside / "secret.pt").rename(outside / "a.pt")
    dump = write(
        good_files.parent / "dump.json",
        {"Torch.add.0.forward": {**good_add(), "input_args": [tensor("sub/a.pt"), tensor("b.pt")]}},
    )
    _swapped_after_the_check(monkeypatch, good_files / "sub" / "a.pt", outside, swapped=good_files / "sub")
    summary = run_ut(dump, tmp_path / "out", device="cpu", workers=1)
    assert rows_by_name(summary.result_path)["Torch.add.0"][1:4:2] == [
        "SKIP",
        f"sub/a.pt: file not found in {good_files}",
    ]
    assert not _holds_mark(tmp_path / "out")
