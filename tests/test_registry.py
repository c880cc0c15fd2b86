"""The registry: every prefix a dump can hold runs (Aten overloads, VF), unsafe names never do, ambiguous outputs
are canonicalised before grading, and what cannot run is a SKIP row saying why."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from helpers import misbehaving_env, tensor_rec

import api_registry
from api_registry import catalogue, lookup, why_unsupported
from api_registry.canonical import canonical_for
from api_registry.sizes import output_elements
from precheck.commands.cli import main
from precheck.dump.records import Stats, TensorSpec
from precheck.execution.options import CheckOptions
from precheck.run_ut import run_ut
from precheck.walk import flatten


class Saved:
    """Builds a tensor-mode dump: each tensor goes to dump_tensor_data/ and is referenced by its record."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "dump_tensor_data").mkdir(parents=True, exist_ok=True)
        self.count = 0

    def __call__(self, t: torch.Tensor, requires_grad: bool = False) -> dict:
        self.count += 1
        name = f"t{self.count}.pt"
        torch.save(t, self.root / "dump_tensor_data" / name)
        stats = t.double() if t.numel() else torch.zeros(1, dtype=torch.float64)
        return tensor_rec(
            str(t.dtype),
            tuple(t.shape),
            data_name=name,
            requires_grad=requires_grad,
            Max=stats.max().item(),
            Min=stats.min().item(),
            Mean=stats.mean().item(),
            Norm=stats.norm().item(),
        )


def _rows(out: Path) -> dict[str, list[str]]:
    with next(out.glob("accuracy_checking_result_*.csv")).open(encoding="utf-8-sig") as f:
        return {r[0]: r[1:] for r in list(csv.reader(f))[1:]}


def _details(out: Path) -> dict[str, list[str]]:
    with next(out.glob("accuracy_checking_details_*.csv")).open(encoding="utf-8-sig") as f:
        return {r[0]: r[1:] for r in list(csv.reader(f))[1:]}


def _run(write_dump, tmp_path: Path, data: dict) -> dict[str, list[str]]:
    dump = write_dump(data)
    run_ut(dump, tmp_path / "out", device="cpu")
    return _rows(tmp_path / "out")


def test_aten_overloads_run_and_pass(write_dump, tmp_path):
    s = Saved(tmp_path)
    torch.manual_seed(0)
    a, b, m = torch.randn(3, 4), torch.randn(3, 4), torch.randn(4, 5)
    ties = torch.tensor([2.0, 1.0, 2.0, 1.0, 0.5])
    data = {
        "Aten.add.Tensor.0.forward": {
            "input_args": [s(a), s(b)],
            "input_kwargs": {"alpha": {"type": "int", "value": 2}},
            "output": [s(a + 2 * b)],
        },
        "Aten.mm.default.0.forward": {"input_args": [s(a), s(m)], "input_kwargs": {}, "output": [s(a @ m)]},
        "Aten.sum.dim_IntList.0.forward": {
            "input_args": [s(a), [{"type": "int", "value": 1}]],
            "input_kwargs": {},
            "output": [s(a.sum(1))],
        },
        "Aten.mul_.Tensor.0.forward": {"input_args": [s(a), s(b)], "input_kwargs": {}, "output": [s(a * b)]},
        "Aten.sort.default.0.forward": {
            "input_args": [s(ties)],
            "input_kwargs": {},
            "output": [s(ties.sort().values), s(ties.sort().indices)],
        },
        "Aten.bernoulli.default.0.forward": {
            "input_args": [s(torch.full((64,), 0.5))],
            "input_kwargs": {},
            "output": [s(torch.ones(64))],
        },
    }
    rows = _run(write_dump, tmp_path, data)
    for name in (
        "Aten.add.Tensor.0",
        "Aten.mm.default.0",
        "Aten.sum.dim_IntList.0",
        "Aten.mul_.Tensor.0",
        "Aten.sort.default.0",
    ):
        assert rows[name][0] == "pass", (name, rows[name])
    assert rows["Aten.bernoulli.default.0"][0] != "error"  # random: checked statistically or SKIP, never diffed


