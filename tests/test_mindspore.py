"""MindSpore dumps (msprobe 26.2, MindSpore 2.10 on the CPU, bundled in tests/data/mindspore): every record graded
or a SKIP with its reason, the mint / Tensor mapping's departures from PyTorch, a perturbed output found on
exactly its API, and MindSpore re-running statistics dumps where its interpreter is there."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import link_tensor_data, real_dump_json

from api_registry.mindspore import NoEquivalent, torch_call
from precheck.execution import mindspore_target
from precheck.execution.mindspore_target import ENV
from precheck.run_ut import run_ut

DTYPES = ("fp32", "fp16", "bf16")
REPO = Path(__file__).resolve().parents[1]


def _mindspore_python() -> str | None:
    named = os.environ.get(ENV) or str(REPO / ".venv-mindspore" / "bin" / "python")
    return named if Path(named).is_file() else None


MS_PYTHON = _mindspore_python()
needs_mindspore = pytest.mark.skipif(
    MS_PYTHON is None, reason=f"no MindSpore interpreter: bash .ci/setup --test makes .venv-mindspore, or set {ENV}"
)


def _dump(name: str) -> Path:
    return real_dump_json(f"mindspore/{name}")


def _rows(out: Path) -> dict[str, list[str]]:
    (result,) = out.glob("accuracy_checking_result_*.csv")
    with open(result, encoding="utf-8-sig", newline="") as f:
        return {r[0]: r[1:] for r in list(csv.reader(f))[1:]}


def _run(dump: Path, out: Path, monkeypatch: pytest.MonkeyPatch, python: str | None = None, **kw) -> dict:
    if python is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, python)
    run_ut(dump, out, device="cpu", workers=1, **kw)
    return _rows(out)


CAT_BACKWARD = "backward: the backward record saved no input gradient to grade"


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_dump_graded_against_recorded_outputs(dtype: str, tmp_path: Path, monkeypatch) -> None:
    """No MindSpore needed: every record graded, the two list-input cats' backwards a SKIP with the reason."""
    rows = _run(_dump(f"{dtype}_tensor"), tmp_path, monkeypatch)
    assert len(rows) == 48
    for name, (forward, backward, message) in rows.items():
        assert forward in ("pass", "warning", "error"), (name, message)
        if name.startswith("Mint.cat."):
            assert (backward, message) == ("SKIP", CAT_BACKWARD)
        else:
            assert backward in ("pass", "warning", "error"), (name, message)
    assert not [n for n, r in rows.items() if r[0] == "error"]
    errors = sorted(n for n, r in rows.items() if r[1] == "error")
    # MindSpore's CPU fp16 kernels of these two backwards compute in fp16: 2.5x and 2.8x an honest kernel's error.
    assert errors == (["Mint.rsqrt.0", "Mint.softmax.0"] if dtype == "fp16" else [])


def test_a_dump_without_its_framework_field_is_recognised_from_its_records(tmp_path: Path, monkeypatch) -> None:
    # msprobe's own MindSpore fixtures have no "framework": read as PyTorch, every record was "not supported".
    source = _dump("fp32_tensor")
    doc = json.loads(source.read_text())
    del doc["framework"]
    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "dump.json").write_text(json.dumps(doc))
    link_tensor_data(source.parent / "dump_tensor_data", tmp_path / "dump")
    rows = _run(tmp_path / "dump" / "dump.json", tmp_path / "out", monkeypatch)
    assert rows == _run(source, tmp_path / "with_the_field", monkeypatch)


def test_mindspore_semantics_mapped(tmp_path: Path, monkeypatch) -> None:
    """The recorded calls whose MindSpore meaning differs from torch's name match their recorded outputs exactly
    as an honest fp32 kernel would: a wrong mapping would give another shape or other values."""
    rows = _run(_dump("fp32_tensor"), tmp_path, monkeypatch)
    for name in ("Tensor.transpose.0", "Tensor.transpose.1", "Tensor.std.0", "Tensor.max.0", "Tensor.mean.0",
                 "Tensor.sum.0", "Tensor.to.0", "Mint.transpose.0"):  # fmt: skip
        assert rows[name][:2] == ["pass", "pass"], (name, rows[name])


