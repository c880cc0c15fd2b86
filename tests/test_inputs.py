"""precheck.inputs.builder: loading the tensor files of a dump safely and checking them against their records."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from helpers import real_dump_json

from precheck.dump.records import Stats, TensorSpec, load_dump
from precheck.inputs.builder import STATISTICS_ONLY, InputError, iter_specs, load_tensor, load_tree, map_specs

STATS = Stats(1.0, -1.0, 0.0, 1.0)


def spec(name, dtype=torch.float32, shape=(2, 3), requires_grad=False):
    return TensorSpec(dtype=dtype, shape=tuple(shape), stats=STATS, requires_grad=requires_grad, data_name=name)


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "dump_tensor_data"
    d.mkdir()
    return d


def input_error(s, data_dir):
    with pytest.raises(InputError) as info:
        load_tensor(s, data_dir)
    message = str(info.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------------------------- good files


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.complex64]
)
def test_pt_loaded(data_dir, dtype):
    saved = (torch.randn(2, 3) * 10).to(dtype)
    torch.save(saved, data_dir / "a.pt")
    loaded = load_tensor(spec("a.pt", dtype), data_dir)
    assert loaded.dtype == dtype and loaded.shape == (2, 3)
    assert torch.equal(loaded, saved)
    assert loaded.device.type == "cpu"


def test_pt_saved_with_grad_comes_back_detached(data_dir):
    torch.save(torch.ones(3, requires_grad=True), data_dir / "g.pt")
    loaded = load_tensor(spec("g.pt", shape=(3,), requires_grad=True), data_dir)
    assert not loaded.requires_grad
    assert torch.equal(loaded, torch.ones(3))


def test_pt_zero_dim_and_empty(data_dir):
    torch.save(torch.tensor(2.5), data_dir / "s.pt")
    assert load_tensor(spec("s.pt", shape=()), data_dir).item() == 2.5
    torch.save(torch.empty(0, 4), data_dir / "e.pt")
    assert load_tensor(spec("e.pt", shape=(0, 4)), data_dir).shape == (0, 4)


def test_pt_non_contiguous_view_is_loaded(data_dir):
    base = torch.arange(12.0).reshape(3, 4)
    torch.save(base.t(), data_dir / "t.pt")
    assert torch.equal(load_tensor(spec("t.pt", shape=(4, 3)), data_dir), base.t())


@pytest.mark.parametrize(
    "np_dtype, dtype",
    [
        (np.float32, torch.float32),
        (np.float16, torch.float16),
        (np.int32, torch.int32),
        (np.bool_, torch.bool),
        (np.float64, torch.float64),
    ],
)
def test_npy_loaded(data_dir, np_dtype, dtype):
    array = np.arange(6).reshape(2, 3) % 2 if np_dtype is np.bool_ else np.arange(6).reshape(2, 3) - 2.5
    array = array.astype(np_dtype)
    np.save(data_dir / "a.npy", array)
    loaded = load_tensor(spec("a.npy", dtype), data_dir)
    assert loaded.dtype == dtype
    assert np.array_equal(loaded.numpy(), array)


def test_npy_fortran_order_loaded(data_dir):
    array = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.save(data_dir / "f.npy", array)
    assert np.array_equal(load_tensor(spec("f.npy"), data_dir).numpy(), array)


def test_npy_widened_bf16_is_cast_back(data_dir):
    values = np.array([[1.0, 1.00390625, -3.14159], [1e30, 0.0, -(2.0**-20)]], dtype=np.float32)
    np.save(data_dir / "Functional.relu.0.forward.input.0.npy", values)
    loaded = load_tensor(spec("Functional.relu.0.forward.input.0.npy", torch.bfloat16), data_dir)
    assert loaded.dtype == torch.bfloat16
    assert torch.equal(loaded, torch.from_numpy(values).to(torch.bfloat16))


def test_npy_integer_dtype_change_is_refused(data_dir):
    np.save(data_dir / "i.npy", np.arange(6, dtype=np.int32).reshape(2, 3))
    message = input_error(spec("i.npy", torch.int64), data_dir)
    assert "i.npy" in message and "dtype" in message


def test_load_tree_keeps_structure(data_dir):
    torch.save(torch.ones(2, 3), data_dir / "a.pt")
    torch.save(torch.zeros(4, dtype=torch.int64), data_dir / "b.pt")
    tree = ((spec("a.pt"), 3, None, (spec("b.pt", torch.int64, (4,)), slice(1, 2))), {"alpha": 0.5, "t": spec("a.pt")})
    args, kwargs = load_tree(tree, data_dir)
    assert torch.equal(args[0], torch.ones(2, 3))
    assert args[1:3] == (3, None)
    assert torch.equal(args[3][0], torch.zeros(4, dtype=torch.int64)) and args[3][1] == slice(1, 2)
    assert kwargs["alpha"] == 0.5 and torch.equal(kwargs["t"], torch.ones(2, 3))
    # every load is a separate tensor: an in-place change to one argument does not show in another
    assert kwargs["t"] is not args[0]


def test_iter_and_map_specs_order():
    a, b, c = spec("a.pt"), spec("b.pt"), spec("c.pt")
    tree = ((a, (1, b)), {"k": c, "n": 2})
    assert list(iter_specs(tree)) == [a, b, c]
    assert map_specs(tree, lambda s: s.data_name) == (("a.pt", (1, "b.pt")), {"k": "c.pt", "n": 2})


# --------------------------------------------------------------------------------------------- bad files


def test_missing_file(data_dir):
    message = input_error(spec("Functional.linear.0.forward.input.0.pt"), data_dir)
    assert "Functional.linear.0.forward.input.0.pt" in message and "not found" in message


def test_missing_data_directory(tmp_path):
    message = input_error(spec("x.pt"), tmp_path / "dump_tensor_data")
    assert "x.pt" in message and "not found" in message


@pytest.mark.parametrize("suffix", ["pt", "npy"])
def test_wrong_shape(data_dir, suffix):
    name = f"w.{suffix}"
    if suffix == "pt":
        torch.save(torch.ones(3, 2), data_dir / name)
    else:
        np.save(data_dir / name, np.ones((3, 2), dtype=np.float32))
    message = input_error(spec(name, shape=(2, 3)), data_dir)
    assert name in message and "shape" in message
    assert "(3, 2)" in message and "(2, 3)" in message


@pytest.mark.parametrize(
    "saved, recorded",
    [
        (torch.float16, torch.float32),
        (torch.float32, torch.bfloat16),
        (torch.int32, torch.int64),
        (torch.float32, torch.int32),
    ],
)
def test_wrong_dtype_pt(data_dir, saved, recorded):
    torch.save(torch.ones(2, 3, dtype=saved), data_dir / "d.pt")
    message = input_error(spec("d.pt", recorded), data_dir)
    assert "d.pt" in message and "dtype" in message
    assert str(saved) in message and str(recorded) in message


@pytest.mark.parametrize(
    "content, kind", [({"x": torch.ones(2, 3)}, "dict"), ([torch.ones(2, 3)], "list"), (3.5, "float"), ("text", "str")]
)
def test_non_tensor_content(data_dir, content, kind):
    torch.save(content, data_dir / "n.pt")
    message = input_error(spec("n.pt"), data_dir)
    assert "n.pt" in message and kind in message and "not a tensor" in message


@pytest.mark.parametrize(
    "name, payload",
    [("c.pt", b"this is not a torch file"), ("c.pt", b""), ("c.npy", b"\x93NUMPY garbage"), ("c.npy", b"")],
)
def test_corrupt_file(data_dir, name, payload):
    (data_dir / name).write_bytes(payload)
    message = input_error(spec(name), data_dir)
    assert name in message and "unreadable" in message


def test_truncated_pt(data_dir):
    torch.save(torch.randn(64, 64), data_dir / "t.pt")
    raw = (data_dir / "t.pt").read_bytes()
    (data_dir / "t.pt").write_bytes(raw[: len(raw) // 2])
    message = input_error(spec("t.pt", shape=(64, 64)), data_dir)
    assert "t.pt" in message and "unreadable" in message


def test_directory_instead_of_file(data_dir):
    (data_dir / "d.pt").mkdir()
    assert "d.pt" in input_error(spec("d.pt"), data_dir)


def test_unknown_suffix(data_dir):
    torch.save(torch.ones(2, 3), data_dir / "x.bin")
    message = input_error(spec("x.bin"), data_dir)
    assert "x.bin" in message and ".pt" in message


def test_object_dtype_npy_refused(data_dir):
    np.save(data_dir / "o.npy", np.array([[1, "a", None]] * 2, dtype=object), allow_pickle=True)
    message = input_error(spec("o.npy"), data_dir)
    assert "o.npy" in message


def test_structured_dtype_npy_refused(data_dir):
    array = np.zeros((2, 3), dtype=[("a", np.float32), ("b", np.int32)])
    np.save(data_dir / "r.npy", array)
    message = input_error(spec("r.npy"), data_dir)
    assert "r.npy" in message and "dtype" in message


@pytest.mark.parametrize("name", ["../x.pt", "../../x.pt", "sub/../../x.pt"])
def test_relative_escape_refused(tmp_path, name):
    deep = tmp_path / "a" / "b" / "dump_tensor_data"
    deep.mkdir(parents=True)
    torch.save(torch.ones(2, 3), deep.parent / "x.pt")  # the file exists: refusal is about the path
    torch.save(torch.ones(2, 3), deep.parent.parent / "x.pt")
    message = input_error(spec(name), deep)
    assert name in message and "refused" in message


def test_absolute_path_refused(data_dir, tmp_path):
    outside = tmp_path / "outside.pt"
    torch.save(torch.ones(2, 3), outside)
    message = input_error(spec(str(outside)), data_dir)
    assert "refused" in message


def test_symlink_out_of_the_directory_refused(data_dir, tmp_path):
    outside = tmp_path / "secret.pt"
    torch.save(torch.ones(2, 3), outside)
    os.symlink(outside, data_dir / "link.pt")
    assert "refused" in input_error(spec("link.pt"), data_dir)


def test_subdirectory_inside_data_dir_allowed(data_dir):
    (data_dir / "sub").mkdir()
    torch.save(torch.ones(2, 3), data_dir / "sub" / "x.pt")
    assert torch.equal(load_tensor(spec("sub/x.pt"), data_dir), torch.ones(2, 3))


class _Payload:
    """Unpickling this object runs os.mkdir(marker): what a hostile .pt file would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_pickled_code_is_not_executed(data_dir, tmp_path):
    # Control: the payload really does run when loaded the unsafe way.
    control = tmp_path / "control_marker"
    torch.save(_Payload(control), tmp_path / "control.pt")
    torch.load(tmp_path / "control.pt", weights_only=False)
    assert control.exists()

    marker = tmp_path / "pwned_marker"
    torch.save(_Payload(marker), data_dir / "evil.pt")
    with pytest.raises(InputError) as info:
        load_tensor(spec("evil.pt"), data_dir)
    assert not marker.exists()
    assert "evil.pt" in str(info.value)


