"""precheck.dump.records: every argument encoding of an msprobe L1 dump, record pairing, and whole-file errors."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import REAL_DUMPS, forward_rec, real_dump_json, tensor_rec

from precheck.dump import jsonstream
from precheck.dump.records import (
    Case,
    DeviceArg,
    DumpError,
    RecordError,
    Stats,
    TensorSpec,
    decode_value,
    load_dump,
    pair_records,
)


def one_case(write_dump, *args, kwargs=None, output=None, api="Torch.add"):
    """Decode a dump holding one forward record and return its case."""
    dump = load_dump(write_dump({f"{api}.0.forward": forward_rec(*args, kwargs=kwargs, output=output)}))
    assert len(dump.cases) == 1
    return dump.cases[0]


# --------------------------------------------------------------------------------------------- tensor encodings


@pytest.mark.parametrize("type_", ["torch.Tensor", "torch.nn.parameter.Parameter"])
def test_torch_tensor_decodes_to_spec(type_):
    raw = tensor_rec(
        "torch.bfloat16",
        (4, 32),
        type_=type_,
        data_name="Functional.linear.0.forward.input.0.pt",
        requires_grad=True,
        Max=3.5,
        Min=-2.25,
        Mean=0.125,
        Norm=10.0,
    )
    spec = decode_value(raw, "input_args[0]")
    assert spec == TensorSpec(
        dtype=torch.bfloat16,
        shape=(4, 32),
        stats=Stats(3.5, -2.25, 0.125, 10.0),
        requires_grad=True,
        data_name="Functional.linear.0.forward.input.0.pt",
    )
    assert spec.numel == 128
    assert isinstance(spec.dtype, torch.dtype)


def test_requires_grad_false_and_missing_data_name():
    spec = decode_value(tensor_rec("torch.float16", (3,)), "x")
    assert spec.requires_grad is False
    assert spec.data_name is None
    assert spec.dtype is torch.float16


def test_scalar_tensor_and_empty_tensor_shapes():
    assert decode_value(tensor_rec(shape=[]), "x").shape == ()
    assert decode_value(tensor_rec(shape=[]), "x").numel == 1
    empty = decode_value(tensor_rec(shape=[0, 5], Max=None, Min=None, Mean=None, Norm=None), "x")
    assert empty.shape == (0, 5)
    assert empty.numel == 0
    assert empty.stats == Stats(None, None, None, None)


def test_stats_as_strings():
    spec = decode_value(tensor_rec(Max="inf", Min="-inf", Mean="nan", Norm=None), "x")
    assert spec.stats.max == math.inf
    assert spec.stats.min == -math.inf
    assert math.isnan(spec.stats.mean)
    assert spec.stats.norm is None


def test_stats_as_json_infinity_and_nan(write_dump):
    # Python's json writes the non-standard Infinity/-Infinity/NaN tokens, as msprobe does.
    rec = tensor_rec(Max=float("inf"), Min=float("-inf"), Mean=float("nan"), Norm=7)
    path = write_dump({"Torch.add.0.forward": forward_rec(rec)})
    assert "Infinity" in path.read_text() and "NaN" in path.read_text()
    case = load_dump(path).cases[0]
    assert case.problem is None
    stats = case.args[0].stats
    assert stats.max == math.inf and stats.min == -math.inf and math.isnan(stats.mean)
    assert stats.norm == 7.0 and isinstance(stats.norm, float)


@pytest.mark.parametrize(
    "name, dtype",
    [
        ("Float32", torch.float32),
        ("BFloat16", torch.bfloat16),
        ("Float16", torch.float16),
        ("Int64", torch.int64),
        ("Bool", torch.bool),
    ],
)
def test_mindspore_tensor_dtypes(name, dtype):
    spec = decode_value(
        tensor_rec(name, (2, 2), type_="mindspore.Tensor", data_name="Functional.relu.0.forward.input.0.npy"),
        "input_args[0]",
    )
    assert isinstance(spec, TensorSpec)
    assert spec.dtype is dtype
    assert spec.data_name.endswith(".npy")


@pytest.mark.parametrize(
    "name",
    [
        "torch.float32",
        "torch.float16",
        "torch.bfloat16",
        "torch.float64",
        "torch.int8",
        "torch.int32",
        "torch.int64",
        "torch.uint8",
        "torch.bool",
        "torch.complex64",
    ],
)
def test_every_common_torch_dtype_name(name):
    assert str(decode_value(tensor_rec(name), "x").dtype) == name


# --------------------------------------------------------------------------------------------- other encodings


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"type": "int", "value": 3}, 3),
        ({"type": "int", "value": -7}, -7),
        ({"type": "float", "value": 0.5}, 0.5),
        ({"type": "float", "value": 2}, 2.0),
        ({"type": "bool", "value": True}, True),
        ({"type": "bool", "value": False}, False),
        ({"type": "str", "value": "mean"}, "mean"),
        ({"type": "str", "value": ""}, ""),
    ],
)
def test_scalars(raw, expected):
    value = decode_value(raw, "x")
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    "text, check",
    [
        ("inf", lambda v: v == math.inf),
        ("-inf", lambda v: v == -math.inf),
        ("nan", math.isnan),
    ],
)
def test_float_scalar_nonfinite_strings(text, check):
    value = decode_value({"type": "float", "value": text}, "x")
    assert isinstance(value, float) and check(value)


@pytest.mark.parametrize("raw", [None, {"type": "NoneType"}, {"type": "NoneType", "value": None}])
def test_none_encodings(raw):
    assert decode_value(raw, "x") is None


def test_none_inside_args_keeps_position(write_dump):
    case = one_case(write_dump, tensor_rec(), None, {"type": "NoneType"}, {"type": "int", "value": 1})
    assert case.problem is None
    assert case.args[1:] == (None, None, 1)


@pytest.mark.parametrize(
    "value, expected",
    [
        ([1, 5, 2], slice(1, 5, 2)),
        ([None, 3, None], slice(None, 3, None)),
        ([None, None, None], slice(None)),
        ([-3, None, -1], slice(-3, None, -1)),
    ],
)
def test_slice(value, expected):
    assert decode_value({"type": "slice", "value": value}, "x") == expected


def test_slice_and_ellipsis_in_getitem_index(write_dump):
    index = [{"type": "ellipsis", "value": "..."}, {"type": "slice", "value": [0, 2, None]}]
    case = one_case(write_dump, tensor_rec(), index, api="Tensor.__getitem__")
    assert case.problem is None
    assert case.args[1] == (Ellipsis, slice(0, 2, None))


def test_slice_inside_kwargs(write_dump):
    case = one_case(write_dump, tensor_rec(), kwargs={"index": {"type": "slice", "value": [1, None, 2]}})
    assert case.problem is None
    assert case.kwargs == {"index": slice(1, None, 2)}


def test_torch_size():
    value = decode_value({"type": "torch.Size", "value": [4, 0, 8]}, "x")
    assert isinstance(value, torch.Size)
    assert value == torch.Size([4, 0, 8])
    assert decode_value({"type": "torch.Size", "value": []}, "x") == torch.Size([])


def test_torch_dtype_positional_and_keyword(write_dump):
    case = one_case(
        write_dump,
        tensor_rec(),
        {"type": "torch.dtype", "value": "torch.float16"},
        kwargs={"dtype": {"type": "torch.dtype", "value": "torch.bfloat16"}},
        api="Tensor.to",
    )
    assert case.problem is None
    assert case.args[1] is torch.float16 and isinstance(case.args[1], torch.dtype)
    assert case.kwargs["dtype"] is torch.bfloat16


def test_torch_device(write_dump):
    case = one_case(
        write_dump,
        tensor_rec(),
        {"type": "torch.device", "value": "npu:3"},
        kwargs={"device": {"type": "torch.device", "value": "cuda:0"}},
        api="Tensor.to",
    )
    assert case.problem is None
    assert case.args[1] == DeviceArg("npu:3")
    assert case.kwargs["device"] == DeviceArg("cuda:0")


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"type": "float32", "value": 0.25}, 0.25),
        ({"type": "numpy.float32", "value": 1.5}, 1.5),
        ({"type": "numpy.float64", "value": "inf"}, math.inf),
        ({"type": "numpy.int64", "value": 12}, 12),
        ({"type": "int32", "value": -2}, -2),
        ({"type": "numpy.bool_", "value": True}, True),
    ],
)
def test_numpy_scalars(raw, expected):
    value = decode_value(raw, "x")
    assert value == expected
    assert type(value) is type(expected)


def test_plain_json_scalars_pass_through():
    assert decode_value(3, "x") == 3
    assert decode_value("sum", "x") == "sum"
    assert decode_value(True, "x") is True


def test_nested_lists_become_tuples_and_mix_tensors_and_scalars(write_dump):
    nested = [
        tensor_rec(shape=(2,)),
        [{"type": "int", "value": 1}, [tensor_rec("torch.int64", (3,)), None]],
        {"type": "float", "value": 0.5},
    ]
    case = one_case(write_dump, nested, api="Torch.cat")
    assert case.problem is None
    (arg,) = case.args
    assert isinstance(arg, tuple) and isinstance(arg[1], tuple) and isinstance(arg[1][1], tuple)
    assert isinstance(arg[0], TensorSpec) and arg[0].shape == (2,)
    assert arg[1][0] == 1
    assert isinstance(arg[1][1][0], TensorSpec) and arg[1][1][0].dtype is torch.int64
    assert arg[1][1][1] is None
    assert arg[2] == 0.5


def test_outputs_and_backward_decoded(write_dump):
    path = write_dump(
        {
            "Torch.add.0.forward": forward_rec(
                tensor_rec(requires_grad=True), {"type": "int", "value": 2}, output=[tensor_rec(data_name="o.pt")]
            ),
            "Torch.add.0.backward": {"input": [tensor_rec(data_name="gi.pt")], "output": [tensor_rec(), None]},
        }
    )
    case = load_dump(path).cases[0]
    assert case.problem is None
    assert case.has_backward
    assert case.outputs == (decode_value(tensor_rec(data_name="o.pt"), "o"),)
    assert case.grad_outputs[0].data_name == "gi.pt"
    assert len(case.grad_inputs) == 2 and case.grad_inputs[1] is None


def test_single_output_not_in_a_list_still_a_tuple(write_dump):
    case = one_case(write_dump, tensor_rec(), output=tensor_rec(shape=(5,)))
    assert isinstance(case.outputs, tuple) and case.outputs[0].shape == (5,)


# --------------------------------------------------------------------------------------------- malformed pieces


@pytest.mark.parametrize(
    "bad, where, words",
    [
        ({"type": "my.Custom", "value": 1}, "input_args[1]", ["unsupported", "my.Custom"]),
        (tensor_rec(shape=[2, -1]), "input_args[1]", ["shape"]),
        (tensor_rec(shape="2x3"), "input_args[1]", ["shape"]),
        (tensor_rec(shape=[2, 3.0]), "input_args[1]", ["shape"]),
        (tensor_rec(shape=[True, 3]), "input_args[1]", ["shape"]),
        (tensor_rec("torch.float33"), "input_args[1]", ["dtype", "torch.float33"]),
        (tensor_rec("float32"), "input_args[1]", ["dtype"]),
        (tensor_rec(data_name=None) | {"data_name": 5}, "input_args[1]", ["data_name"]),
        ({"type": "int", "value": True}, "input_args[1]", ["int"]),
        ({"type": "int", "value": 1.5}, "input_args[1]", ["int"]),
        ({"type": "bool", "value": 1}, "input_args[1]", ["bool"]),
        ({"type": "float", "value": "abc"}, "input_args[1]", ["float"]),
        ({"type": "float", "value": True}, "input_args[1]", ["float"]),
        ({"type": "str", "value": 3}, "input_args[1]", ["str"]),
        ({"type": "torch.dtype", "value": "torch.nope"}, "input_args[1]", ["dtype", "torch.nope"]),
        ({"type": "slice", "value": [1, 2]}, "input_args[1]", ["slice"]),
        ({"type": "slice", "value": [0.5, 2, None]}, "input_args[1]", ["slice"]),
        ({"type": "torch.Size", "value": [2, "3"]}, "input_args[1]", ["torch.Size"]),
        ({"value": 3}, "input_args[1]", ["type"]),
        ({"type": 7}, "input_args[1]", ["type"]),
    ],
)
def test_malformed_argument_gives_problem_naming_where(write_dump, bad, where, words):
    path = write_dump(
        {
            "Torch.mul.0.forward": forward_rec(tensor_rec(), bad),
            "Torch.sub.0.forward": forward_rec(tensor_rec(), {"type": "int", "value": 1}),
        }
    )
    bad_case, good_case = load_dump(path).cases
    assert bad_case.name == "Torch.mul.0" and bad_case.api == "Torch.mul"
    assert bad_case.problem is not None
    assert where in bad_case.problem
    for word in words:
        assert word in bad_case.problem
    assert "\n" not in bad_case.problem
    # the other case of the same dump still decodes
    assert good_case.problem is None
    assert good_case.args[1] == 1


def test_malformed_piece_in_nested_list_names_the_nested_position(write_dump):
    case = one_case(write_dump, [tensor_rec(), [{"type": "int", "value": 1}, {"type": "bogus"}]])
    assert case.problem is not None
    assert "input_args[0][1][1]" in case.problem


def test_malformed_kwarg_names_the_keyword(write_dump):
    case = one_case(write_dump, tensor_rec(), kwargs={"alpha": {"type": "float", "value": "x"}})
    assert case.problem is not None and "alpha" in case.problem


@pytest.mark.parametrize(
    "field, where", [("output", "output"), ("bwd_in", "backward.input"), ("bwd_out", "backward.output")]
)
def test_malformed_output_or_backward_names_the_record_part(write_dump, field, where):
    bad = {"type": "bogus"}
    fwd = forward_rec(tensor_rec(), output=[bad] if field == "output" else None)
    bwd = {
        "input": [bad if field == "bwd_in" else tensor_rec()],
        "output": [bad if field == "bwd_out" else tensor_rec()],
    }
    case = load_dump(write_dump({"Torch.neg.0.forward": fwd, "Torch.neg.0.backward": bwd})).cases[0]
    assert case.problem is not None and where in case.problem


def test_record_that_is_not_a_map(write_dump):
    path = write_dump({"Torch.neg.0.forward": [1, 2], "Torch.abs.0.forward": forward_rec(tensor_rec())})
    bad, good = load_dump(path).cases
    assert bad.problem is not None and bad.name == "Torch.neg.0"
    assert good.problem is None


def test_decode_value_raises_record_error():
    with pytest.raises(RecordError, match=r"here\[0\]"):
        decode_value([{"type": "mystery"}], "here")


# --------------------------------------------------------------------------------------------- pairing


def test_forward_backward_paired_by_stem_in_forward_order():
    data = {
        "Functional.linear.0.forward": forward_rec(tensor_rec()),
        "Functional.gelu.0.forward": forward_rec(tensor_rec()),
        "Tensor.sum.0.forward": forward_rec(tensor_rec()),
        "Tensor.sum.0.backward": {"input": [tensor_rec(shape=[])], "output": [tensor_rec()]},
        # backward records come in reverse order, after all forwards
        "Functional.linear.0.backward": {"input": [tensor_rec(shape=(7,))], "output": [tensor_rec()]},
    }
    cases = pair_records(data)
    assert [c.name for c in cases] == ["Functional.linear.0", "Functional.gelu.0", "Tensor.sum.0"]
    assert [c.order for c in cases] == [0, 1, 2]
    assert [c.has_backward for c in cases] == [True, False, True]
    assert cases[0].grad_outputs[0].shape == (7,)  # linear got linear's backward, not sum's
    assert cases[2].grad_outputs[0].shape == ()
    assert cases[1].grad_outputs is None and cases[1].grad_inputs is None


def test_same_api_different_call_numbers_are_separate_cases():
    data = {
        "Tensor.__add__.0.forward": forward_rec(tensor_rec(shape=(1,))),
        "Tensor.__add__.1.forward": forward_rec(tensor_rec(shape=(2,))),
        "Tensor.__add__.1.backward": {"input": [tensor_rec()], "output": [tensor_rec()]},
    }
    cases = pair_records(data)
    assert [(c.name, c.api, c.has_backward) for c in cases] == [
        ("Tensor.__add__.0", "Tensor.__add__", False),
        ("Tensor.__add__.1", "Tensor.__add__", True),
    ]
    assert cases[1].args[0].shape == (2,)


def test_module_records_are_counted_not_replayed():
    data = {
        "Module.model.Linear.forward.0": {"input_args": [], "output": []},
        "Module.fc1.Linear.backward.0": {"input": [], "output": []},
        "Torch.relu.0.forward": forward_rec(tensor_rec()),
        "Cell.net.Dense.forward.0": {"input_args": [], "output": []},
    }
    cases = pair_records(data)
    assert [c.name for c in cases] == ["Torch.relu.0"]
    assert cases[0].problem is None
    assert cases.module_records == 3  # Module and Cell (MindSpore) records, forward and backward


@pytest.mark.parametrize(
    "key, api, name",
    [
        ("Torch.linalg.inv.0.forward", "Torch.linalg.inv", "Torch.linalg.inv.0"),
        ("Aten.add.Tensor.0.forward", "Aten.add.Tensor", "Aten.add.Tensor.0"),
        (
            "Functional.scaled_dot_product_attention.12.forward",
            "Functional.scaled_dot_product_attention",
            "Functional.scaled_dot_product_attention.12",
        ),
        ("Tensor.__radd__.3.forward", "Tensor.__radd__", "Tensor.__radd__.3"),
        ("NPU.npu_rms_norm.0.forward", "NPU.npu_rms_norm", "NPU.npu_rms_norm.0"),
        ("Functional.conv2d.5.forward", "Functional.conv2d", "Functional.conv2d.5"),
    ],
)
def test_names_with_inner_dots(key, api, name):
    stem = key.rsplit(".", 1)[0]
    cases = pair_records(
        {key: forward_rec(tensor_rec()), f"{stem}.backward": {"input": [tensor_rec()], "output": [tensor_rec()]}}
    )
    assert len(cases) == 1
    assert (cases[0].api, cases[0].name, cases[0].has_backward, cases[0].problem) == (api, name, True, None)


@pytest.mark.parametrize(
    "bad_key", ["Torch.add.forward", "Torch.add.0.sideways", "add.0.forward", "Torch.add.x.forward", "garbage"]
)
def test_malformed_key_becomes_problem_case(bad_key):
    data = {
        "Torch.relu.0.forward": forward_rec(tensor_rec()),
        bad_key: forward_rec(tensor_rec()),
        "Torch.abs.0.forward": forward_rec(tensor_rec()),
    }
    cases = pair_records(data)
    assert len(cases) == 3
    bad = [c for c in cases if c.problem is not None]
    assert len(bad) == 1 and bad[0].name == bad_key
    assert "malformed" in bad[0].problem
    good = [c.name for c in cases if c.problem is None]
    assert good == ["Torch.relu.0", "Torch.abs.0"]
    assert sorted(c.order for c in cases) == [0, 1, 2]


def test_empty_data_gives_no_cases(write_dump):
    assert load_dump(write_dump({})).cases == []


def test_case_is_plain_data_that_pickles(write_dump):
    import pickle

    case = one_case(
        write_dump,
        tensor_rec(data_name="a.pt"),
        {"type": "torch.dtype", "value": "torch.float16"},
        {"type": "slice", "value": [0, 1, None]},
        {"type": "torch.device", "value": "cuda:1"},
    )
    again = pickle.loads(pickle.dumps(case))
    assert again == case and isinstance(again, Case)


# --------------------------------------------------------------------------------------------- whole-file errors


def _dump_error(path):
    with pytest.raises(DumpError) as info:
        load_dump(path)
    message = str(info.value)
    assert "\n" not in message, message
    assert str(path) in message, message
    return message


def test_missing_file(tmp_path):
    assert "no such file" in _dump_error(tmp_path / "nope.json")


def test_missing_directory_dump(tmp_path):
    _dump_error(tmp_path)  # a directory without dump.json


def test_invalid_json(write_dump):
    assert "JSON" in _dump_error(write_dump(None, raw='{"task": "tensor", "data": {'))


def test_binary_garbage(tmp_path):
    path = tmp_path / "dump.json"
    path.write_bytes(b"\xff\xfe\x00\x81garbage")
    _dump_error(path)


def test_json_list(write_dump):
    _dump_error(write_dump(None, raw=json.dumps([{"task": "tensor", "data": {}}])))


@pytest.mark.parametrize("doc", [{"task": "tensor"}, {"task": "tensor", "data": []}, {"task": "tensor", "data": None}])
def test_missing_or_bad_data(write_dump, doc):
    assert "data" in _dump_error(write_dump(None, raw=json.dumps(doc)))


@pytest.mark.parametrize("task", [None, "overflow_check", "", 1])
def test_bad_task(write_dump, task):
    doc = {"data": {}} if task is None else {"task": task, "data": {}}
    assert "task" in _dump_error(write_dump(None, raw=json.dumps(doc)))


@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_good_tasks_and_header(write_dump, task):
    dump = load_dump(write_dump({}, task=task, level="L1", framework="mindspore"))
    assert (dump.task, dump.level, dump.framework) == (task, "L1", "mindspore")


def test_directory_resolves_to_its_dump_json(write_dump, tmp_path):
    path = write_dump({"Torch.relu.0.forward": forward_rec(tensor_rec())})
    dump = load_dump(tmp_path)
    assert dump.path == path
    assert dump.data_dir == tmp_path / "dump_tensor_data"
    assert [c.name for c in dump.cases] == ["Torch.relu.0"]


def test_data_dir_is_beside_dump_json_whatever_dump_data_dir_says(tmp_path):
    path = tmp_path / "dump.json"
    path.write_text(
        json.dumps(
            {
                "task": "tensor",
                "level": "L1",
                "framework": "pytorch",
                "dump_data_dir": "/elsewhere/dump_tensor_data",
                "data": {},
            }
        )
    )
    assert load_dump(str(path)).data_dir == tmp_path / "dump_tensor_data"


# --------------------------------------------------------------------------------------------- real dumps


@pytest.mark.parametrize("name", sorted(REAL_DUMPS))
def test_real_dumps(name):
    path = real_dump_json(name)
    with open(path) as f:
        raw = json.load(f)["data"]
    forwards = [k[: -len(".forward")] for k in raw if k.endswith(".forward")]
    dump = load_dump(path.parent)
    assert len(dump.cases) == REAL_DUMPS[name] == len(forwards)
    assert [c.name for c in dump.cases] == forwards
    assert [c.order for c in dump.cases] == list(range(len(forwards)))
    for case in dump.cases:
        assert case.problem is None, (case.name, case.problem)
        assert case.has_backward == (f"{case.name}.backward" in raw), case.name
        assert case.name.startswith(case.api + ".")
    assert dump.task == ("statistics" if "statistics" in name else "tensor")
    assert dump.level == "L1" and dump.framework == "pytorch"


def test_real_dump_details():
    dump = load_dump(real_dump_json("mlp_fp32_tensor"))
    linear = dump.cases[0]
    assert linear.api == "Functional.linear"
    x, w, b = linear.args
    assert (x.shape, w.shape, b.shape) == ((4, 16), (32, 16), (32,))
    assert (x.requires_grad, w.requires_grad, b.requires_grad) == (False, True, True)
    assert all(s.dtype is torch.float32 for s in linear.args)
    assert x.data_name == "Functional.linear.0.forward.input.0.pt"
    assert linear.outputs[0].shape == (4, 32)


def test_real_statistics_dump_has_no_data_names():
    dump = load_dump(real_dump_json("gpt2_bf16_statistics"))
    from precheck.inputs.builder import iter_specs

    specs = [s for c in dump.cases for s in iter_specs((c.args, c.kwargs))]
    assert specs and all(s.data_name is None for s in specs)
    assert any(s.dtype is torch.bfloat16 for s in specs)


def test_deeply_nested_arguments_become_a_problem_case(write_dump):
    arg = {"type": "int", "value": 1}
    for _ in range(600):
        arg = [arg]
    path = write_dump({"Torch.deep.0.forward": forward_rec(arg), "Torch.abs.0.forward": forward_rec(tensor_rec())})
    deep, good = load_dump(path).cases
    assert deep.problem is not None and "nested too deeply" in deep.problem
    assert good.problem is None


@pytest.mark.parametrize("depth", [1200, 100_000, jsonstream.MAX_TRACKED_DEPTH + 5])
def test_a_record_nested_beyond_the_parser_is_its_own_skip_row(write_dump, depth):
    # The index delimits the record without decoding it: only that record is lost, with the reason.
    deep = "[" * depth + "]" * depth
    raw = (
        '{"task": "tensor", "data": {"Torch.a.0.forward": {"input_args": ' + deep + "}, "
        '"Torch.abs.0.forward": ' + json.dumps(forward_rec(tensor_rec())) + "}}"
    )
    bad, good = load_dump(write_dump(None, raw=raw)).cases
    assert bad.name == "Torch.a.0" and bad.problem == "bad record: record nested too deeply for the JSON parser"
    assert good.problem is None and good.api == "Torch.abs"


def test_mismatched_brackets_in_a_deep_record_are_a_dump_error(write_dump):
    raw = '{"task": "tensor", "data": {"Torch.a.0.forward": ' + "[" * 5000 + "}" * 5000 + "}}"
    assert "not valid JSON: unexpected '}'" in _dump_error(write_dump(None, raw=raw))


def test_a_huge_integer_is_its_records_skip_row_or_one_line_in_the_header(write_dump):
    raw = (
        '{"task": "tensor", "data": {"Torch.a.0.forward": {"input_args": [{"type": "int", "value": '
        + "9" * 5000
        + '}]}, "Torch.abs.0.forward": '
        + json.dumps(forward_rec(tensor_rec()))
        + "}}"
    )
    bad, good = load_dump(write_dump(None, raw=raw)).cases
    assert bad.problem == "bad record: record holds an integer of 5000 digits (more than the 4300 digits Python reads)"
    assert good.problem is None
    message = _dump_error(write_dump(None, raw='{"level": ' + "9" * 5000 + ', "task": "tensor", "data": {}}'))
    assert "not valid JSON: an integer of 5000 digits" in message
