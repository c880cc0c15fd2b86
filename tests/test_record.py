"""``precheck.record`` writes what msprobe 26.2 writes, proved against msprobe's own dumps without msprobe installed.

tests/data/record/edge_model.py is a training step that walks into every trap of msprobe's L1 format (dunders,
``__setitem__``, in-place calls, dropout with p > 0, p = 0 and in eval, low-risk calls at the default risk level
and at ALL, bool / int / float64 / empty / 0-d / bf16 / non-finite statistics, dtype keywords and positions,
slices and Ellipsis, a structseq output, a 3-D linear, calls under no_grad); make_fixtures.py beside it recorded it
with msprobe into edge_tensor, edge_statistics (default risk level) and edge_all_statistics (risk level ALL). The
test records the same step with ``precheck.record`` and wants the same records in the same order, the same keys,
every non-float field equal, float statistics and tensor files equal to a few units in the last place of their
dtype (bit-exact on the machine that recorded them; CI's CPU may round a reduction differently). The bundled
pure-torch model dumps are recorded again the same way and run_ut grades both dumps alike. A failure inside the
block leaves a dump.json that reads, and torch is as it was after the block.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
from helpers import DATA

import precheck
from api_registry.recording import PATCHED, wrapped_names
from precheck.core.older_python import zip_strict
from precheck.dump.records import load_dump
from precheck.run_ut import run_ut

RECORD = DATA / "record"
ULPS = 8  # units in the last place of a tensor's dtype, of its largest magnitude: a reduction reordered
STATS = ("Max", "Min", "Mean", "Norm")
EDGE = {  # fixture -> (task, risk level)
    "edge_tensor": ("tensor", "FOCUS"),
    "edge_statistics": ("statistics", "FOCUS"),
    "edge_all_statistics": ("statistics", "ALL"),
}


def _module(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"record_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _edge_build(dtype: torch.dtype) -> tuple[nn.Module, Callable[[], torch.Tensor]]:
    return _module(RECORD / "edge_model.py").build(dtype)


def _model_dumps(name: str) -> Callable:
    return getattr(_module(DATA.parent.parent / "benchmarks" / "model_dumps.py"), name)


# bundled dump -> (its model, dtype, risk level of its msprobe_config.json)
BUNDLED = {
    "mlp_fp32_tensor": (lambda: _model_dumps("mlp"), torch.float32, "FOCUS"),
    "cnn_bf16_tensor": (lambda: _model_dumps("cnn"), torch.bfloat16, "ALL"),
    "encoder_fp32_tensor": (lambda: _model_dumps("encoder"), torch.float32, "ALL"),
    "composite_fp32_tensor": (lambda: _module(DATA / "composite_model.py").build, torch.float32, "ALL"),
}


BUNDLED_ROWS = {"mlp_fp32_tensor": 6, "cnn_bf16_tensor": 13, "encoder_fp32_tensor": 28, "composite_fp32_tensor": 28}


def _folder(root: Path) -> Path:
    (found,) = root.glob("step0/*/dump.json")
    return found.parent


def _record(root: Path, build: Callable, dtype: torch.dtype, task: str, risk_level: str) -> Path:
    """One step recorded by precheck as make_dump.py records it with msprobe: seed 0, build, forward, backward."""
    torch.manual_seed(0)
    _, run = build(dtype)
    with precheck.record(root, step=0, task=task, risk_level=risk_level):
        run().backward()
    return _folder(root)


def _doc(folder: Path) -> dict:
    return json.loads((folder / "dump.json").read_text(encoding="utf-8"))


def _same_value(ours: Any, theirs: Any) -> bool:
    if isinstance(theirs, float) and isinstance(ours, float) and math.isnan(theirs):
        return math.isnan(ours)
    return type(ours) is type(theirs) and ours == theirs


def _tolerance(dtype: str, record: dict) -> float:
    magnitude = max((abs(record[s]) for s in ("Max", "Min") if isinstance(record[s], float)), default=0.0)
    return ULPS * torch.finfo(getattr(torch, dtype.removeprefix("torch."))).eps * magnitude


def _assert_same(ours: Any, theirs: Any, where: str, floats: bool = True) -> None:
    """Same structure, keys in the same order, every non-float field equal; a tensor's float statistics within
    ULPS of its dtype (``floats`` False: not compared, for dumps recorded on another machine)."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs), f"{where}: keys {ours} != {theirs}"
        stats = STATS if theirs.get("type") == "torch.Tensor" else ()
        for key in theirs:
            if key in stats and isinstance(theirs[key], float) and math.isfinite(theirs[key]):
                assert isinstance(ours[key], float), f"{where}.{key}: {ours[key]!r} != {theirs[key]!r}"
                tol = _tolerance(theirs["dtype"], theirs)
                assert not floats or abs(ours[key] - theirs[key]) <= tol, f"{where}.{key}: {ours[key]} != {theirs[key]}"
            else:
                _assert_same(ours[key], theirs[key], f"{where}.{key}", floats)
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), f"{where}: {ours} != {theirs}"
        for i, (a, b) in enumerate(zip_strict(ours, theirs)):
            _assert_same(a, b, f"{where}[{i}]", floats)
    else:
        assert _same_value(ours, theirs), f"{where}: {ours!r} != {theirs!r}"