def test_vf_runs_and_distributed_mindspeed_npu_skip_with_reasons(write_dump, tmp_path):
    s = Saved(tmp_path)
    x = torch.randn(3, 4)
    data = {
        "VF.tanh.0.forward": {"input_args": [s(x)], "input_kwargs": {}, "output": [s(x.tanh())]},
        "Distributed.all_reduce.0.forward": {"input_args": [s(x)], "input_kwargs": {}, "output": [s(x)]},
        "MindSpeed.npu_ring_attention_update.0.forward": {"input_args": [s(x)], "input_kwargs": {}, "output": [s(x)]},
        "NPU.npu_no_such_fused_op.0.forward": {"input_args": [s(x)], "input_kwargs": {}, "output": [s(x)]},
    }
    rows = _run(write_dump, tmp_path, data)
    assert rows["VF.tanh.0"][0] == "pass"
    assert rows["Distributed.all_reduce.0"][0] == "SKIP"
    assert "needs a process group" in rows["Distributed.all_reduce.0"][2]
    assert "needs a process group" in rows["MindSpeed.npu_ring_attention_update.0"][2]
    assert rows["NPU.npu_no_such_fused_op.0"][2].startswith(
        "NPU op NPU.npu_no_such_fused_op: no CPU reference implementation"
    )


def _npu_dump(s: Saved, scale: float = 1.0, keep_prob: float = 1.0) -> dict:
    """An NPU dump as the device recorded it: rms_norm (its rstd in float32) and a causal fusion attention."""
    torch.manual_seed(1)
    x, gamma = torch.randn(2, 5, 8, dtype=torch.bfloat16), torch.rand(8, dtype=torch.bfloat16) + 0.5
    x64 = x.double()
    rstd = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
    y = (x64 * rstd * gamma.double() * scale).to(torch.bfloat16)
    q, k, v = (torch.randn(1, 4, 16, dtype=torch.bfloat16) for _ in range(3))  # BSH, 2 heads of 8
    qh, kh, vh = (t.double().view(1, 4, 2, 8).transpose(1, 2) for t in (q, k, v))
    att = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=8**-0.5)
    att = att.transpose(1, 2).reshape(1, 4, 16).to(torch.bfloat16)
    mask = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    scores = (qh @ kh.transpose(-2, -1) * 8**-0.5).masked_fill(mask, float("-inf"))
    top = scores.amax(-1, keepdim=True)
    softmax_max = top.expand(1, 2, 4, 8).float()
    softmax_sum = (scores - top).exp().sum(-1, keepdim=True).expand(1, 2, 4, 8).float()
    i = lambda n: {"type": "int", "value": n}  # noqa: E731
    return {
        "NPU.npu_rms_norm.0.forward": {
            "input_args": [s(x), s(gamma)],
            "input_kwargs": {"epsilon": {"type": "float", "value": 1e-6}},
            "output": [s(y), s(rstd.float())],
        },
        "NPU.npu_fusion_attention.0.forward": {
            "input_args": [s(q), s(k), s(v), {"type": "int", "value": 2}, {"type": "str", "value": "BSH"}],
            "input_kwargs": {
                "atten_mask": s(mask),
                "scale": {"type": "float", "value": 8**-0.5},
                "keep_prob": {"type": "float", "value": keep_prob},
                "sparse_mode": {"type": "int", "value": 2},
            },
            # the NPU's softmax max and sum are float32 (B, N, S, 8); seed and offset are its generator's state
            "output": [
                s(att),
                s(softmax_max),
                s(softmax_sum),
                s(torch.zeros(0, dtype=torch.bfloat16)),
                i(1234),
                i(99),
                i(32),
            ],
        },
    }


