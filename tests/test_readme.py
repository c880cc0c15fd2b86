"""The README's examples work as written: every python block runs, and every documented command line parses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from precheck.commands.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
BLOCKS = [(lang, body) for lang, body in _FENCE.findall(README)]
PYTHON = [body for lang, body in BLOCKS if lang == "python"]


@pytest.fixture
def readme_session(tmp_path, monkeypatch):
    """A folder like the repository root (the examples name tests/data), with nothing else in it."""
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    monkeypatch.chdir(tmp_path)
    return {"__name__": "readme"}


def test_every_python_block_runs_as_written_in_order(readme_session):
    # The blocks read as one session: run_ut's output is what the regress example compares.
    assert len(PYTHON) >= 3
    exits = []
    for body in PYTHON:
        try:
            exec(compile(body, "README.md", "exec"), readme_session)
        except SystemExit as e:  # the CI gate example ends with sys.exit(report.exit_code())
            exits.append(e.code)
    assert exits == [readme_session["report"].exit_code(strict=False)]
    summary = readme_session["summary"]
    assert sum(summary.counts.values()) == 47 and summary.backward_counts["SKIP"] == 2
    assert (Path("out") / "regress_report.md").is_file()


def test_the_grader_example_fails_with_the_message_shown(readme_session):
    body = next(b for b in PYTHON if "def test_my_kernel" in b)
    exec(compile(body, "README.md", "exec"), readme_session)
    shown = next(b for lang, b in BLOCKS if not lang and b.startswith("output: error"))
    with pytest.raises(AssertionError) as e:
        readme_session["test_my_kernel"]()
    assert str(e.value) == shown.rstrip("\n")


def _documented_commands() -> list[str]:
    """Command lines the README tells a user to type: lines of shell blocks and `precheck ...` code spans."""
    lines = [line for lang, body in BLOCKS if lang == "bash" for line in body.splitlines()]
    lines += re.findall(r"`(precheck [^`]+)`", README)
    commands = []
    for line in lines:
        for part in line.split("&&"):
            m = re.search(r"(?:^|\s|/)precheck (\S.*)", part.split("#")[0])
            if m and " " in m[1].strip() and m[1].strip() not in commands:  # a bare name is a mention
                commands.append(m[1].strip())
    return commands


# Placeholders of the documented commands, as a user would fill them in.
_PLACEHOLDERS = {"T": "recorded", "DEVICE": "cpu"}


@pytest.mark.parametrize("command", _documented_commands())
def test_every_documented_command_parses(command):
    argv = [_PLACEHOLDERS.get(word, word) for word in shlex.split(command.replace("[", "").replace("]", ""))]
    build_parser().parse_args(argv)  # an unknown option or a bad value exits 2


def _run_ut_options() -> set[str]:
    run_ut = build_parser()._subparsers._group_actions[0].choices["run_ut"]
    return set(run_ut._option_string_actions)


def test_every_option_in_the_run_ut_table_exists():
    table = README.split("## `precheck run_ut` options", 1)[1].split("\n\n", 2)[1]
    documented = {opt for row in table.splitlines() for opt in re.findall(r"(?<![\w-])(--?[a-z_][\w-]*)", row[:60])}
    assert len(documented) > 20 and documented <= _run_ut_options(), documented - _run_ut_options()


def test_commands_are_found():
    # The extraction itself: the setup line, the suite generator, repro, regress and the second stage.
    found = " ".join(_documented_commands())
    for command in ("run_ut -api_info", "generate -api_info", "repro API_NAME", "regress --baseline", "apis"):
        assert command in found, command