def test_mapping_rules() -> None:
    class T:
        shape = (4, 4, 8)

    x = T()
    assert torch_call("Mint.softmax", (x,), {"dim": -1}).api == "Torch.softmax"
    assert torch_call("MintFunctional.linear", (x,), {}).api == "Functional.linear"
    permute = torch_call("Tensor.transpose", (x, 0, 2, 1), {})
    assert (permute.api, permute.args[1:]) == ("Tensor.permute", (0, 2, 1))
    swap = torch_call("Tensor.transpose", (x, 1, 2), {})
    assert (swap.api, swap.args[1:]) == ("Tensor.transpose", (1, 2))
    assert torch_call("Tensor.transpose", (x,), {}).args[1:] == (2, 1, 0)
    std = torch_call("Tensor.std", (x,), {"axis": 1, "keepdims": True})
    assert (std.api, std.kwargs) == ("Tensor.std", {"dim": 1, "keepdim": True, "correction": 0})
    assert torch_call("Tensor.std", (x, 1, 1), {}).kwargs == {"dim": 1, "correction": 1}
    assert torch_call("Tensor.max", (x,), {"axis": 1}).api == "Tensor.amax"
    assert torch_call("Tensor.max", (x, 1), {}).api == "Tensor.max"
    numpy_order = torch_call("Tensor.sum", (x, 1, "float32-dtype", True), {})
    assert numpy_order.kwargs == {"dim": 1, "dtype": "float32-dtype", "keepdim": True}
    assert torch_call("Tensor.mean", (x,), {"axis": 0, "keep_dims": True}).kwargs == {"dim": 0, "keepdim": True}
    assert torch_call("Tensor.expand_dims", (x, 0), {}).api == "Tensor.unsqueeze"
    for api, args, kwargs, why in [
        ("Functional.flash_attention_score", (x,), {}, "ops.flash_attention_score"),
        ("Tensor.repeat", (x, 2), {}, "Tensor.repeat"),
        ("Tensor.sum", (x,), {"initial": 1.0}, "initial"),
        ("Primitive.Add", (x,), {}, "Primitive.Add"),
    ]:
        with pytest.raises(NoEquivalent, match=why):
            torch_call(api, args, kwargs)


def test_api_without_equivalent_is_a_skip_row(tmp_path: Path, monkeypatch) -> None:
    src = _dump("fp32_tensor").parent
    dump = tmp_path / "dump"
    shutil.copytree(src, dump)
    doc = json.loads((dump / "dump.json").read_text())
    doc["data"]["Tensor.std.0.forward"]["input_args"] = []  # a hostile record: a method without its tensor
    text = (
        json.dumps(doc)
        .replace('"Tensor.reshape.0.forward"', '"Tensor.repeat.0.forward"')
        .replace('"Mint.abs.0.forward"', '"Functional.abs.0.forward"')
        .replace('"Mint.exp.0.forward"', '"Mint.no_such_op.0.forward"')
    )
    (dump / "dump.json").write_text(text)
    rows = _run(dump / "dump.json", tmp_path / "out", monkeypatch)
    assert rows["Tensor.std.0"][0] == "SKIP"
    assert rows["Tensor.std.0"][2] == "Tensor.std recorded without the tensor it was called on"
    assert rows["Tensor.repeat.0"][0] == "SKIP"
    assert "MindSpore's Tensor.repeat: no PyTorch equivalent" in rows["Tensor.repeat.0"][2]
    assert rows["Functional.abs.0"][0] == "SKIP"
    assert "MindSpore's ops.abs (Functional.abs): no PyTorch equivalent mapped" in rows["Functional.abs.0"][2]
    assert (rows["Mint.no_such_op.0"][0], rows["Mint.no_such_op.0"][2]) == (
        "SKIP",
        "Mint.no_such_op: its PyTorch equivalent Torch.no_such_op is not supported",
    )


def _perturbed(dtype: str, file: str, how: str, root: Path) -> Path:
    dump = root / f"{dtype}_{how}"
    shutil.copytree(_dump(f"{dtype}_tensor").parent, dump)
    path = dump / "dump_tensor_data" / file
    array = np.load(path)
    if how == "scale":
        array = array * np.float32(1.01)
    else:
        array.flat[3] = np.nan
    np.save(path, array)
    return dump / "dump.json"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("how", ["scale", "nan"])