def test_pickled_code_in_npy_is_not_executed(data_dir, tmp_path):
    marker = tmp_path / "npy_marker"
    array = np.empty((2, 3), dtype=object)
    array[:] = None
    array[0, 0] = _Payload(marker)
    with open(data_dir / "evil.npy", "wb") as f:
        np.save(f, array, allow_pickle=True)
    with pytest.raises(InputError):
        load_tensor(spec("evil.npy"), data_dir)
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_plain_pickle_renamed_pt_not_executed(data_dir, tmp_path):
    marker = tmp_path / "raw_marker"
    (data_dir / "raw.pt").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(InputError):
        load_tensor(spec("raw.pt"), data_dir)
    assert not marker.exists()


def test_statistics_only_spec(data_dir):
    s = TensorSpec(dtype=torch.float32, shape=(2, 3), stats=STATS)
    assert input_error(s, data_dir) == STATISTICS_ONLY == "statistics mode: inputs must be regenerated"
    with pytest.raises(InputError, match="statistics mode: inputs must be regenerated"):
        load_tree((1, {"x": s}), data_dir)


# --------------------------------------------------------------------------------------------- real dumps


@pytest.mark.parametrize("name", ["mlp_fp32_tensor", "gpt2_bf16_tensor"])
def test_every_tensor_of_the_real_dumps_loads(name):
    dump = load_dump(real_dump_json(name))
    count = 0
    for case in dump.cases:
        trees = [case.args, case.kwargs, case.outputs]
        if case.has_backward:
            trees += [case.grad_outputs, case.grad_inputs]
        for tree in trees:
            for s in iter_specs(tree):
                if s.data_name is None:
                    continue
                t = load_tensor(s, dump.data_dir)
                assert t.dtype == s.dtype and tuple(t.shape) == s.shape
                if t.numel() and t.dtype.is_floating_point and s.stats.max is not None:
                    assert float(t.double().max()) == pytest.approx(s.stats.max, rel=1e-2, abs=1e-2)
                count += 1
    assert count > 10


