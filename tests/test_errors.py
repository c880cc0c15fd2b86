"""One error root: unusable input is one line and exit code 2 from every command; a bug in precheck is a traceback,
a line asking for a report and exit code 70, never 2 (precheck.errors, caught once in precheck.commands.cli.main)."""

from __future__ import annotations

from pathlib import Path

import pytest

from precheck.commands.cli import BUG_HINT, main
from precheck.errors import BUG_EXIT_CODE, PrecheckError

MLP = Path(__file__).parent / "data/mlp_fp32_tensor/step0/proc8486/dump.json"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _commands(missing: str, out: str) -> dict[str, list[str]]:
    """Each command, given an input that does not exist."""
    return {
        "run_ut": ["run_ut", "-api_info", missing, "-o", out, "-q"],
        "generate": ["generate", "-api_info", missing, "-o", out],
        "apis": ["apis", "--check", missing],
        "repro": ["repro", "Torch.add.0.forward", "-api_info", missing, "-o", out],
        "api_precision_compare": ["api_precision_compare", "-npu", missing, "-gpu", missing, "-o", out],
        "regress": ["regress", "--baseline", missing, "--current", missing, "-o", out],
        "report": ["report", missing],
        "compare": ["compare", "-target", missing, "-bench", missing, "-o", out],
        "overflow": ["overflow", missing],
    }


@pytest.mark.parametrize("command", list(_commands("", "")))
def test_each_command_says_unusable_input_in_one_line_with_exit_code_2(command, tmp_path, capsys):
    missing = str(tmp_path / "no_such_dump.json")
    code, out, err = _run(capsys, *_commands(missing, str(tmp_path / "out"))[command])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("precheck: error: ") and "no_such_dump.json" in err, err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["run_ut", "-api_info", str(MLP), "--backend", "dask", "-q"], "--backend dask needs --scheduler ADDRESS"),
        (["-f", "mindspore", "run_ut", "-api_info", str(MLP), "--framework", "pytorch"], "contradicts"),
        (["run_ut", "-api_info", str(MLP), "--random", "--target", "recorded", "-q"], "exclude each other"),
    ],
)
def test_an_unusable_option_is_one_line_and_exit_code_2(argv, said, tmp_path, capsys):
    code, out, err = _run(capsys, *argv, "-o", str(tmp_path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("precheck: error: ") and said in err, err


def _raise(error: Exception):
    def fail(*args, **kwargs):
        raise error

    return fail


@pytest.mark.parametrize(
    ("where", "argv"),
    [
        ("precheck.regress.regress", ["regress", "--baseline", "a.csv", "--current", "b.csv"]),
        ("precheck.compare.dumps.compare_dumps", ["compare", "-target", str(MLP), "-bench", str(MLP)]),
        ("precheck.run_ut.run_ut", ["run_ut", "-api_info", str(MLP), "-q"]),
    ],
)
@pytest.mark.parametrize("bug", [ZeroDivisionError("division by zero"), ValueError("a bug, not the user's input")])
def test_a_bug_is_a_traceback_with_a_report_hint_and_exit_code_70(where, argv, bug, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(where, _raise(bug))
    code, _, err = _run(capsys, *argv, "-o", str(tmp_path))
    assert code == BUG_EXIT_CODE != 2
    assert "Traceback (most recent call last)" in err and f"{type(bug).__name__}: {bug}" in err
    assert err.rstrip("\n").endswith(BUG_HINT) and "precheck: error:" not in err


def test_a_precheck_error_from_anywhere_is_its_one_line(tmp_path, capsys, monkeypatch):
    class Unusable(PrecheckError):
        pass

    monkeypatch.setattr("precheck.run_ut.run_ut", _raise(Unusable("the dump 'x' says no")))
    code, out, err = _run(capsys, "run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "-q")
    assert (code, out, err) == (2, "", "precheck: error: the dump 'x' says no\n")
