"""The torch-free reader of tensor files: the same tensor torch saved, as a numpy array, for every dtype."""

from __future__ import annotations

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
    stored = ptarchive.inspect(tmp_path / "t.pt")
    assert stored.dtype == str(dtype).removeprefix("torch.")
    raw = ptarchive.read_raw(tmp_path / "t.pt", stored)
    array = ptarchive.widened(raw) if dtype == torch.bfloat16 else raw
    expected = view.float().numpy() if dtype == torch.bfloat16 else view.numpy()
    np.testing.assert_array_equal(array, expected)
    assert ptarchive.contiguous_start(stored) is None, "a strided view is read whole"


def test_float8_is_refused_with_a_reason(tmp_path):
    torch.save(torch.zeros(3, dtype=torch.float8_e4m3fn), tmp_path / "t.pt")
    stored = ptarchive.inspect(tmp_path / "t.pt")
    with pytest.raises(ptarchive.PtError, match="torch.float8_e4m3fn tensor, which numpy cannot hold"):
        ptarchive.read_raw(tmp_path / "t.pt", stored)
