"""Calls recorded under torch.autocast are replayed in the dtype they ran in (issue 37).

The op lists (api_registry/autocast.py) are held against torch's own autocast kernels; the inference
(precheck/dump/autocast.py) against every op of torch's autocast test lists, CPU ones run under the CPU's
autocast and replayed by the explicit cast run_ut makes (bit for bit the same), CUDA ones by their lists' dtypes;
and run_ut against a real autocast step recorded by precheck.record (tests/data/record/make_fixtures.py).
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from helpers import DATA

import precheck
from api_registry.autocast import BANNED, COMPOSITE, LISTS
from precheck.core.status import ERROR
from precheck.dump.autocast import autocast_dtype
from precheck.dump.decode import Case, Stats, TensorSpec
from precheck.dump.records import load_dump
from precheck.execution.honest_run import repeats_honest
from precheck.execution.options import CheckOptions
from precheck.execution.sides import target_side
from precheck.run_ut import run_ut
from precheck.walk import flatten, map_placed

RECORD = DATA / "record"


def _torch_test_lists() -> types.ModuleType:
    """torch's autocast test lists (torch/testing/_internal/autocast_test_lists.py), whose module imports
    common_utils for two names only: that imports expecttest, which the venv has not, and costs seconds."""
    utils = types.ModuleType("torch.testing._internal.common_utils")
    utils.TEST_WITH_ROCM, utils.TestCase = False, object  # type: ignore[attr-defined]
    with mock.patch.dict(sys.modules, {utils.__name__: utils}):
        return importlib.import_module("torch.testing._internal.autocast_test_lists")


_LISTS = _torch_test_lists()
_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}


def _registered(key: str) -> set[str]:
    names = set()
    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("aten::"):
            continue
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key):
                names.add(qualified[len("aten::") :].partition(".")[0])
        except RuntimeError:  # a name torch lists without an operator
            pass
    return names


@pytest.mark.parametrize("device", sorted(_KEYS))
def test_lists_are_torchs_autocast_kernels(device: str) -> None:
    """Every op with an autocast kernel on the device is on one list of one kind, and nothing else is."""
    kinds = LISTS[device]
    ours = set().union(*kinds.values()) | BANNED.get(device, frozenset())
    assert ours == _registered(_KEYS[device])
    assert not any(kinds[a] & kinds[b] for a in kinds for b in kinds if a < b)
    assert all(not names & ours for (where, _), names in COMPOSITE.items() if where == device)


def _spec(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return TensorSpec(value.dtype, tuple(value.shape), Stats(None, None, None, None))
    return value


def _case(api: str, args: tuple, kwargs: dict, outputs: Any) -> Case:
    tree = map_placed((args, kwargs, outputs), lambda v, _: _spec(v))
    return Case(name=f"{api}.0", api=api, order=0, args=tree[0], kwargs=tree[1], outputs=tuple(flatten(tree[2])))


def _entries(lists: Any, names: tuple[str, ...]) -> list[tuple[str, str, tuple, dict]]:
    """(list name, op, args, kwargs) of every op of torch's test lists named ``names``."""
    out = []
    for name in names:
        # torch before 2.4 names the CPU's lower-precision lists for bf16 (torch_bf16), its only dtype there
        for entry in getattr(lists, name, None) or getattr(lists, name.replace("_16", "_bf16")):
            op, args, *rest = entry
            if isinstance(args, str):  # einsum: its equation, then its operands
                args, rest = (args, *rest[0]), rest[1:]
            kwargs = rest[0] if rest and isinstance(rest[0], dict) else {}
            out.append((name, op, args, kwargs))
    return out


_PREFIX = {"torch": "Torch", "nn": "Functional", "linalg": "Torch", "methods": "Tensor"}
_CPU = _entries(_LISTS.AutocastCPUTestLists("cpu"), ("torch_16", "nn_16", "torch_fp32", "nn_fp32"))
_CPU_PROMOTE = [(op, args) for op, *args in _LISTS.AutocastCPUTestLists("cpu").torch_need_autocast_promote]


def _func(list_name: str, op: str) -> Any:
    return getattr(torch._C._nn, op) if list_name.startswith("nn") else getattr(torch, op)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("list_name", "op", "args", "kwargs"), _CPU, ids=[f"{e[0]}-{e[1]}" for e in _CPU])