def _recorded(write_dump, tmp_path: Path, data: dict) -> dict[str, list[str]]:
    run_ut(write_dump(data), tmp_path / "out", device="cpu", options=CheckOptions(target="recorded"))
    return _rows(tmp_path / "out")


def test_npu_fused_ops_are_graded_against_their_cpu_reference(write_dump, tmp_path):
    rows = _recorded(write_dump, tmp_path, _npu_dump(Saved(tmp_path)))
    assert rows["NPU.npu_rms_norm.0"][0] in ("pass", "warning"), rows  # bf16 rounding: within its tolerance
    assert rows["NPU.npu_fusion_attention.0"][0] in ("pass", "warning"), rows


def test_a_wrong_npu_result_is_an_error(write_dump, tmp_path):
    rows = _recorded(write_dump, tmp_path, _npu_dump(Saved(tmp_path), scale=1.05))
    assert rows["NPU.npu_rms_norm.0"][0] == "error"


def test_npu_ops_need_an_npu_or_the_recorded_target(write_dump, tmp_path):
    data = _npu_dump(Saved(tmp_path), keep_prob=0.9)
    rows = _run(write_dump, tmp_path, data)
    assert rows["NPU.npu_rms_norm.0"] == [
        "SKIP",
        " ",
        "NPU.npu_rms_norm is an NPU fused op: it runs on an NPU, not "
        "on cpu; --target recorded grades its recorded outputs against the CPU "
        "reference",
    ]
    rows = _recorded(write_dump, tmp_path / "again", data)
    assert rows["NPU.npu_fusion_attention.0"][0] == "SKIP"
    assert "keep_prob=0.9 draws a dropout mask" in rows["NPU.npu_fusion_attention.0"][2]


def test_int32_class_ids_are_widened_for_the_cpu(write_dump, tmp_path):
    s = Saved(tmp_path)
    logits, target = torch.randn(4, 5), torch.tensor([1, 0, 4, 2], dtype=torch.int32)
    loss = torch.nn.functional.cross_entropy(logits, target.long())
    rows = _run(
        write_dump,
        tmp_path,
        {
            "Functional.cross_entropy.0.forward": {
                "input_args": [s(logits), s(target)],
                "input_kwargs": {},
                "output": [s(loss)],
            }
        },
    )
    assert rows["Functional.cross_entropy.0"][0] == "pass"


@pytest.mark.parametrize(
    "name",
    [
        "Torch.load",
        "Torch.save",
        "Torch.from_file",
        "Torch.manual_seed",
        "Torch.set_default_dtype",
        "Tensor.register_hook",
        "Tensor.backward",
        "Tensor.apply_",
        "Tensor.numpy",
        "Tensor.__class__",
        "Tensor.__reduce_ex__",
        "Functional.handle_torch_function",
        "Aten._foo.default",
        "Aten.add.NoSuchOverload",
        "Aten.add",
        "Torch.os.system",
        "Tensor.__init__",
        "Functional.Optional",  # typing.Optional, imported by torch.nn.functional for its annotations
    ],
)
def test_names_that_are_not_computations_never_run(name):
    assert lookup(name) is None
    assert why_unsupported(name) == f"not supported: {name}"


def test_every_entry_is_a_function():
    # callable(typing.Optional) is True: the registry took it for an API ("Functional.Optional").
    kinds = {type(entry.func).__name__ for entry in api_registry.registry().values()}
    assert kinds <= {"builtin_function_or_method", "method_descriptor", "function", "wrapper_descriptor"}, kinds


def test_every_prefix_is_built_from_torch():
    reg = api_registry.registry()
    for name in (
        "Functional.scaled_dot_product_attention",
        "Torch.linalg.eigh",
        "Torch.fft.rfft",
        "Torch.special.erf",
        "Tensor.__radd__",
        "Tensor.__rmatmul__",
        "Tensor.__setitem__",
        "Tensor.add_",
        "VF.lstm",
        "Torch.einsum",
        "Tensor.index_add_",
    ):
        assert name in reg, name
    assert lookup("Aten.add.Tensor").func is torch.ops.aten.add.Tensor
    assert lookup("Aten.add_.Tensor").inplace and lookup("Aten.add.out").inplace
    assert not lookup("Aten.add.Tensor").inplace
    assert lookup("Tensor.index_add_").nondeterministic


