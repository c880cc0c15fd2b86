"""Python 3.9 to 3.14: an older Python is refused in one line, and what Python 3.9 and 3.10 spell otherwise
(precheck.core.older_python) answers as the newer builtin does. The compatibility pass (.ci/compat) runs the
version-sensitive tests on Python 3.9 itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from precheck.core import older_python
from precheck.core.older_python import StrEnum, orig_argv, zip_strict
from precheck.core.status import Status

ROOT = Path(__file__).resolve().parent.parent


def _python(version: str) -> Path | None:
    """An interpreter of that version under pyenv, where this machine has one (its shim runs only the active one)."""
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(versions.glob(f"{version}.*/bin/python"))
    return found[-1] if found else None


@pytest.mark.skipif(_python("3.8") is None, reason="no Python 3.8 on this machine")
def test_python_3_8_is_refused_in_one_line_by_the_command_and_by_an_import(tmp_path):
    old = str(_python("3.8"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ran = subprocess.run([old, "-m", "precheck", "run_ut"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert ran.returncode == 2 and ran.stdout == ""
    assert re.fullmatch(
        rf"precheck: error: precheck needs Python 3\.9 or newer; this is Python 3\.8\.\d+ \({re.escape(old)}\)\n",
        ran.stderr,
    )
    imported = subprocess.run([old, "-c", "import precheck"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert imported.returncode == 1
    assert imported.stderr.splitlines()[-1].startswith("ImportError: precheck needs Python 3.9 or newer")


def test_the_package_says_it_needs_python_3_9_and_ruff_checks_for_it():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.9"' in pyproject and 'target-version = "py39"' in pyproject


@pytest.mark.parametrize("zipper", [zip_strict, lambda *its: older_python._zip_strict(its)], ids=["here", "py39"])
def test_zip_strict_pairs_equal_lengths_and_raises_on_unequal_ones(zipper):
    assert list(zipper([1, 2], "ab")) == [(1, "a"), (2, "b")]
    assert list(zipper()) == [] and list(zipper([], [])) == []
    with pytest.raises(ValueError):
        list(zipper([1, 2], "a"))
    with pytest.raises(ValueError):
        list(zipper([1], "ab"))
    with pytest.raises(ValueError):
        list(zipper([1], [2], [3, 4]))


def test_a_status_reads_as_its_value_wherever_it_is_written():
    assert str(Status.PASS) == "pass" and f"{Status.ERROR}" == "error" and f"{Status.SKIP:>6}" == "  SKIP"
    assert Status("warning") is Status.WARNING and Status.PASS == "pass"

    class Color(StrEnum):
        RED = "red"

    assert str(Color.RED) == "red" and f"[{Color.RED}]" == "[red]" and isinstance(Color.RED, str)


def test_orig_argv_is_the_interpreter_command_line_even_before_sys_argv_is_set():
    assert orig_argv() and "python" in Path(orig_argv()[0]).name
    code = "import sys; from precheck.core.older_python import orig_argv; print(orig_argv()[-1])"
    ran = subprocess.run([sys.executable, "-c", code, "--multiprocessing-fork"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert ran.stdout == "--multiprocessing-fork\n"
