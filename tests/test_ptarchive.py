"""The torch-free reader of tensor files: the same tensor torch saved, as a numpy array, for every dtype."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch

from precheck.dump import ptarchive


def test_dtype_table_is_torchs():
    names = {n: v for n, v in vars(torch).items() if isinstance(v, torch.dtype)}
    for name, dtype in names.items():
        canonical = ptarchive.ALIASES.get(name, name)
        assert str(dtype) == f"torch.{canonical}", name
        assert ptarchive.ITEMSIZE[canonical] == dtype.itemsize, name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        storages = {
            n: str(c.dtype).removeprefix("torch.")
            for n, c in vars(torch).items()
            if n.endswith("Storage") and isinstance(c, type) and n != "UntypedStorage" and hasattr(c, "dtype")
        }
    assert storages == ptarchive._STORAGE_DTYPES


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.bool]
)
def test_read_raw_matches_torch(tmp_path, dtype):
    base = (torch.randn(6, 10, generator=torch.Generator().manual_seed(0)) * 50).to(dtype)
    view = base[1:5, ::3]  # a saved view keeps its base's storage: offset and strides must be honoured
    torch.save(view, tmp_path / "t.pt")
    with open(tmp_path / "t.pt", "rb") as f:
        stored = ptarchive.inspect(f)
        assert stored.dtype == str(dtype).removeprefix("torch.")
        raw = ptarchive.read_raw(f, stored)
    array = ptarchive.widened(raw) if dtype == torch.bfloat16 else raw
    expected = view.float().numpy() if dtype == torch.bfloat16 else view.numpy()
    np.testing.assert_array_equal(array, expected)
    assert ptarchive.contiguous_start(stored) is None, "a strided view is read whole"


def test_float8_is_refused_with_a_reason(tmp_path):
    torch.save(torch.zeros(3, dtype=torch.float8_e4m3fn), tmp_path / "t.pt")
    with open(tmp_path / "t.pt", "rb") as f, pytest.raises(ptarchive.PtError, match="torch.float8_e4m3fn tensor"):
        ptarchive.read_raw(f, ptarchive.inspect(f))


def test_a_storage_that_one_read_cannot_fill_is_read_whole(tmp_path, monkeypatch):
    """Linux's ``preadv`` returns at most 0x7ffff000 bytes a call, so a stored tensor above 2 GiB came back short
    and was refused as "it changed after it was checked". Here every call returns at most 1000 bytes (a cut
    inside an element): run_ut's and compare's readers still give the saved values exactly."""
    from precheck.compare.metrics import load_elements
    from precheck.dump.records import TensorSpec
    from precheck.inputs.builder import load_tensor

    t = torch.randn(3, 1001, generator=torch.Generator().manual_seed(0))
    torch.save(t, tmp_path / "t.pt")
    real, calls = os.preadv, []

    def at_most_1000(fd, buffers, offset):
        calls.append(offset)
        return real(fd, [memoryview(buffers[0])[:1000]], offset)

    monkeypatch.setattr(os, "preadv", at_most_1000)
    with open(tmp_path / "t.pt", "rb") as f:
        np.testing.assert_array_equal(ptarchive.read_raw(f, ptarchive.inspect(f)), t.numpy())
    assert len(calls) == 13, "12,012 bytes in reads of 1000"
    spec = TensorSpec(dtype=torch.float32, shape=(3, 1001), stats={}, requires_grad=False, data_name="t.pt")
    assert torch.equal(load_tensor(spec, tmp_path), t)
    np.testing.assert_array_equal(load_elements(tmp_path, "t.pt").array(), t.numpy())
