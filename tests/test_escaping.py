"""Text from a dump leaves the program escaped, reversibly: CSV cells, messages, the terminal, the markdown report.
Ordinary names are written exactly as msprobe writes them; a hostile one can drive no terminal, break no line,
start no formula, make no heading or tag, and two different names never become one cell."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers import REAL_DUMPS, forward_rec, real_dump_json, tensor_rec
from hypothesis import given, settings
from hypothesis import strategies as st

from precheck.commands.cli import main
from precheck.dump.records import load_dump
from precheck.escape import escape, formula_safe, markdown, markdown_code, shell_command, unescape, unformula
from precheck.regress import read_result_csv, regress
from precheck.report.html import write_report
from precheck.run_files.csv_files import read_csv_rows, text
from precheck.run_ut import run_ut

EXAMPLES = int(os.environ.get("PRECHECK_FUZZ_EXAMPLES", "300"))
NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)", re.IGNORECASE)
TEXT = st.text(alphabet=st.one_of(st.sampled_from(list("\\xuU0a'=+-@\t\r\n\x1b\x07`|<>&#*_[]")), st.characters()))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None)
@given(value=TEXT)
def test_escaping_is_one_printable_line_and_reversible(value):
    line = escape(value)
    assert line.isprintable() and unescape(line) == value
    assert unformula(formula_safe(value)) == value
    cell = text(value)
    assert cell.isprintable()
    assert not cell.startswith(tuple("=+-@\uff1d\uff0b\uff0d\uff20")) or NUMBER.fullmatch(cell)
    assert unescape(unformula(cell)) == value
    assert "\n" not in markdown(value) and "<" not in markdown(value) and "\n" not in markdown_code(value)


def test_every_real_name_is_written_as_msprobe_writes_it():
    for name in REAL_DUMPS:
        for api in load_dump(real_dump_json(name)).cases.names:
            assert text(api) == api and escape(api) == api


HOSTILE_KEY = "x\x1b[2J\x07"
INT = {"type": "int", "value": 1}
NAMES = ["=cmd|' /C calc'!A0.forward", "'=cmd|' /C calc'!A0.forward", "a\n# heading <img src=x onerror=alert(1)>"]


def test_hostile_text_is_escaped_in_the_csvs_and_on_the_terminal(write_dump, tmp_path, capsys):
    data = {
        "Torch.add.0.forward": forward_rec(
            tensor_rec(), tensor_rec(), kwargs={HOSTILE_KEY: {"type": "int", "value": 1}}
        ),
        **{name: forward_rec(tensor_rec()) for name in NAMES},
    }
    dump = write_dump(data, task="statistics")
    out = tmp_path / "out"
    code = main(["run_ut", "-api_info", str(dump), "-o", str(out), "-q", "-d", "cpu", "-n", "1"])
    assert code == 3  # every API SKIP (statistics of no graded call): nothing was graded
    result = next(out.glob("accuracy_checking_result_*.csv"))
    raw = result.read_bytes().decode("utf-8-sig")
    assert "\x1b" not in raw and "\x07" not in raw
    header, rows = read_csv_rows(result)
    by_name = {unescape(unformula(r["API name"])): r for r in rows}
    assert set(by_name) == {"Torch.add.0", *NAMES}, "=cmd and '=cmd stay two rows"
    assert "x\\x1b[2J\\x07" in by_name["Torch.add.0"]["Message"]
    assert "\x1b" not in capsys.readouterr().err
    # regress reads precheck's own CSV, names and all, and its markdown makes no heading and no tag of them.
    assert set(read_result_csv(result)) == {"Torch.add.0", *NAMES}
    report = regress(result, result)
    assert report.exit_code() == 0
    lines = report.to_markdown().splitlines()
    assert [line for line in lines if line.startswith("#")] == ["# precheck regress"]
    assert not any("<img" in line for line in lines)


def test_a_message_from_the_terminal_error_line_is_escaped(tmp_path, capsys):
    folder = tmp_path / "dump\x1b[31m"
    folder.mkdir()
    assert main(["run_ut", "-api_info", str(folder / "dump.json"), "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "dump\\x1b[31m" in err


def test_a_run_of_a_real_dump_writes_the_same_cells_as_before(tmp_path):
    """Ordinary text goes through untouched: every cell of a real run is already one printable line."""
    summary = run_ut(real_dump_json("gpt2_bf16_tensor"), tmp_path, device="cpu", workers=1)
    for path in (summary.result_path, summary.details_path):
        for row in read_csv_rows(path)[1]:
            assert all(escape(v) == v and unformula(v) == v for v in row.values())


def pasted(command: str, cwd: Path) -> list[str]:
    """The words bash hands to ``precheck`` when a user pastes ``command`` (precheck stands in as a function
    that prints them)."""
    script = 'precheck() { printf "%s\\0" "$@"; }\n' + command
    proc = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, check=True, timeout=60)
    return [w.decode("utf-8", "surrogateescape") for w in proc.stdout.split(b"\0")[:-1]]


def in_argv(word: str) -> bool:
    """Whether a program's argv can hold ``word`` (no NUL; a surrogate only as an undecodable byte)."""
    try:
        return b"\0" not in os.fsencode(word)
    except UnicodeEncodeError:
        return False