def test_cpu_autocast_inferred_and_replayed(list_name: str, op: str, args: tuple, kwargs: dict, dtype: Any) -> None:
    """Each op of the CPU's lists run in CPU autocast: its record says autocast and to what, and the replay's
    explicit cast gives autocast's own output, dtype and bits."""
    func = _func(list_name, op)
    args = map_placed(
        args, lambda v, _: v.to(dtype) if isinstance(v, torch.Tensor) and v.dtype == torch.bfloat16 else v
    )
    with torch.autocast("cpu", dtype=dtype):
        ran = func(*args, **kwargs)
    out = next(o for o in flatten(ran) if isinstance(o, torch.Tensor) and o.is_floating_point())
    case = _case(f"{_PREFIX[list_name.partition('_')[0]]}.{op}", args, kwargs, ran)
    assert autocast_dtype(case) == out.dtype
    side = target_side("cpu")
    replayed = func(*map_placed((args, kwargs), lambda v, _: side.autocast(v, out.dtype))[0], **kwargs)
    again = next(o for o in flatten(replayed) if isinstance(o, torch.Tensor) and o.is_floating_point())
    assert again.dtype == out.dtype and torch.equal(again, out)


@pytest.mark.parametrize("which", [0, 1], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("op", "args"), _CPU_PROMOTE, ids=[e[0] for e in _CPU_PROMOTE])
def test_cpu_promote_inferred(op: str, args: list, which: int) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16 if which == 0 else torch.float16):
        out = getattr(torch, op)(*args[which])
    assert autocast_dtype(_case(f"Torch.{op}", args[which], {}, out)) == out.dtype == torch.float32


_CUDA_LISTS = ("torch_fp16", "torch_fp32", "nn_fp16", "nn_fp32", "linalg_fp16", "methods_fp16", "methods_fp32")
_CUDA = _entries(_LISTS.AutocastTestLists("cpu"), (*_CUDA_LISTS, "torch_need_autocast_promote"))


@pytest.mark.parametrize(("list_name", "op", "args", "kwargs"), _CUDA, ids=[f"{e[0]}-{e[1]}" for e in _CUDA])
def test_cuda_autocast_inferred(list_name: str, op: str, args: tuple, kwargs: dict) -> None:
    """Each op of CUDA's lists, with the output dtype CUDA's autocast gives it (fp16 autocast), is inferred; an
    fp32 op of fp32 inputs ran as it is replayed, with no cast."""
    floats = {t.dtype for t in flatten(args) if isinstance(t, torch.Tensor) and t.is_floating_point()}
    kind = list_name.rpartition("_")[2]
    output = {"fp16": torch.float16, "fp32": torch.float32}.get(kind) or max(floats, key=lambda d: d.itemsize)
    expected = None if kind == "fp32" and floats == {torch.float32} else output
    case = _case(f"{_PREFIX[list_name.partition('_')[0]]}.{op}", args, kwargs, torch.empty((), dtype=output))
    assert autocast_dtype(case) == expected


@pytest.mark.parametrize(
    ("api", "inputs", "output", "kwargs", "expected"),
    [
        ("Functional.linear", (torch.bfloat16, torch.bfloat16), torch.bfloat16, {}, None),  # ran as replayed
        ("Functional.linear", (torch.float32, torch.float32), torch.float32, {}, None),
        ("Functional.linear", (torch.float16, torch.float32), torch.bfloat16, {}, torch.bfloat16),
        ("Functional.softmax", (torch.bfloat16,), torch.float32, {"dtype": torch.float32}, None),  # its own dtype
        ("Functional.softmax", (torch.bfloat16,), torch.float32, {}, torch.float32),  # CUDA's fp32 list
        ("Functional.softmax", (torch.bfloat16,), torch.bfloat16, {}, None),  # the CPU's: not cast
        ("Torch.mm", (torch.float32, torch.float32), torch.bfloat16, {"out": torch.empty(0)}, None),
        ("Torch.mm", (torch.float64, torch.float64), torch.float64, {}, None),  # autocast leaves float64 alone
        ("Functional.relu", (torch.float32,), torch.bfloat16, {}, None),  # not on a list
    ],
)
def test_inference_edges(api: str, inputs: tuple, output: Any, kwargs: dict, expected: Any) -> None:
    args = tuple(torch.empty(2, 2, dtype=d) for d in inputs)
    assert autocast_dtype(_case(api, args, kwargs, torch.empty(2, 2, dtype=output))) == expected


