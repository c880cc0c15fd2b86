"""TorchScript compiles a recorded program as it compiles it without precheck (issue 50, item 2): a function
scripted while the wrappers are on, calling a function torch defines with ``@overload`` (torch.norm,
torch.tensordot, F.interpolate and its upsample aliases), compiles torch's overloads with torch's globals and
leaves them on torch's function, as without precheck.

Before: TorchScript compiled the overloads of the wrapper's name with the wrapper's globals: "undefined value
has_torch_function_unary" at the program's import (a function never scripted before), or "cannot be directly
compiled because it is overloaded" (one scripted before the recording)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import DATA

import precheck
from precheck.recording.wrap import _places

STEP = DATA / "record" / "scripted_step.py"


def _norm(x: torch.Tensor) -> torch.Tensor:
    return torch.norm(x) + torch.norm(x, 1.0, 1).sum() + torch.norm(x, dim=[0, 1], keepdim=True).sum()


def _tensordot(x: torch.Tensor) -> torch.Tensor:
    return torch.tensordot(x, x, 1).sum() + torch.tensordot(x, x, dims=([1], [0])).sum()


def _interpolate(x: torch.Tensor) -> torch.Tensor:
    image = x.reshape(1, 1, 4, 4)
    return F.interpolate(image, scale_factor=2.0).sum() + F.interpolate(image, size=[3, 3]).sum()


def _upsample(x: torch.Tensor) -> torch.Tensor:
    return F.upsample(x.reshape(1, 1, 4, 4), scale_factor=2.0).sum()


def _upsample_nearest(x: torch.Tensor) -> torch.Tensor:
    return F.upsample_nearest(x.reshape(1, 1, 4, 4), scale_factor=2.0).sum()


def _upsample_bilinear(x: torch.Tensor) -> torch.Tensor:
    return F.upsample_bilinear(x.reshape(1, 1, 4, 4), scale_factor=2.0).sum()


# every function torch defines with @overload, by TorchScript's name for it, and a function that calls it
CALLERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "__torch__.torch.functional.norm": _norm,
    "__torch__.torch.functional.tensordot": _tensordot,
    "__torch__.torch.nn.functional.interpolate": _interpolate,
    "__torch__.torch.nn.functional.upsample": _upsample,
    "__torch__.torch.nn.functional.upsample_nearest": _upsample_nearest,
    "__torch__.torch.nn.functional.upsample_bilinear": _upsample_bilinear,
}
X = torch.linspace(-1, 1, 16).reshape(4, 4)


def _fresh(fn: Callable) -> Callable:
    """A copy of ``fn`` that TorchScript has not compiled yet (its cache is keyed by the function object)."""
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _overloaded() -> dict[str, Callable]:
    """torch's overloaded functions that precheck wraps, by TorchScript's name: those whose overloads are not
    compiled yet (their declarations in torch's table) and those compiled (cached on the function)."""
    from torch._jit_internal import _overloaded_fns, _qualified_name
    from torch.jit._state import _jit_function_overload_caching

    names = set(_overloaded_fns) | {_qualified_name(fn) for fn in list(_jit_function_overload_caching.keys())}
    found = {}
    for owner, attr, _ in _places():
        fn = getattr(owner, attr)
        if isinstance(fn, types.FunctionType) and _qualified_name(fn) in names:
            found[_qualified_name(fn)] = fn
    return found


def test_every_overloaded_function_precheck_wraps_is_scripted_here() -> None:
    assert set(_overloaded()) <= set(CALLERS)
    assert {"__torch__.torch.functional.norm", "__torch__.torch.functional.tensordot"} <= set(_overloaded())


@pytest.mark.filterwarnings("ignore:`nn.functional.upsample")
@pytest.mark.parametrize("name", CALLERS, ids=lambda name: name.rpartition(".")[2])
def test_a_function_scripted_while_recording_calls_torchs_overloads(tmp_path: Path, name: str) -> None:
    """Scripted during the recording and after it, as without precheck; the overloads compiled on torch's
    function (the wrapper's compile took them from it before, for good)."""
    caller = CALLERS[name]
    expected = caller(X)
    with precheck.record(tmp_path):
        during = torch.jit.script(_fresh(caller))(X)
    after = torch.jit.script(_fresh(caller))(X)
    assert torch.equal(during, expected) and torch.equal(after, expected)
    original = _overloaded()[name]
    assert original.__module__.startswith("torch.") and torch.jit._script._get_overloads(original)


@pytest.mark.filterwarnings("ignore:`nn.functional.upsample")
def test_overloads_compiled_before_the_recording_are_torchs_during_it(tmp_path: Path) -> None:
    """Before: "norm cannot be directly compiled because it is overloaded" (the wrapper has no overloads of its
    own, and TorchScript compiled the function it holds directly)."""
    for caller in CALLERS.values():
        torch.jit.script(_fresh(caller))
    with precheck.record(tmp_path):
        during = {name: torch.jit.script(_fresh(caller))(X) for name, caller in CALLERS.items()}
    assert all(torch.equal(during[name], caller(X)) for name, caller in CALLERS.items())


def test_a_wrapper_the_program_kept_scripts_as_torchs_function(tmp_path: Path) -> None:
    with precheck.record(tmp_path):
        kept = torch.norm
    assert kept is not torch.norm  # the wrapper, inert now

    def norm_of(x: torch.Tensor) -> torch.Tensor:
        return kept(x, 2.0, 0)

    assert torch.equal(torch.jit.script(norm_of)(X), torch.norm(X, 2.0, 0))


def _run(out: Path, recorded: bool) -> tuple[subprocess.CompletedProcess, str]:
    result = out / ("recorded.txt" if recorded else "plain.txt")
    command = [sys.executable, str(STEP), str(result)]
    if recorded:
        command = [sys.executable, "-m", "precheck", "record", "-o", str(out / "dump"), "--", *command]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    return done, result.read_text(encoding="utf-8") if result.exists() else ""


def test_a_program_that_scripts_at_import_runs_as_without_precheck(tmp_path: Path) -> None:
    """The issue's program: its functions scripted at import (each overloaded function, builtins, dispatched and
    Python functions) compile to the same TorchScript code, its step's numbers are bit for bit its own, and
    ``precheck record`` exits with its exit code."""
    plain, expected = _run(tmp_path, recorded=False)
    assert plain.returncode == 3, plain.stderr
    recorded, seen = _run(tmp_path, recorded=True)
    assert "has_torch_function" not in recorded.stderr
    assert recorded.returncode == 3, recorded.stderr
    assert seen == expected
    assert len(list((tmp_path / "dump" / "step0").glob("proc*/dump.json"))) == 1


def test_torchscripts_tables_are_as_they_were_once_the_recording_is_over(tmp_path: Path) -> None:
    """A wrapper's entry in the table of dispatched functions lives as long as the wrapper (weakly keyed): none is
    left once the recording's wrappers are gone, and no function's overloads were compiled or taken."""
    from torch._jit_internal import _overloaded_fns, boolean_dispatched

    dispatched, overloads = dict(boolean_dispatched), {name: list(fns) for name, fns in _overloaded_fns.items()}
    with precheck.record(tmp_path):
        assert len(boolean_dispatched) > len(dispatched)
    gc.collect()
    assert dict(boolean_dispatched) == dispatched and _overloaded_fns == overloads