@settings(max_examples=max(1, EXAMPLES // 6), deadline=None, derandomize=True, database=None)
@given(words=st.lists(TEXT.filter(in_argv), min_size=1, max_size=4))
def test_a_shell_command_is_one_printable_line_that_bash_splits_into_its_words(words, tmp_path_factory):
    line = shell_command("precheck", *words)
    assert line.isprintable() and escape(line) == line, "the console's escaping leaves it as it is"
    cwd = tmp_path_factory.mktemp("shell")
    assert pasted(line, cwd) == words and not any(cwd.iterdir())


HOSTILE_DIR = "d$(touch f)'<b>&`touch g`"
SHELL_KEY = "Torch.x$(touch f)'<b>;touch g.0.forward"  # malformed: a SKIP row, and a repro command in the page


def test_commands_the_console_and_the_report_print_run_no_code_of_the_dump(write_dump, tmp_path, capsys):
    """A record key and a dump folder holding shell code: the report command on the console and the repro
    command in the HTML page, pasted into bash, are the key and the paths as they are, and run nothing. The
    hostile key is no well-formed record, so repro refuses it and the page offers it no command; the bf16 add (a
    warning) is offered one, from the hostile folder."""
    from precheck.repro import ReproError, write_repro

    (tmp_path / HOSTILE_DIR).mkdir()
    bf16 = tensor_rec("torch.bfloat16", (64,))
    data = {SHELL_KEY: forward_rec(tensor_rec()), "Torch.add.0.forward": forward_rec(bf16, bf16, output=[bf16])}
    dump = write_dump(data, task="statistics", name=f"{HOSTILE_DIR}/dump.json")
    out = dump.parent / "out"
    assert main(["run_ut", "-api_info", str(dump), "-o", str(out), "-q", "-d", "cpu", "-n", "1"]) == 0
    details = next(out.glob("accuracy_checking_details_*.csv"))
    [console] = [line.split("report:", 1)[1] for line in capsys.readouterr().out.splitlines() if "report:" in line]
    assert pasted(console, tmp_path) == ["report", str(details)]
    page = write_report(details).read_text(encoding="utf-8")
    assert "<b>" not in page, "the command stays escaped in the page's markup and data"
    rows = json.loads(re.search(r'<script type="application/json" id="rows">(.*?)</script>', page, re.S)[1])
    repro = {row["call"]: row.get("repro") for row in rows}
    assert repro[SHELL_KEY] is None
    with pytest.raises(ReproError):
        write_repro(SHELL_KEY.removesuffix(".forward"), dump, tmp_path / "refused")
    assert pasted(repro["Torch.add.0"], tmp_path) == ["repro", "Torch.add.0", "-api_info", str(dump.resolve())]
    assert not (tmp_path / "f").exists() and not (tmp_path / "g").exists()