def _assert_same_tensor_files(ours: Path, theirs: Path) -> None:
    names = sorted(p.name for p in (theirs / "dump_tensor_data").iterdir())
    assert sorted(p.name for p in (ours / "dump_tensor_data").iterdir()) == names
    for name in names:
        a = torch.load(ours / "dump_tensor_data" / name, weights_only=True)
        b = torch.load(theirs / "dump_tensor_data" / name, weights_only=True)
        assert (a.dtype, a.shape, a.device, a.requires_grad) == (b.dtype, b.shape, b.device, b.requires_grad), name
        if b.is_floating_point():
            finite = b[b.isfinite()]
            magnitude = finite.abs().max().item() if finite.numel() else 0.0
            atol = ULPS * torch.finfo(b.dtype).eps * magnitude
            assert torch.allclose(a.double(), b.double(), rtol=0, atol=atol, equal_nan=True), name
        else:
            assert torch.equal(a, b), name


@pytest.mark.parametrize("fixture", sorted(EDGE))
def test_the_edge_step_is_recorded_as_msprobe_records_it(tmp_path, fixture):
    task, risk_level = EDGE[fixture]
    theirs = _folder(RECORD / fixture)
    ours = _record(tmp_path / "dump", _edge_build, torch.float32, task, risk_level)
    mine, msprobe = _doc(ours), _doc(theirs)
    assert [mine[k] for k in ("task", "level", "framework")] == [msprobe[k] for k in ("task", "level", "framework")]
    assert (mine["dump_data_dir"] is None) == (msprobe["dump_data_dir"] is None) == (task == "statistics")
    assert list(mine["data"]) == list(msprobe["data"])
    for name in msprobe["data"]:
        _assert_same(mine["data"][name], msprobe["data"][name], name)
    if task == "tensor":
        _assert_same_tensor_files(ours, theirs)
    else:
        assert not (ours / "dump_tensor_data").exists()
    assert json.loads((ours / "construct.json").read_text()) == {}
    stacked = [n for names, _ in json.loads((ours / "stack.json").read_text()).values() for n in names]
    assert sorted(stacked) == sorted(n for n in msprobe["data"] if n.endswith(".forward"))