def test_real_statistics_dump_inputs_refused():
    dump = load_dump(real_dump_json("gpt2_bf16_statistics"))
    case = next(c for c in dump.cases if list(iter_specs(c.args)))
    with pytest.raises(InputError, match=STATISTICS_ONLY):
        load_tree(case.args, dump.data_dir)


def test_big_endian_npy_loaded(data_dir):
    array = np.arange(6, dtype=">f4").reshape(2, 3)
    np.save(data_dir / "be.npy", array)
    assert np.array_equal(load_tensor(spec("be.npy"), data_dir).numpy(), array)


@pytest.mark.parametrize(
    "payload, reason",
    [
        # precheck.dump.ptfile reads the archive before torch would: one reason of its own, never torch's advice.
        (b"this is not a torch file", "c.pt: unreadable: not a torch.save archive (File is not a zip file)"),
        (pickle.dumps(os.system, 2), "c.pt: unreadable: not a torch.save archive (File is not a zip file)"),
        (b"\x80\x02}q\x00.", "c.pt: unreadable: not a torch.save archive (File is not a zip file)"),
        (b"\x80\x02c\x00", "c.pt: unreadable: not a torch.save archive (File is not a zip file)"),
        (b"PK\x03\x04 junk", "c.pt: unreadable: not a torch.save archive (File is not a zip file)"),
    ],
)
def test_an_unloadable_pt_says_what_is_wrong_not_torchs_advice(data_dir, payload, reason):
    # torch's message advised retrying with weights_only=False (running the file's code), cut mid-sentence.
    (data_dir / "c.pt").write_bytes(payload)
    message = input_error(spec("c.pt"), data_dir)
    assert message.startswith(reason), message
    assert "weights_only=False" not in message and "weights_only` set to `False" not in message
    assert message.endswith("(File is not a zip file)"), message