@pytest.mark.parametrize(
    "prefix, name, cls",
    [
        ("Aten", "addmm", catalogue.MATMUL),
        ("Aten", "convolution", catalogue.CONV),
        ("Aten", "native_layer_norm", catalogue.OTHER),
        ("Aten", "sum", catalogue.REDUCTION),
        ("Aten", "add_", catalogue.POINTWISE),
        ("VF", "bmm", catalogue.MATMUL),
        ("Tensor", "scatter_add_", catalogue.REDUCTION),
        ("Torch", "sort", catalogue.BINARY),
        ("Torch", "zeta_unknown_name", catalogue.OTHER),
    ],
)
def test_standard_class_of_each_family(prefix, name, cls):
    assert catalogue.class_of(prefix, name) == cls


@pytest.mark.parametrize(
    "api, args, kwargs, random",
    [
        ("Functional.dropout", (torch.ones(3),), {"p": 0.1}, True),
        ("Functional.dropout", (torch.ones(3),), {"p": 0.1, "training": False}, False),
        ("Functional.dropout", (torch.ones(3), 0.0), {}, False),
        ("Functional.scaled_dot_product_attention", (1, 2, 3), {"dropout_p": 0.1}, True),
        ("Functional.scaled_dot_product_attention", (1, 2, 3, None, 0.0), {}, False),
        ("Torch.randn", (2, 3), {}, True),
        ("Tensor.uniform_", (torch.ones(2),), {}, True),
        ("Aten.native_dropout.default", (torch.ones(2), 0.5, False), {}, False),
        ("Aten.native_dropout.default", (torch.ones(2), 0.5, True), {}, True),
        ("Aten.normal.Tensor_float", (torch.ones(2),), {}, True),
        ("VF.lstm", (1, 2, 3, True, 2, 0.2, True), {}, True),
        ("VF.lstm", (1, 2, 3, True, 1, 0.2, True), {}, False),
        ("Torch.add", (torch.ones(2), 1), {}, False),
        ("Aten.add.Tensor", (torch.ones(2), 1), {}, False),
    ],
)
def test_randomness_is_decided_per_call(api, args, kwargs, random):
    assert (lookup(api).random_reason(args, kwargs) is not None) == random


def test_tied_indices_are_graded_by_the_values_they_select():
    canonical = canonical_for("sort")
    x = torch.tensor([[2.0, 1.0, 2.0, 1.0]])
    one = canonical((x,), {}, [x.sort().values, torch.tensor([[1, 3, 0, 2]])])
    other = canonical((x,), {}, [x.sort().values, torch.tensor([[3, 1, 2, 0]])])
    assert torch.equal(one[1], other[1])
    wrong = canonical((x,), {}, [x.sort().values, torch.tensor([[1, 0, 3, 2]])])
    assert not torch.equal(one[1], wrong[1])
    # keepdim=False selections lose the dim; the reduce-all form has no index to rewrite
    y = torch.tensor([[1.0, 5.0], [5.0, 5.0]])
    assert torch.equal(canonical_for("max")((y, 1), {}, [*y.max(1)])[1], torch.tensor([5.0, 5.0]))
    assert canonical_for("max")((y,), {}, [y.max()])[0] == 5.0
    assert torch.equal(canonical_for("argmax")((y,), {}, [torch.tensor(3)])[0], torch.tensor(5.0))
    assert torch.equal(canonical_for("topk")((y, 1), {"dim": 0}, [*y.topk(1, dim=0)])[1], torch.tensor([[5.0, 5.0]]))