def test_the_edge_fixtures_hold_each_trap():
    """msprobe's own dumps show the traps the comparison above covers (a fixture recorded again keeps them)."""
    focus, every = (list(_doc(_folder(RECORD / f))["data"]) for f in ("edge_tensor", "edge_all_statistics"))
    data = _doc(_folder(RECORD / "edge_tensor"))["data"]
    for name in ("Tensor.__iadd__.0", "Tensor.add_.0", "Functional.dropout.0"):
        assert {f"{name}.forward", f"{name}.backward"} <= set(focus), name
    assert "Functional.dropout.2.backward" in focus  # eval, p > 0
    for name in ("Tensor.__setitem__.0", "Functional.dropout.1", "Torch.exp.1", "Tensor.__gt__.0"):
        assert f"{name}.forward" in focus and f"{name}.backward" not in focus, name  # [null] / p = 0 / no_grad
    assert not any(n.startswith(("Tensor.reshape", "Tensor.to.", "Torch.cat", "Torch.split")) for n in focus)
    assert {"Tensor.reshape.0.forward", "Tensor.to.0.forward", "Torch.split.0.forward"} <= set(every)
    assert not any(n.startswith("Tensor.split") for n in every)  # hidden inside torch.split
    assert data["Tensor.__setitem__.1.forward"]["input_args"][1][0] == {"type": "ellipsis", "value": "..."}
    assert data["Tensor.__rmul__.0.forward"]["input_args"][1] == {"type": "int", "value": 0}  # self first
    assert data["Torch.softmax.0.forward"]["input_args"][2] == {}
    assert data["Functional.softmax.0.forward"]["input_kwargs"]["dtype"]["type"] == "torch.dtype"
    assert len(data["Functional.linear.1.backward"]["output"]) == 1  # 3-D: the ViewBackward0 node
    assert data["Torch.exp.0.forward"]["output"][0]["Max"] is None  # empty
    add = torch.load(_folder(RECORD / "edge_tensor") / "dump_tensor_data" / "Tensor.add_.0.forward.input.0.pt")
    assert not add.any()  # the input as it was before the in-place call


@pytest.mark.parametrize("bundled", sorted(BUNDLED))
def test_bundled_models_are_recorded_and_graded_as_msprobe_records_them(tmp_path, bundled):
    build, dtype, risk_level = BUNDLED[bundled]
    theirs = _folder(DATA / bundled)
    ours = _record(tmp_path / "dump", build(), dtype, "tensor", risk_level)
    mine, msprobe = _doc(ours)["data"], _doc(theirs)["data"]
    assert list(mine) == list(msprobe)
    for name in msprobe:  # recorded on another machine: its float statistics may differ in the last places
        _assert_same(mine[name], msprobe[name], name, floats=False)
    runs = [run_ut(d / "dump.json", tmp_path / d.parent.parent.name, device="cpu") for d in (ours, theirs)]
    rows = [[(r.name, r.forward, r.backward) for r in run.results] for run in runs]
    assert rows[0] == rows[1] and len(rows[0]) == BUNDLED_ROWS[bundled]
    if dtype == torch.float32:  # bf16 kernels of another CPU move a detail across a threshold (cnn: one row)
        details = [[(d.name, d.status) for r in run.results for d in r.details] for run in runs]
        assert details[0] == details[1]
    if _bytes(ours) == _bytes(theirs):  # recorded on this machine (here: composite): the same CSVs, byte for byte
        for path in ("result_path", "details_path"):
            assert getattr(runs[0], path).read_bytes() == getattr(runs[1], path).read_bytes()


def _bytes(folder: Path) -> list[bytes]:
    """dump.json without its dump_data_dir line and every tensor file, as bytes."""
    files = sorted((folder / "dump_tensor_data").iterdir())
    text = [line for line in (folder / "dump.json").read_bytes().splitlines() if b'"dump_data_dir"' not in line]
    return text + [
        f.name.encode() + torch.load(f, weights_only=True).flatten().view(torch.uint8).numpy().tobytes() for f in files
    ]


def test_a_failure_in_the_block_leaves_a_readable_dump(tmp_path):
    torch.manual_seed(0)
    _, run = _edge_build(torch.float32)
    with pytest.raises(RuntimeError, match="cannot be multiplied"), precheck.record(tmp_path / "dump"):
        run().backward()
        torch.mm(torch.ones(2, 3), torch.ones(2, 3))  # the user's bug, inside a recorded call
    names = list(_doc(_folder(RECORD / "edge_tensor"))["data"])
    assert list(_doc(_folder(tmp_path / "dump"))["data"]) == names
    forward = [n.removesuffix(".forward") for n in names if n.endswith(".forward")]
    assert [c.name for c in load_dump(_folder(tmp_path / "dump") / "dump.json").cases] == forward
    again = _record(tmp_path / "again", _edge_build, torch.float32, "tensor", "FOCUS")
    assert list(_doc(again)["data"]) == names  # the next recording is whole: nothing stuck


