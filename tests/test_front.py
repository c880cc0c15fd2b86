"""The package root's public face: each documented entry point is ``precheck.<name>``, the object its home
module holds, and ``import precheck`` stays torch-free until a name that needs torch is used."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import precheck
from precheck.compare.dumps import compare_dumps
from precheck.errors import OptionError, PrecheckError
from precheck.frames import load
from precheck.grader import assert_precise, compare
from precheck.grader.honest import honest_run
from precheck.recording.api import record
from precheck.run_ut import run_ut

FACE = {
    "check_dump": run_ut,
    "compare_dumps": compare_dumps,
    "load": load,
    "record": record,
    "grade": compare,
    "assert_precise": assert_precise,
    "honest_run": honest_run,
    "PrecheckError": PrecheckError,
}


def test_every_public_name_is_its_home_modules_object():
    assert set(precheck.__all__) == {"__version__", *FACE}
    for name, value in FACE.items():
        assert getattr(precheck, name) is value, name
    with pytest.raises(AttributeError, match="no attribute 'compare_dump'"):
        precheck.compare_dump  # noqa: B018


def test_tab_completion_offers_every_public_name_before_it_is_loaded():
    """``precheck.<TAB>`` (dir() of the module, as IPython and IDEs ask it) offered only the names already
    loaded: not grade, assert_precise or honest_run in a fresh interpreter."""
    code = "import precheck, sys; print(' '.join(dir(precheck))); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    names, torch_loaded = done.stdout.splitlines()
    assert set(FACE) | {"__version__"} <= set(names.split()) and torch_loaded == "False", done.stderr


def test_the_grader_at_the_front_grades_and_asserts():
    golden = torch.linspace(-1, 1, 64, dtype=torch.float64)
    assert precheck.grade(golden.float(), golden).status == "pass"
    with pytest.raises(AssertionError):
        precheck.assert_precise(golden.float() * 1.01, golden)
    assert issubclass(OptionError, precheck.PrecheckError)


def test_importing_precheck_and_its_torch_free_names_loads_no_torch():
    code = (
        "import sys, precheck\nprecheck.load, precheck.PrecheckError\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert 'precheck.run_ut' not in sys.modules and 'precheck.compare' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