def test_eigen_and_singular_vectors_lose_their_sign():
    a = torch.randn(4, 4, dtype=torch.float64)
    sym = a + a.T
    values, vectors = torch.linalg.eigh(sym)
    flipped = vectors * torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64)
    eigh = canonical_for("linalg.eigh")
    assert torch.allclose(eigh((sym,), {}, [values, vectors])[1], eigh((sym,), {}, [values, flipped])[1])
    u, s, vh = torch.linalg.svd(a)
    sign = torch.tensor([-1.0, 1.0, -1.0, 1.0], dtype=torch.float64)
    svd = canonical_for("linalg.svd")
    one, other = svd((a,), {}, [u, s, vh]), svd((a,), {}, [u * sign, s, vh * sign[:, None]])
    assert all(torch.allclose(x, y) for x, y in zip(one, other))
    assert torch.allclose(one[0] @ torch.diag(one[1]) @ one[2], a)  # still a decomposition of a
    q, r = torch.linalg.qr(a)
    qr = canonical_for("linalg.qr")
    cq, cr = qr((a,), {}, [q * sign, r * sign[:, None]])
    assert (torch.diagonal(cr) >= 0).all() and torch.allclose(cq @ cr, a)


def test_unordered_unique_and_uninitialised_memory():
    unique = canonical_for("unique")
    x = torch.tensor([3, 1, 3, 2])
    values, inverse, counts = torch.tensor([3, 2, 1]), torch.tensor([0, 2, 0, 1]), torch.tensor([2, 1, 1])
    out = unique((x, False, True, True), {}, [values, inverse, counts])
    assert out[0].tolist() == [1, 2, 3] and out[1].tolist() == [3, 1, 3, 2] and out[2].tolist() == [1, 1, 2]
    assert canonical_for("empty")((2, 3), {}, [torch.empty(2, 3)]) == [(2, 3)]


def test_apis_lists_every_prefix(capsys):
    assert main(["apis"]) == 0
    lines = capsys.readouterr().out.splitlines()
    prefixes = {line.split()[0]: int(line.split()[-1]) for line in lines[1:]}
    assert set(prefixes) >= {"Aten", "Functional", "Tensor", "Torch", "VF"}
    assert prefixes["Aten"] > 1000 and prefixes["Functional"] > 100 and prefixes["Tensor"] > 400


def test_msprobe_names_of_linalg_calls_run_the_call_that_was_made(write_dump, tmp_path):
    """msprobe records torch.linalg.svd as Torch.svd, like torch.svd: the outputs' shapes tell which it was."""
    s = Saved(tmp_path)
    a = torch.randn(3, 4)
    u, sv, vh = torch.linalg.svd(a)
    old_u, old_s, old_v = torch.svd(a)
    rows = _run(
        write_dump,
        tmp_path,
        {
            "Torch.svd.0.forward": {"input_args": [s(a)], "input_kwargs": {}, "output": [s(u), s(sv), s(vh)]},
            "Torch.svd.1.forward": {"input_args": [s(a)], "input_kwargs": {}, "output": [s(old_u), s(old_s), s(old_v)]},
            "Torch.inv.0.forward": {
                "input_args": [s(a[:, :3])],
                "input_kwargs": {},
                "output": [s(torch.linalg.inv(a[:, :3]))],
            },
            "Tensor.to.0.forward": {
                "input_args": [s(a), {}],
                "input_kwargs": {"memory_format": {"type": "torch.memory_format", "format": "preserve_format"}},
                "output": [s(a.double())],
            },
        },
    )
    assert {name: row[0] for name, row in rows.items()} == {
        "Torch.svd.0": "pass",
        "Torch.svd.1": "pass",
        "Torch.inv.0": "pass",
        "Tensor.to.0": "pass",
    }