def test_autocast_call_is_not_its_own_honest_kernel() -> None:
    """fp32 inputs that ran in bf16 on the CPU: the target's run is not the honest kernel's."""
    fp32 = torch.empty(2, 2)
    case = _case("Functional.linear", (fp32, fp32), {}, fp32.to(torch.bfloat16))
    assert not repeats_honest(case)
    assert repeats_honest(_case("Functional.linear", (fp32, fp32), {}, fp32))


def _dump(name: str) -> Path:
    return next((RECORD / name).glob("step0/*/dump.json"))


@pytest.mark.parametrize(
    ("fixture", "target"),
    [("autocast_bf16_tensor", "device"), ("autocast_bf16_tensor", "recorded"), ("autocast_fp16_statistics", "device")],
)
def test_run_ut_replays_an_autocast_step(fixture: str, target: str, tmp_path: Path) -> None:
    """No target raises and nothing is an error, and every forward output is graded in its recorded dtype: the
    dtype the call ran in (a gradient has its input's)."""
    dump = _dump(fixture)
    run = run_ut(dump, tmp_path, device="cpu", backend="inprocess", options=CheckOptions(target=target))
    cases = load_dump(dump).cases
    recorded = {cases[i].name: cases[i] for i in range(len(cases))}
    inferred = [name for name, case in recorded.items() if autocast_dtype(case) is not None]
    assert len(inferred) >= 8  # every linear and conv2d, both cross_entropy
    graded = 0
    for result in run.results:
        assert not any(d.status == ERROR for d in result.details), result.message
        case = recorded[result.name]
        for row in result.details:
            if row.direction == "forward" and row.comparison.target_dtype:
                assert row.comparison.target_dtype == str(flatten(case.outputs)[row.index].dtype), row.name
                graded += 1
    assert graded >= len(inferred)


def test_a_cuda_cross_entropy_with_bf16_rounding_is_held_to_bf16(tmp_path: Path) -> None:
    """CUDA's autocast runs cross_entropy's log_softmax in the logits' bf16 (it names their dtype) and only its
    nll_loss in fp32: its fp32 loss carries bf16 rounding (an H200's 1.48046875 where fp32 gives 1.4817938). Held
    to fp32's precision, such a record was an error thousands of times worse than an honest fp32 kernel."""
    torch.manual_seed(0)
    logits, labels = torch.randn(6, 6).bfloat16(), torch.randint(0, 6, (6,))
    with precheck.record(tmp_path / "dump", task="tensor"), torch.autocast("cpu", dtype=torch.bfloat16):
        F.cross_entropy(logits, labels)
    dump = next((tmp_path / "dump").glob("step0/*/dump.json"))
    cuda_way = F.nll_loss(F.log_softmax(logits, -1, dtype=torch.bfloat16).float(), labels)
    assert cuda_way != F.cross_entropy(logits.float(), labels)
    torch.save(cuda_way, dump.parent / "dump_tensor_data" / "Functional.cross_entropy.0.forward.output.0.pt")
    run = run_ut(dump, tmp_path / "out", device="cpu", backend="inprocess", options=CheckOptions(target="recorded"))
    (row,) = [d for r in run.results for d in r.details if d.direction == "forward"]
    assert row.status != ERROR, row.comparison.message
    assert row.comparison.target_dtype == "torch.float32"


def test_a_norms_fp32_gradients_from_fp16_data_are_held_to_fp16(tmp_path: Path) -> None:
    """A layer_norm of an fp16 input with fp32 weight and bias (the CPU's mixed-dtype kernel, autocast or not)
    computes their fp32 gradients from fp16 intermediates: held to fp32, they read as 1.55e4x an honest fp32
    kernel, when they are a few fp16 roundings off."""
    torch.manual_seed(0)
    x = torch.randn(4, 16).half().requires_grad_()
    norm = torch.nn.LayerNorm(16)
    with precheck.record(tmp_path / "dump", task="tensor"):
        norm(x).float().pow(2).sum().backward()
    dump = next((tmp_path / "dump").glob("step0/*/dump.json"))
    run = run_ut(dump, tmp_path / "out", device="cpu", backend="inprocess", options=CheckOptions(target="recorded"))
    grads = [d for r in run.results if r.name.startswith("Functional.layer_norm") for d in r.details]
    weight = [d for d in grads if d.direction == "backward" and d.index == 1]
    assert weight and weight[0].comparison.target_dtype == "torch.float32"
    assert "fp32" not in weight[0].comparison.message, weight[0].comparison.message