def test_perturbed_output_is_an_error_on_exactly_its_api(dtype: str, how: str, tmp_path: Path, monkeypatch) -> None:
    api = "MintFunctional.linear.1" if dtype != "bf16" else "Tensor.__mul__.1"  # bf16 kernels: mul, add, div
    clean = _run(_dump(f"{dtype}_tensor"), tmp_path / "clean", monkeypatch)
    dump = _perturbed(dtype, f"{api}.forward.output.0.npy", how, tmp_path)
    rows = _run(dump, tmp_path / "out", monkeypatch)
    assert rows[api][0] == "error", rows[api]
    assert {n: r[:2] for n, r in rows.items() if n != api} == {n: r[:2] for n, r in clean.items() if n != api}
    if how == "scale" and dtype == "bf16":  # the file holds float32 values no bf16 can: said, and rounded
        assert "are not torch.bfloat16, rounded" in rows[api][2]


def _nowhere(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """No MindSpore in this interpreter, and none of the places searched for a .venv-mindspore has one."""
    monkeypatch.setitem(sys.modules, "mindspore", None)  # even if this interpreter had it
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(sys, "prefix", str(folder / "env" / ".venv"))
    monkeypatch.setattr(mindspore_target, "_REPOSITORY", folder / "repository")
    (folder / "cwd").mkdir()
    monkeypatch.chdir(folder / "cwd")


@pytest.mark.parametrize("dtype", DTYPES)
def test_statistics_dump_without_mindspore_skips(dtype: str, tmp_path: Path, monkeypatch) -> None:
    _nowhere(monkeypatch, tmp_path)
    rows = _run(_dump(f"{dtype}_statistics"), tmp_path / "out", monkeypatch)
    assert len(rows) == 48
    assert {tuple(r[:2]) for r in rows.values()} == {("SKIP", "SKIP")}
    assert {r[2] for r in rows.values()} == {
        "MindSpore is not installed: no .venv-mindspore beside this venv, in precheck's repository or in the current "
        f"folder (bash .ci/setup --test makes one); set {ENV} to a Python that has MindSpore, or pip install "
        "'precheck[mindspore]'"
    }


@pytest.mark.parametrize("found", [("env", "repository", "cwd"), ("repository", "cwd"), ("cwd",)])
def test_a_venv_mindspore_is_found_without_the_variable(found: tuple, tmp_path: Path, monkeypatch) -> None:
    # Beside this interpreter's venv first, then in precheck's repository, then in the current folder.
    _nowhere(monkeypatch, tmp_path)
    for where in found:
        python = tmp_path / where / ".venv-mindspore" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text("#!/bin/sh\n")
        python.chmod(0o755)
    assert mindspore_target.mindspore_python() == str(tmp_path / found[0] / ".venv-mindspore" / "bin" / "python")


@pytest.mark.skipif(not (REPO / ".venv-mindspore").is_dir(), reason="no .venv-mindspore (bash .ci/setup --test)")
def test_the_setups_venv_mindspore_is_found(monkeypatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setitem(sys.modules, "mindspore", None)
    assert mindspore_target.mindspore_python() == str(REPO / ".venv-mindspore" / "bin" / "python")


def test_missing_interpreter_is_named(tmp_path: Path, monkeypatch) -> None:
    rows = _run(_dump("fp32_statistics"), tmp_path, monkeypatch, python=str(tmp_path / "no-python"))
    assert {r[2] for r in rows.values()} == {f"{ENV}={tmp_path / 'no-python'}: no such interpreter"}


@needs_mindspore
@pytest.mark.parametrize("dtype", DTYPES)
def test_statistics_dump_graded_by_running_mindspore(dtype: str, tmp_path: Path, monkeypatch) -> None:
    rows = _run(_dump(f"{dtype}_statistics"), tmp_path, monkeypatch, python=MS_PYTHON)
    assert len(rows) == 48
    for name, (forward, backward, message) in rows.items():
        assert forward in ("pass", "warning"), (name, message)
        assert "inputs generated from statistics (seed 0)" in message and "target: MindSpore" not in message
        assert backward == "SKIP" if name.startswith("Mint.cat.") else backward in ("pass", "warning", "error")
    errors = sorted(n for n, r in rows.items() if r[1] == "error")
    assert errors == (["Mint.rsqrt.0", "Mint.softmax.0"] if dtype == "fp16" else [])


@needs_mindspore
def test_mindspore_target_on_a_tensor_dump_finds_a_wrong_kernel(tmp_path: Path, monkeypatch) -> None:
    """--target mindspore re-runs the recorded calls in MindSpore from the recorded inputs: a MindSpore whose
    exp is 1% off is found on exactly that API."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import mindspore.mint as m\n_exp = m.exp\nm.exp = lambda x: _exp(x) * 1.01\n", encoding="utf-8"
    )
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={shim} exec {MS_PYTHON} "$@"\n')
    wrapper.chmod(0o755)
    rows = _run(
        _dump("fp32_tensor"), tmp_path / "out", monkeypatch, python=str(wrapper), options=_options(target="mindspore")
    )
    assert rows["Mint.exp.0"][0] == "error"
    assert not [n for n, r in rows.items() if r[0] == "error" and n != "Mint.exp.0"]


def _options(**given):
    from precheck.execution.options import CheckOptions

    return CheckOptions(**given)


def test_cli_refuses_targets_a_dump_cannot_have(tmp_path: Path) -> None:
    def run(dump: Path, target: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "precheck", "run_ut", "-api_info", str(dump), "-o", str(tmp_path), "-q"]
        return subprocess.run([*cmd, "--target", target], capture_output=True, text=True, timeout=120)

    compiled = run(_dump("fp32_tensor"), "compile")
    assert compiled.returncode == 2
    assert compiled.stderr.strip().splitlines() == [
        "precheck: error: --target compile runs torch.compile; a MindSpore dump is graded as recorded or mindspore"
    ]
    pytorch = real_dump_json("mlp_fp32_tensor")
    other = run(pytorch, "mindspore")
    assert other.returncode == 2
    assert f"--target mindspore re-runs MindSpore dumps; {pytorch} is a PyTorch dump" in other.stderr


def test_an_interpreter_without_mindspore_is_named(tmp_path: Path, monkeypatch) -> None:
    rows = _run(_dump("fp32_statistics"), tmp_path, monkeypatch, python=sys.executable)
    assert {tuple(r[:2]) for r in rows.values()} == {("SKIP", "SKIP")}
    assert {r[2] for r in rows.values()} == {f"{sys.executable} cannot run MindSpore (import mindspore failed)"}


def test_a_dying_mindspore_worker_is_that_calls_error_and_is_replaced(tmp_path: Path, monkeypatch) -> None:
    """A worker that dies on a call (a crashing kernel) makes that call's error row; the next call starts
    another worker."""
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho \'{"ready": "fake"}\'\nread line\nexit 3\n')
    fake.chmod(0o755)
    rows = _run(_dump("fp32_statistics"), tmp_path / "out", monkeypatch, python=str(fake))
    assert len(rows) == 48
    assert {r[0] for r in rows.values()} == {"error"}
    assert all("target raised MindSpore's worker died (exit code 3)" in r[2] for r in rows.values())


def test_arguments_reach_mindspore_as_recorded() -> None:
    """The worker's encoding round trip, MindSpore stood in for: a keyword argument named ``dtype`` holding a
    dtype, a slice, an ellipsis and a tensor inside a list keep their meaning."""
    from types import SimpleNamespace

    import torch

    from precheck.dump.decode import Stats, TensorSpec
    from precheck.execution import mindspore_worker
    from precheck.execution.mindspore_target import _encoded

    spec = TensorSpec(torch.float32, (2,), Stats(None, None, None, None))
    args, kwargs = _encoded((spec, [spec, 3], slice(1, None, 2), Ellipsis), {"dtype": torch.bfloat16, "t": 1})
    fake = SimpleNamespace(bfloat16="ms.bfloat16")
    tensors = ["tensor 0", "tensor 1"]
    assert mindspore_worker._value(fake, args, tensors) == ("tensor 0", ("tensor 1", 3), slice(1, None, 2), ...)
    assert {name: mindspore_worker._value(fake, v, tensors) for name, v in kwargs} == {"dtype": "ms.bfloat16", "t": 1}


@needs_mindspore
def test_a_dtype_keyword_runs_in_mindspore(tmp_path: Path, monkeypatch) -> None:
    dump = tmp_path / "dump"
    shutil.copytree(_dump("fp32_statistics").parent, dump)
    doc = json.loads((dump / "dump.json").read_text())
    doc["data"]["Mint.sum.0.forward"]["input_kwargs"] = {"dtype": {"type": "mindspore.dtype", "value": "Float32"}}
    (dump / "dump.json").write_text(json.dumps(doc))
    rows = _run(dump / "dump.json", tmp_path / "out", monkeypatch, python=MS_PYTHON)
    assert rows["Mint.sum.0"][:2] == ["pass", "pass"], rows["Mint.sum.0"]


_HANGING_MINDSPORE = """
import os, subprocess, sys, time
__version__ = "hanging"
PYNATIVE_MODE = 1
def set_context(**kwargs):
    pass
def set_device(device):  # the first call of every worker: it starts a helper, then both hang
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["HANG_PIDS"], "a") as f:
        f.write(f"{os.getpid()} {helper.pid} {os.getpgid(0)}\\n")
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """A process that still runs (a zombie waiting for its reaper has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_hanging_mindspore_worker_leaves_no_process_behind(tmp_path: Path, monkeypatch) -> None:
    """Every call past its timeout is its timed-out SKIP row, and neither the MindSpore worker nor what it started
    outlives it: in this process (the first call) and in the pool workers killed at their cases' timeouts."""
    shim = tmp_path / "shim" / "mindspore"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(_HANGING_MINDSPORE, encoding="utf-8")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={shim.parent} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    pids = tmp_path / "pids"
    monkeypatch.setenv("HANG_PIDS", str(pids))
    src = _dump("fp32_statistics")
    doc = json.loads(src.read_text())
    doc["data"] = {k: v for k, v in doc["data"].items() if k.startswith(("Mint.exp.0.", "Mint.abs.0."))}
    (tmp_path / "dump.json").write_text(json.dumps(doc))
    # 5 s: time enough for each worker to start and record its pids on a loaded machine (at 1 s, one worker was
    # killed before it got there once)
    rows = _run(tmp_path / "dump.json", tmp_path / "out", monkeypatch, python=str(wrapper), options=_options(timeout=5))
    assert sorted(rows) == ["Mint.abs.0", "Mint.exp.0"]
    assert all(r[0] == "SKIP" and r[2] == "timed out after 5 s; not graded" for r in rows.values()), rows
    started = [[int(n) for n in line.split()] for line in pids.read_text().splitlines()]
    assert len(started) == 2
    assert all(worker == group for worker, _, group in started)  # each worker leads a group of its own
    for _ in range(200):  # the groups are killed as their owners end: moments after the rows, at most
        left = [pid for worker, helper, _ in started for pid in (worker, helper) if _alive(pid)]
        if not left:
            break
        time.sleep(0.05)
    assert not left, f"processes left running: {left}"


def test_a_gradient_without_a_golden_counterpart_leaves_the_others_graded(tmp_path: Path, monkeypatch) -> None:
    """MindSpore records the call's own input gradients: a second gradient recorded for tanh (one input) has no
    counterpart and is named; the first is still graded."""
    source = _dump("fp32_tensor")
    doc = json.loads(source.read_text())
    record = doc["data"]["Mint.tanh.0.backward"]
    record["output"].append(dict(record["output"][0]))
    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "dump.json").write_text(json.dumps(doc))
    link_tensor_data(source.parent / "dump_tensor_data", tmp_path / "dump")
    out = tmp_path / "out"
    forward, backward, message = _run(tmp_path / "dump" / "dump.json", out, monkeypatch)["Mint.tanh.0"]
    assert (forward, backward) == ("pass", "pass"), message
    assert "recorded gradient 1 of shape (8, 32) has no golden counterpart (input 1 has no gradient)" in message
    assert "recorded gradient 0" not in message
    (details,) = out.glob("accuracy_checking_details_*.csv")
    names = [r[0] for r in csv.reader(details.open(encoding="utf-8-sig"))]
    assert "Mint.tanh.0.backward.output.0" in names and "Mint.tanh.0.backward.output.1" not in names


def test_the_worker_script_imports_nothing_of_precheck():
    """It runs under MindSpore's own interpreter, where precheck is not installed: a precheck import there (a Python
    3.9 spelling of zip's strict) made every MindSpore call a SKIP "import mindspore failed"."""
    import ast

    source = Path(__file__).resolve().parent.parent / "precheck" / "execution" / "mindspore_worker.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [n for n in names if n.split(".")[0] == "precheck"], names
