"""run_side and the targets: how each side rebuilds and runs a recorded call."""

from __future__ import annotations

import weakref

import pytest
import torch
from helpers import real_dump_json, without_collector

from api_registry import lookup
from precheck.dump.records import DeviceArg, Stats, TensorSpec, load_dump
from precheck.execution.runner import Call, SideRun, one_line, run_side
from precheck.execution.sides import GOLDEN, DeviceError, Side, resolve_device, target_side
from precheck.grader import ERROR, compare
from precheck.inputs.builder import iter_specs, load_tree
from precheck.walk import flatten

TARGET = target_side("cpu")
STATS = Stats(1.0, -1.0, 0.0, 1.0)


def spec_of(t: torch.Tensor, requires_grad: bool = False) -> TensorSpec:
    return TensorSpec(dtype=t.dtype, shape=tuple(t.shape), stats=STATS, requires_grad=requires_grad, data_name="x.pt")


def specs(tree, grad=()):
    """The decoded spec tree of a tree of tensors; tensors whose id is in ``grad`` required grad."""
    if isinstance(tree, torch.Tensor):
        return spec_of(tree, requires_grad=id(tree) in grad)
    if isinstance(tree, tuple):
        return tuple(specs(v, grad) for v in tree)
    if isinstance(tree, dict):
        return {k: specs(v, grad) for k, v in tree.items()}
    return tree


def run(api, args, kwargs=None, side=TARGET, grad_outputs=None, grad=()):
    """Run ``api`` on ``side`` with loaded tensors ``args``/``kwargs`` (``grad``: tensors that required grad)."""
    kwargs = kwargs or {}
    entry = lookup(api)
    assert entry is not None, api
    call = Call(
        entry, specs(args, {id(t) for t in grad}), specs(kwargs, {id(t) for t in grad}), args, kwargs, grad_outputs
    )
    result = run_side(call, side)
    assert isinstance(result, SideRun)
    return result


def both(api, args, kwargs=None, **kw):
    target = run(api, args, kwargs, TARGET, **kw)
    golden = run(api, args, kwargs, GOLDEN, **kw)
    assert target.error is None, target.error
    assert golden.error is None, golden.error
    return target, golden


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# --------------------------------------------------------------------------------------------- golden dtypes


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_golden_raises_floats_to_float64(dtype):
    x, y = rand(3, 4, dtype=dtype, seed=1), rand(3, 4, dtype=dtype, seed=2)
    target, golden = both("Torch.add", (x, y))
    assert target.outputs[0].dtype == dtype
    assert golden.outputs[0].dtype == torch.float64
    assert torch.equal(golden.outputs[0], x.double() + y.double())
    assert torch.equal(target.outputs[0], x + y)


def test_golden_raises_complex_to_complex128():
    x = torch.complex(rand(4, seed=1), rand(4, seed=2))
    y = torch.complex(rand(4, seed=3), rand(4, seed=4))
    target, golden = both("Torch.mul", (x, y))
    assert target.outputs[0].dtype == torch.complex64
    assert golden.outputs[0].dtype == torch.complex128
    assert torch.allclose(golden.outputs[0], x.to(torch.complex128) * y.to(torch.complex128), rtol=0, atol=1e-15)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8])
def test_golden_keeps_integers(dtype):
    x = torch.arange(6).to(dtype)
    target, golden = both("Torch.add", (x, x))
    assert target.outputs[0].dtype == golden.outputs[0].dtype == dtype
    assert torch.equal(golden.outputs[0], x + x)


def test_golden_keeps_bool():
    a = torch.tensor([True, False, True])
    b = torch.tensor([True, True, False])
    target, golden = both("Torch.logical_and", (a, b))
    assert golden.outputs[0].dtype == torch.bool
    assert torch.equal(golden.outputs[0], torch.tensor([True, False, False]))


def test_mixed_int_and_float_inputs():
    x = torch.arange(4)
    y = rand(4, dtype=torch.float16)
    target, golden = both("Torch.add", (x, y))
    assert target.outputs[0].dtype == torch.float16
    assert golden.outputs[0].dtype == torch.float64