@pytest.mark.parametrize(
    "recorded, status",
    [
        (lambda x, mask: x * mask / 0.5, "pass"),  # what dropout(p=0.5) computes
        (lambda x, mask: x.clone(), "error"),  # nothing dropped
        (lambda x, mask: x * mask, "error"),  # survivors not scaled by 1 / (1 - p)
    ],
)
def test_a_recorded_dropout_is_graded_by_the_law_of_its_draw(write_dump, tmp_path, recorded, status):
    s = Saved(tmp_path)
    gen = torch.Generator().manual_seed(3)
    x = torch.rand(64, 64, generator=gen) + 0.5
    mask = (torch.rand(64, 64, generator=gen) >= 0.5).float()
    data = {
        "Functional.dropout.0.forward": {
            "input_args": [s(x)],
            "input_kwargs": {"p": {"type": "float", "value": 0.5}, "training": {"type": "bool", "value": True}},
            "output": [s(recorded(x, mask))],
        }
    }
    rows = _recorded(write_dump, tmp_path, data)
    assert rows["Functional.dropout.0"][0] == status, rows
    details = _details(tmp_path / "out")["Functional.dropout.0.forward.output.0"]
    assert details[-1].startswith("target: recorded outputs; random op, checked statistically: ")


def test_plugins_named_in_the_environment_add_apis_and_a_bad_one_says_which(monkeypatch):
    import api_registry
    from api_registry.plugins import PluginError

    assert lookup("Torch.precheck_slow") is None  # the test suite's misbehaving APIs are not in the product
    for key, value in misbehaving_env().items():
        monkeypatch.setenv(key, value)
    api_registry.registry.cache_clear()
    try:
        entry = lookup("Torch.precheck_slow")
        assert entry is not None and entry.standard == "other"
        monkeypatch.setenv("PRECHECK_PLUGINS", "misbehaving, no_such_plugin_module")
        api_registry.registry.cache_clear()
        with pytest.raises(PluginError, match="PRECHECK_PLUGINS: cannot import no_such_plugin_module"):
            lookup("Torch.add")
    finally:
        monkeypatch.delenv("PRECHECK_PLUGINS")
        api_registry.registry.cache_clear()


def test_a_name_s_class_without_the_table_agrees_with_the_table():
    """api_precision_compare asks classes.api_class (no torch) what lookup(name).standard would say."""
    from api_registry import registry
    from api_registry.classes import api_class

    differ = {
        name: (entry.standard, api_class(name))
        for name, entry in registry().items()
        if api_class(name) != entry.standard
    }
    assert differ == {}
    assert api_class("Aten.mm.default") == lookup("Aten.mm.default").standard == catalogue.MATMUL
    assert api_class("NPU.npu_linear") == catalogue.MATMUL and api_class("Mystery.op") is None


def _r(*shape: int) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(len(shape)))