def test_a_pt_with_an_encrypted_entry_says_so_in_one_line(data_dir):
    # zipfile refuses an encrypted entry with a RuntimeError, past what precheck.dump.ptfile checks: its first sentence
    # is the reason, on one line.
    torch.save(torch.zeros(2, 3), data_dir / "e.pt")
    raw = bytearray((data_dir / "e.pt").read_bytes())
    for magic, flags in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # local and central headers: "encrypted" bit
        at = raw.find(magic)
        while at >= 0:
            raw[at + flags] |= 1
            at = raw.find(magic, at + 4)
    (data_dir / "e.pt").write_bytes(bytes(raw))
    message = input_error(spec("e.pt"), data_dir)
    assert message.startswith("e.pt: unreadable: File <ZipInfo filename="), message
    assert message.endswith("is encrypted, password required for extraction"), message


def test_a_truncated_npy_says_what_its_header_declares(data_dir):
    np.save(data_dir / "t.npy", np.zeros((2, 3), dtype=np.float32))
    (data_dir / "t.npy").write_bytes((data_dir / "t.npy").read_bytes()[:-8])
    message = input_error(spec("t.npy"), data_dir)
    assert message == "t.npy: unreadable: its header declares (2, 3) float32 (24 bytes), the file holds 16 after it"