@pytest.mark.parametrize("how", ["positional", "keyword"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_dtype_argument_is_raised_on_golden(how, dtype):
    x = rand(5, seed=3)
    args, kwargs = ((x, dtype), {}) if how == "positional" else ((x,), {"dtype": dtype})
    target, golden = both("Tensor.to", args, kwargs)
    assert target.outputs[0].dtype == dtype
    assert golden.outputs[0].dtype == torch.float64
    assert torch.equal(golden.outputs[0], x.double())  # the golden never rounds


def test_integer_dtype_argument_kept_on_golden():
    x = torch.tensor([1.5, -2.5, 3.0])
    target, golden = both("Tensor.to", (x, torch.int32))
    assert target.outputs[0].dtype == golden.outputs[0].dtype == torch.int32


def test_sum_with_dtype_keyword_on_int_input():
    x = torch.arange(10)
    target, golden = both("Torch.sum", (x,), {"dtype": torch.float16})
    assert target.outputs[0].dtype == torch.float16
    assert golden.outputs[0].dtype == torch.float64
    assert golden.outputs[0].item() == 45.0


def test_downcast_api_has_float64_golden():
    x = rand(8, seed=4)
    target, golden = both("Tensor.half", (x,))
    assert target.outputs[0].dtype == torch.float16
    assert golden.outputs[0].dtype == torch.float64
    assert compare(target.outputs[0], golden.outputs[0]).status != ERROR


def test_side_dtype_mapping():
    assert GOLDEN.dtype(torch.float16) is torch.float64
    assert GOLDEN.dtype(torch.bfloat16) is torch.float64
    assert GOLDEN.dtype(torch.complex64) is torch.complex128
    assert GOLDEN.dtype(torch.int16) is torch.int16
    assert GOLDEN.dtype(torch.bool) is torch.bool
    assert TARGET.dtype(torch.bfloat16) is torch.bfloat16
    assert GOLDEN.device == "cpu" and GOLDEN.golden and not TARGET.golden


# --------------------------------------------------------------------------------------------- devices


def test_device_argument_becomes_the_side_device():
    x = rand(3)
    for recorded in ("npu:0", "cuda:5", "cpu"):
        target, golden = both("Tensor.to", (x, DeviceArg(recorded)))
        assert target.outputs[0].device.type == "cpu"
        assert golden.outputs[0].device.type == "cpu"
        assert golden.outputs[0].dtype == torch.float64


def test_device_keyword_argument():
    x = rand(3)
    target, golden = both("Tensor.to", (x,), {"device": DeviceArg("npu:1"), "dtype": torch.float16})
    assert target.outputs[0].dtype == torch.float16 and target.outputs[0].device.type == "cpu"
    assert golden.outputs[0].dtype == torch.float64


def test_side_device_arg_and_tensor_placement():
    side = Side(name="target", device="cpu", golden=False)
    assert side.device_arg(DeviceArg("npu:3")) == torch.device("cpu")
    x = rand(4)
    copy = side.tensor(x)
    assert torch.equal(copy, x) and copy.data_ptr() != x.data_ptr()
    g = GOLDEN.tensor(x)
    assert g.dtype == torch.float64 and g.device.type == "cpu"


def test_resolve_device_cpu():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device(" CPU ") == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto picks CUDA where it exists")
def test_resolve_device_auto_without_accelerator():
    assert resolve_device("auto") == "cpu"
    assert resolve_device("AUTO") == "cpu"


@pytest.mark.parametrize("spec", ["cuda:7", "cuda:99"])
def test_resolve_device_missing_cuda(spec):
    if torch.cuda.is_available() and torch.cuda.device_count() > int(spec.split(":")[1]):
        pytest.skip("this machine has that many GPUs")
    with pytest.raises(DeviceError) as info:
        resolve_device(spec)
    assert spec in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("spec", ["foo", "cuda:x", "gpu", "", "tpu:0", "cuda:-1"])
def test_resolve_device_unknown(spec):
    with pytest.raises(DeviceError):
        resolve_device(spec)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a bare index means an accelerator index")
def test_resolve_device_index_without_accelerator():
    with pytest.raises(DeviceError):
        resolve_device("0")


def test_device_error_is_a_value_error():
    assert issubclass(DeviceError, ValueError)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_target_side():
    assert resolve_device("auto") == "cuda:0"
    assert resolve_device("cuda") == "cuda:0"
    side = target_side("cuda:0")
    x = rand(4, 4)
    result = run("Torch.matmul", (x, x), side=side)
    assert result.error is None
    assert result.outputs[0].device.type == "cuda"
    result = run("Tensor.to", (x, DeviceArg("npu:0")), side=side)
    assert result.outputs[0].device.type == "cuda"


# --------------------------------------------------------------------------------------------- in-place APIs


def test_inplace_does_not_leak_between_sides():
    x, y = rand(4, seed=5), rand(4, seed=6)
    x_before = x.clone()
    target, golden = both("Tensor.add_", (x, y))
    assert torch.equal(x, x_before)  # the loaded input is untouched
    assert torch.equal(target.outputs[0], x_before + y)
    assert torch.equal(golden.outputs[0], x_before.double() + y.double())  # not x + 2y
    # run the golden first this time: same result
    golden2 = run("Tensor.add_", (x, y), side=GOLDEN)
    assert torch.equal(golden2.outputs[0], golden.outputs[0])
    assert torch.equal(x, x_before)


def test_setitem_returns_the_mutated_tensor():
    x = torch.zeros(4)
    target, golden = both("Tensor.__setitem__", (x, slice(1, 3), 5.0))
    assert torch.equal(target.outputs[0], torch.tensor([0.0, 5.0, 5.0, 0.0]))
    assert golden.outputs[0].dtype == torch.float64
    assert torch.equal(x, torch.zeros(4))


def test_inplace_with_grad_runs_backward():
    x, y = rand(3, seed=7), rand(3, seed=8)
    g = rand(3, seed=9)
    x_before = x.clone()
    target, golden = both("Tensor.mul_", (x, y), grad_outputs=(g,), grad=(x,))
    assert set(target.grads) == set(golden.grads) == {0}
    assert torch.allclose(target.grads[0], g * y)
    assert torch.allclose(golden.grads[0], g.double() * y.double(), rtol=0, atol=1e-15)
    assert torch.equal(x, x_before)


# --------------------------------------------------------------------------------------------- backward
# grads maps the index of each tensor argument that required grad (positional tensors counted depth first,
# whether or not they need a gradient, then keyword tensors) to its gradient.


def test_backward_mul_hand_computed():
    x, y = rand(2, 3, seed=10), rand(2, 3, seed=11)
    g = rand(2, 3, seed=12)
    target, golden = both("Tensor.__mul__", (x, y), grad_outputs=(g,), grad=(x, y))
    assert sorted(target.grads) == sorted(golden.grads) == [0, 1]
    assert torch.allclose(target.grads[0], g * y) and torch.allclose(target.grads[1], g * x)
    assert golden.grads[0].dtype == golden.grads[1].dtype == torch.float64
    assert torch.equal(golden.grads[0], g.double() * y.double())
    assert torch.equal(golden.grads[1], g.double() * x.double())
    assert not target.outputs[0].requires_grad


def test_backward_only_inputs_that_required_grad():
    x, y = rand(4, seed=13), rand(4, seed=14)
    g = torch.ones(4)
    target = run("Tensor.__mul__", (x, y), grad_outputs=(g,), grad=(y,))
    assert target.error is None
    assert list(target.grads) == [1]  # y is the second tensor argument
    assert torch.equal(target.grads[1], x)


def test_backward_indices_count_tensors_inside_lists():
    a, b, c = rand(2, seed=30), rand(2, seed=31), rand(2, seed=32)
    g = rand(6, seed=33)
    target, golden = both("Torch.cat", ((a, b, c),), grad_outputs=(g,), grad=(a, c))
    assert sorted(golden.grads) == [0, 2]
    assert torch.equal(golden.grads[0], g[:2].double())
    assert torch.equal(golden.grads[2], g[4:].double())


def test_backward_includes_keyword_inputs_after_positional():
    x, y = rand(4, seed=15), rand(4, seed=16)
    g = rand(4, seed=17)
    target, golden = both("Torch.mul", (x,), {"other": y}, grad_outputs=(g,), grad=(x, y))
    assert sorted(golden.grads) == [0, 1]
    assert torch.equal(golden.grads[0], g.double() * y.double())  # positional first
    assert torch.equal(golden.grads[1], g.double() * x.double())  # then keyword


def test_backward_feeds_every_output():
    x = rand(6, seed=18)
    g1, g2, g3 = rand(2, seed=19), rand(2, seed=20), rand(2, seed=21)
    target, golden = both("Torch.split", (x, 2), grad_outputs=(g1, g2, g3), grad=(x,))
    assert len(target.outputs) == 3
    assert torch.equal(target.grads[0], torch.cat([g1, g2, g3]))
    assert torch.equal(golden.grads[0], torch.cat([g1, g2, g3]).double())


def test_backward_output_without_gradient_gets_none():
    x = rand(4, seed=22)
    g1 = rand(2, seed=23)
    target = run("Torch.split", (x, 2), grad_outputs=(g1, None), grad=(x,))
    assert target.error is None
    assert torch.equal(target.grads[0], torch.cat([g1, torch.zeros(2)]))


def test_backward_skips_integer_outputs():
    x = torch.tensor([3.0, 1.0, 2.0])
    target, golden = both("Torch.topk", (x, 2), grad_outputs=(torch.tensor([1.0, 10.0]), None), grad=(x,))
    # indices [0, 2] are graded as the values they select (ties may pick either index)
    assert torch.equal(target.outputs[1], torch.tensor([3.0, 2.0]))
    assert torch.equal(golden.grads[0], torch.tensor([1.0, 0.0, 10.0], dtype=torch.float64))


def test_backward_unused_input_gets_none():
    x, y = rand(3, seed=34), rand(3, seed=35)
    g = rand(3, seed=36)
    target, golden = both("Tensor.type_as", (x, y), grad_outputs=(g,), grad=(x, y))
    assert torch.equal(golden.grads[0], g.double())
    assert golden.grads[1] is None and target.grads[1] is None


def test_backward_grad_outputs_raised_on_golden():
    x = rand(4, dtype=torch.bfloat16, seed=24)
    g = rand(4, dtype=torch.bfloat16, seed=25)
    target, golden = both("Torch.exp", (x,), grad_outputs=(g,), grad=(x,))
    assert target.grads[0].dtype == torch.bfloat16
    assert golden.grads[0].dtype == torch.float64
    assert torch.allclose(golden.grads[0], g.double() * torch.exp(x.double()), rtol=1e-12)


def test_backward_recorded_gradient_of_wrong_shape_is_an_error():
    x = rand(4, seed=37)
    result = run("Torch.exp", (x,), grad_outputs=(rand(5, seed=38),), grad=(x,))
    assert result.error is not None and "shape" in result.error and "\n" not in result.error


def test_no_backward_record_no_grads():
    x = rand(3, seed=26)
    target = run("Torch.exp", (x,), grad=(x,))
    assert target.error is None and target.grads is None
    assert not target.outputs[0].requires_grad


def test_int_input_marked_requires_grad_is_not_a_leaf():
    x = torch.arange(3)
    y = rand(3, seed=27)
    target = run("Torch.mul", (x, y), grad_outputs=(torch.ones(3),), grad=(x, y))
    assert target.error is None
    assert list(target.grads) == [1] and torch.equal(target.grads[1], x.float())


# --------------------------------------------------------------------------------------------- failures


def test_api_failure_becomes_one_line_error():
    result = run("Tensor.__mul__", (rand(2, 3), rand(4, 5)))
    assert result.outputs == [] and result.grads is None
    assert result.error.startswith("RuntimeError") and "\n" not in result.error


def test_one_line():
    assert one_line(ValueError("first\nsecond")) == "ValueError: first"
    assert one_line(KeyError()) == "KeyError"
    assert len(one_line(RuntimeError("x" * 1000))) < 400


# --------------------------------------------------------------------------------------------- flatten


@pytest.mark.parametrize(
    "value, leaves",
    [
        (1, [1]),
        (None, [None]),
        ((1, (2, (3, 4)), [5]), [1, 2, 3, 4, 5]),
        ((), []),
        (torch.Size([2, 3]), [torch.Size([2, 3])]),
        ((torch.Size([2]), (7, torch.Size([]))), [torch.Size([2]), 7, torch.Size([])]),
        ({"a": 1, "b": (2, 3)}, [1, 2, 3]),
        ((None, (None,)), [None, None]),
    ],
)
def test_flatten(value, leaves):
    assert flatten(value) == leaves


def test_flatten_tensors_keep_identity_and_order():
    a, b, c = torch.zeros(1), torch.ones(2), torch.zeros(3)
    out = flatten((a, [b, (c,)]))
    assert len(out) == 3 and out[0] is a and out[1] is b and out[2] is c


def test_the_hooked_node_frees_the_sides_inputs_with_the_run(monkeypatch):
    """--target recorded keeps the gradients at msprobe's hooked node; the side's float64 copies of the inputs
    die with the run, without the cyclic collector (a hook referring back to its node through the probe held
    lm_head's golden, 0.4 GB, into the next cases of a LLaMA step)."""
    copies = []
    made = Side.tensor

    def watched(self, t):
        copy = made(self, t)
        copies.append(weakref.ref(copy))
        return copy

    monkeypatch.setattr(Side, "tensor", watched)
    x, w = rand(2, 3, 4, seed=40), rand(5, 4, seed=41)
    call = Call(lookup("Functional.linear"), specs((x, w), {id(x), id(w)}), {}, (x, w), {}, (rand(2, 3, 5, seed=42),))
    with without_collector():
        golden = run_side(call, GOLDEN, hook_node=True)
        inputs = copies[:2]  # built first, in argument order
        assert golden.error is None and golden.node is not None and golden.node.name, golden
        assert any(g is not None and g.dtype == torch.float64 for g in golden.node.grads), golden.node
        assert [ref() for ref in inputs] == [None, None]


# --------------------------------------------------------------------------------------------- real dump


def test_real_mlp_dump_forward_and_backward_run_on_both_sides():
    dump = load_dump(real_dump_json("mlp_fp32_tensor"))
    for case in dump.cases:
        entry = lookup(case.api)
        assert entry is not None, case.api
        args, kwargs = load_tree(case.args, dump.data_dir), load_tree(case.kwargs, dump.data_dir)
        grad_outputs = load_tree(case.grad_outputs, dump.data_dir) if case.has_backward else None
        call = Call(entry, case.args, case.kwargs, args, kwargs, grad_outputs)
        target, golden = run_side(call, TARGET), run_side(call, GOLDEN)
        assert target.error is None and golden.error is None, (case.name, target.error, golden.error)
        recorded = load_tree(case.outputs, dump.data_dir)
        assert torch.allclose(target.outputs[0], recorded[0], rtol=1e-4, atol=1e-5), case.name
        assert compare(target.outputs[0], golden.outputs[0]).status != ERROR, case.name
        if case.has_backward:
            tensors = [s for s in iter_specs(case.args) if isinstance(s, TensorSpec)]
            needing = [i for i, s in enumerate(tensors) if s.requires_grad]
            assert sorted(target.grads) == sorted(golden.grads) == needing, case.name
            for i in needing:
                t, g = target.grads[i], golden.grads[i]
                assert t is not None and g is not None and g.dtype == torch.float64
                assert t.shape == tensors[i].shape
                assert compare(t, g).status != ERROR, case.name