# (api, args, kwargs) of calls whose output size their arguments set: what each really makes, small.
SIZED_BY_ARGUMENTS = [
    ("Torch.bincount", (torch.tensor([0, 7, 2]),), {"minlength": 20}),
    ("Tensor.bincount", (torch.tensor([0, 7, 2]),), {}),
    ("Torch.hann_window", (50,), {}),
    ("Torch.kaiser_window", (), {"window_length": 33}),
    ("Torch.histc", (_r(10), 30), {}),
    ("Torch.histogram", (_r(10), 30), {}),
    ("Torch.arange", (2, 50, 3), {}),
    ("Torch.logspace", (0, 1), {"steps": 40}),
    ("Torch.eye", (7, 9), {}),
    ("Torch.full", ((3, 4), 1.0), {}),
    ("Torch.randint", (0, 9, (5, 6)), {}),
    ("Torch.outer", (_r(30), _r(40)), {}),
    ("Tensor.ger", (_r(30), _r(40)), {}),
    ("Torch.kron", (_r(3, 4), _r(5, 6)), {}),
    ("Torch.addr", (_r(30, 40), _r(30), _r(40)), {}),
    ("Torch.cartesian_prod", (_r(3), _r(4), _r(5)), {}),
    ("Torch.combinations", (_r(12),), {"r": 3}),
    ("Torch.combinations", (_r(12), 3, True), {}),
    ("Torch.tril_indices", (30, 40), {}),
    ("Tensor.repeat", (_r(2, 3), 4, 5), {}),
    ("Torch.repeat_interleave", (_r(2, 3), 4), {}),
    ("Torch.repeat_interleave", (torch.tensor([3, 1, 5]),), {}),
    ("Tensor.expand", (_r(1, 3), 40, 3), {}),
    ("Torch.tile", (_r(2, 3), (4, 5)), {}),
    ("Functional.one_hot", (torch.tensor([0, 3, 9]),), {}),
    ("Functional.one_hot", (torch.tensor([0, 3, 9]), 30), {}),
    ("Torch.cdist", (_r(2, 30, 4), _r(1, 40, 4)), {}),
    ("Torch.einsum", ("i,j->ij", _r(30), _r(40)), {}),
    ("Torch.einsum", ("bij,bjk", _r(2, 3, 4), _r(2, 4, 5)), {}),
    ("Torch.einsum", ("...ij,...jk->...ik", _r(2, 1, 3, 4), _r(5, 4, 6)), {}),
    ("Torch.matmul", (_r(2, 1, 30, 4), _r(7, 4, 40)), {}),
    ("Torch.matmul", (_r(30), _r(2, 30, 4)), {}),
    ("Tensor.__matmul__", (_r(30, 1), _r(1, 40)), {}),
    ("Torch.bmm", (_r(2, 30, 1), _r(2, 1, 40)), {}),
    ("Torch.addmm", (_r(40), _r(30, 1), _r(1, 40)), {}),
    ("Functional.linear", (_r(30, 1), _r(40, 1)), {}),
    ("Torch.add", (_r(30, 1), _r(1, 40)), {}),
    ("Tensor.__mul__", (_r(30, 1), _r(1, 40)), {}),
    ("Torch.where", (_r(30, 1) > 0.5, _r(1, 40), _r(30, 1)), {}),
    ("Torch.eq", (_r(30, 1), _r(1, 40)), {}),
    ("Torch.tensordot", (_r(3, 4, 5), _r(4, 5, 6)), {}),
    ("Torch.tensordot", (_r(3, 4, 5), _r(4, 5, 6)), {"dims": ([1], [0])}),
    ("Torch.block_diag", (_r(3, 4), _r(5, 6), _r(2)), {}),
    ("Torch.diag", (_r(30),), {}),
    ("Torch.diagflat", (_r(3, 4),), {}),
    ("Torch.diag_embed", (_r(2, 30),), {}),
    ("Torch.vander", (_r(30),), {"N": 20}),
    ("Functional.pdist", (_r(30, 4),), {}),
    ("Functional.embedding", (torch.tensor([[1, 2], [3, 9]]), _r(10, 50)), {}),
    ("Torch.embedding", (_r(10, 50), torch.tensor([[1, 2], [3, 9]])), {}),
    ("Torch.multinomial", (_r(3, 10), 50, True), {}),
    ("Functional.interpolate", (_r(1, 2, 4, 4),), {"scale_factor": 5}),
    ("Functional.interpolate", (_r(1, 2, 4, 4),), {"size": (30, 40)}),
    ("Functional.adaptive_avg_pool2d", (_r(1, 2, 4, 4), (30, 40)), {}),
    ("Tensor.unfold", (_r(100), 0, 50, 1), {}),
    ("Torch.quantile", (_r(30, 4), _r(50)), {"dim": 1}),
    ("Torch.meshgrid", (_r(30), _r(40)), {"indexing": "ij"}),
    ("Torch.broadcast_tensors", (_r(30, 1), _r(1, 40)), {}),
    ("Functional.pad", (_r(3, 4), (10, 10, 20, 20)), {}),
    ("Functional.conv1d", (_r(1, 2, 5), _r(3, 2, 3)), {"padding": 40}),
    ("Functional.conv2d", (_r(1, 2, 5, 6), _r(3, 2, 3, 3)), {"dilation": 2, "padding": "same"}),
    ("Functional.conv_transpose1d", (_r(1, 2, 5), _r(2, 3, 3)), {"stride": 30}),
    ("Functional.unfold", (_r(1, 2, 6, 7),), {"kernel_size": 3, "padding": 5}),
    ("Functional.fold", (_r(1, 4, 6),), {"output_size": (30, 40), "kernel_size": 2, "stride": (10, 20)}),
    ("Functional.max_unpool1d", (_r(1, 2, 5), torch.zeros(1, 2, 5, dtype=torch.long), 2, 60), {"output_size": [300]}),
    ("Functional.grid_sample", (_r(1, 3, 4, 4), _r(1, 30, 40, 2)), {"align_corners": False}),
    ("Functional.affine_grid", (_r(1, 2, 3), [1, 3, 30, 40]), {"align_corners": False}),
    ("Torch.fft.fft", (_r(2, 3),), {"n": 300}),
    ("Torch.fft.rfft", (_r(2, 3),), {"n": 300}),
    ("Torch.fft.irfft", (_r(2, 30),), {}),
    ("Torch.fft.fftn", (_r(2, 3, 4),), {"s": (30, 40)}),
    ("Torch.stft", (_r(400), 64), {"hop_length": 2, "return_complex": True}),
    ("Torch.istft", (torch.randn(9, 5, dtype=torch.complex64), 16), {"length": 300}),
    ("Torch.cov", (_r(30, 2),), {}),
    ("Torch.corrcoef", (_r(30, 2),), {}),
    ("Torch.inner", (_r(30, 1), _r(40, 1)), {}),
    ("Torch.take_along_dim", (_r(30, 1), torch.zeros(1, 40, dtype=torch.long), 1), {}),
    ("Torch.index_select", (_r(1, 40), 0, torch.zeros(30, dtype=torch.long)), {}),
    ("Tensor.__getitem__", (_r(3, 4), (torch.zeros(30, 1).long(), torch.zeros(1, 40).long())), {}),
    ("Torch.masked_select", (_r(30, 1), torch.ones(1, 40, dtype=torch.bool)), {}),
    ("Torch.linalg.qr", (_r(30, 2),), {"mode": "complete"}),
    ("Torch.linalg.svd", (_r(30, 2),), {}),
    ("Torch.svd", (_r(30, 2),), {"some": False}),
    ("Functional.embedding_bag", (torch.tensor([1, 2, 3, 4]), _r(10, 50), torch.tensor([0, 1, 2, 3])), {}),
    ("Torch.fft.fftfreq", (300,), {}),
]


@pytest.mark.parametrize("api, args, kwargs", SIZED_BY_ARGUMENTS, ids=lambda v: v if isinstance(v, str) else "")
def test_output_sizes_read_from_arguments_are_what_the_call_makes_within_a_factor_of_two(api, args, kwargs):
    """--max-memory holds a call to the size its arguments ask for, read from the record (tensors as their specs,
    with the statistics a generated input will hold), so the estimate must neither miss what torch makes nor
    refuse an honest call for twice its size."""

    def spec(t: object) -> object:
        if not isinstance(t, torch.Tensor):
            return t
        d = t.double()
        return TensorSpec(t.dtype, tuple(t.shape), Stats(d.max().item(), d.min().item(), d.mean().item(), 1.0))

    made = lookup(api).func(*args, **kwargs)
    made = sum(t.numel() for t in flatten(made if isinstance(made, (tuple, list)) else [made]))
    estimate = output_elements(api, tuple(map(spec, args)), {k: spec(v) for k, v in kwargs.items()})
    assert estimate is not None and made <= estimate <= 2 * made + 2, (made, estimate)