@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_a_failure_before_any_call_leaves_msprobes_empty_dump(tmp_path, task):
    """msprobe writes a step's dump.json at start(): a block that fails (or calls nothing) leaves one, empty."""
    with pytest.raises(ValueError, match="first line"), precheck.record(tmp_path / "dump", task=task):
        raise ValueError("the user's bug, on the block's first line")
    folder = _folder(tmp_path / "dump")
    data_dir = str((folder / "dump_tensor_data").resolve()) if task == "tensor" else None
    head = {"task": task, "level": "L1", "framework": "pytorch", "dump_data_dir": data_dir}
    assert (folder / "dump.json").read_text() == json.dumps({**head, "data": {}}, indent=1)  # msprobe's bytes
    assert [(folder / f).read_text() for f in ("stack.json", "construct.json")] == ["{}", "{}"]
    assert (folder / "dump_tensor_data").is_dir() == (task == "tensor")


def _owners() -> list[Any]:
    """Every object whose attributes the recorder patches."""
    owners = []
    for section, names in wrapped_names().items():
        path = PATCHED[section][0].split(".")
        root = importlib.import_module(path[0])
        for part in path[1:]:
            root = getattr(root, part)
        owners.append(root)
        owners += [getattr(root, n.split(".")[0]) for n in names if "." in n and hasattr(root, n.split(".")[0])]
    return list({id(o): o for o in owners}.values())


@pytest.mark.parametrize("fails", [False, True], ids=["ends", "raises"])
def test_torch_is_as_before_after_the_block(tmp_path, fails):
    owners = _owners()
    before = [dict(vars(o)) for o in owners]
    add, mm = torch.Tensor.add, torch.mm
    torch.manual_seed(0)
    _, run = _edge_build(torch.float32)
    with pytest.raises(ValueError) if fails else contextlib.nullcontext(), precheck.record(tmp_path / "dump"):
        loss = run()
        assert torch.Tensor.add is not add and torch.mm is not mm  # the wrappers are on
        if fails:
            raise ValueError("the user's bug, before the backward")
    assert torch.Tensor.add is add and "add" not in vars(torch.Tensor) and torch.mm is mm
    for owner, saved in zip_strict(owners, before):
        now = vars(owner)
        changed = [k for k in saved if now.get(k, None) is not saved[k]]
        added = [k for k in now if k not in saved and not isinstance(now[k], types.ModuleType)]
        assert changed == added == [], (owner, changed, added)
    written = (_folder(tmp_path / "dump") / "dump.json").read_bytes()
    loss.backward()  # the autograd hooks outlive the block: they write nothing into a finished dump
    assert (_folder(tmp_path / "dump") / "dump.json").read_bytes() == written
    json.loads(written)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_a_sparse_or_nested_tensor_never_makes_the_users_call_fail(tmp_path):
    """The recorder takes the statistics of every tensor; a sparse or nested one has no max() to take. The call
    runs as it would unrecorded, and its record is written without statistics or a file."""
    index, values = torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0])
    sparse = torch.sparse_coo_tensor(index, values, (2, 2))
    nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    with precheck.record(tmp_path / "dump"):
        total = torch.add(sparse, sparse)
        doubled = nested * 2
    assert total.to_dense().tolist() == [[0.0, 2.0], [4.0, 0.0]] and doubled.is_nested
    data = json.loads((_folder(tmp_path / "dump") / "dump.json").read_text())["data"]
    assert list(data) == ["Torch.add.0.forward", "Tensor.__mul__.0.forward"]
    first = data["Torch.add.0.forward"]["input_args"][0]
    assert first["shape"] == [2, 2] and first["Max"] is None and "data_name" not in first
