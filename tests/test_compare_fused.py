"""The chunked metric pass of `precheck compare` (precheck.compare.fused) against msprobe's formulas applied to
whole tensors, and the direct reads of stored .pt entries it makes: the same numbers, every bound still checked."""

from __future__ import annotations

import struct
import zipfile

import numpy as np
import pytest
import torch
from hypothesis import given
from test_hostile_data import odd_file_examples, odd_files, write_odd

from precheck.compare import fused
from precheck.compare.fused import Elements
from precheck.compare.metrics import load_elements, tensor_metrics
from precheck.dump import ptarchive
from precheck.schema import CompareConst


def msprobe_metrics(n: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """msprobe 26.2's builtin algorithms (core/compare/algorithm, utils.get_relative_err) on whole arrays."""
    n64, b64 = n.reshape(-1).astype(float), b.reshape(-1).astype(float)
    kind = np.result_type(n, b, np.float32)
    nk, bk = n.reshape(-1).astype(kind), b.reshape(-1).astype(kind)
    zero = bk == 0
    eps = np.finfo(kind).eps
    nk[zero] += eps
    bk[zero] += eps
    rel = np.abs(np.divide(nk - bk, bk))
    cos = float(f"{np.dot(n64, b64) / (np.linalg.norm(n64) * np.linalg.norm(b64)):.12f}")
    return {
        "Cosine": round(cos, 6) if cos > 0.9999 else cos,
        "EucDist": np.linalg.norm(n64 - b64, ord=2),
        "MaxAbsErr": float(f"{np.max(np.abs(n64 - b64)):.12f}"),
        "MaxRelativeErr": float(f"{np.max(rel):.12f}"),
        "One Thousandth Err Ratio": float(f"{np.sum(rel < 0.001) / rel.size:.12f}"),
        "Five Thousandths Err Ratio": float(f"{np.sum(rel < 0.005) / rel.size:.12f}"),
    }


def pair(size: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A tensor and a perturbed copy, with zeros in the bench (msprobe's epsilon path) and exact agreements."""
    g = torch.Generator().manual_seed(seed)
    n = (torch.randn(size, generator=g) * 3).to(dtype)
    b = (n.double() * (1 + torch.randn(size, generator=g, dtype=torch.float64) * 1e-3)).to(dtype)
    b[::97] = 0
    b[5::11] = n[5::11]
    return n, b


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16, torch.float64, torch.int32])
@pytest.mark.parametrize("size", [1000, 3 * fused.CHUNK + 17, 9 * fused.CHUNK + 5])
def test_the_pass_is_msprobes_formulas(tmp_path, dtype, size):
    """Saved by torch and read back from the file a chunk at a time (split between threads when large): every
    column as msprobe computes it; the distance, summed by chunk, within msprobe's own rounding (on 590,000
    float32 differences msprobe's BLAS sum is 1.6e-14 from the exactly rounded one, this pass's 4.4e-15)."""
    n, b = pair(size, dtype)
    torch.save(n, tmp_path / "n.pt")
    torch.save(b, tmp_path / "b.pt")
    ne, be = load_elements(tmp_path, "n.pt"), load_elements(tmp_path, "b.pt")
    assert ne.file is not None and ne.raw is None, "a contiguous stored tensor is read from its file by ranges"
    got = tensor_metrics(ne, be).values
    wide = (lambda t: t.float().numpy()) if dtype == torch.bfloat16 else (lambda t: t.numpy())
    want = msprobe_metrics(wide(n), wide(b))
    for column in CompareConst.BUILTIN_COMPARE_COLUMNS:
        if column == "EucDist" and size > fused.CHUNK:
            assert got[column] == pytest.approx(want[column], rel=5e-14), column
        else:
            assert got[column] == want[column], column


def test_views_and_in_memory_tensors_give_the_same_numbers(tmp_path):
    base_n, base_b = pair(6 * 70_000, torch.bfloat16, seed=1)
    n, b = base_n.view(6, 70_000)[:, 3:], base_b.view(6, 70_000)[:, 3:]  # views keep their base's storage
    torch.save(n, tmp_path / "n.pt")
    torch.save(b.t().contiguous().t(), tmp_path / "b.pt")  # column-major: strided, read whole
    ne, be = load_elements(tmp_path, "n.pt"), load_elements(tmp_path, "b.pt")
    assert ne.file is None and be.file is None
    from_views = tensor_metrics(ne, be).values
    torch.save(n.contiguous(), tmp_path / "n.pt")
    torch.save(b.contiguous(), tmp_path / "b.pt")
    from_files = tensor_metrics(load_elements(tmp_path, "n.pt"), load_elements(tmp_path, "b.pt")).values
    in_memory = tensor_metrics(Elements.of(n.float().numpy()), Elements.of(b.float().numpy())).values
    assert from_views == from_files == in_memory


def test_inf_and_nan_follow_msprobe(tmp_path):
    n, b = pair(3 * fused.CHUNK, torch.float32)
    n[7], b[7], n[9], b[9] = float("inf"), float("inf"), float("nan"), float("nan")
    same = tensor_metrics(Elements.of(n.numpy()), Elements.of(b.numpy()))
    n[7], b[7] = 0, 0
    assert same.values == tensor_metrics(Elements.of(n.numpy()), Elements.of(b.numpy())).values
    n[7] = float("inf")
    assert set(tensor_metrics(Elements.of(n.numpy()), Elements.of(b.numpy())).values.values()) == {"Nan"}


def stored_entry(path) -> zipfile.ZipInfo:
    return next(e for e in zipfile.ZipFile(path).infolist() if "/data/" in e.filename)


def test_a_local_header_that_points_past_the_file_is_refused(tmp_path):
    """The directory is honest, the entry's local header claims a huge extra field: its bytes would lie past
    the end of the file. Refused in one line, nothing read."""
    torch.save(torch.randn(4, 32), tmp_path / "x.pt")
    entry = stored_entry(tmp_path / "x.pt")
    raw = bytearray((tmp_path / "x.pt").read_bytes())
    struct.pack_into("<H", raw, entry.header_offset + 28, 0xFFFF)
    (tmp_path / "x.pt").write_bytes(raw)
    with open(tmp_path / "x.pt", "rb") as f, pytest.raises(ptarchive.PtError, match="reaches past the end of the file"):
        ptarchive.inspect(f)


def test_a_local_header_of_another_name_is_refused(tmp_path):
    torch.save(torch.randn(4, 32), tmp_path / "x.pt")
    entry = stored_entry(tmp_path / "x.pt")
    raw = bytearray((tmp_path / "x.pt").read_bytes())
    raw[entry.header_offset + zipfile.sizeFileHeader] ^= 1
    (tmp_path / "x.pt").write_bytes(raw)
    with (
        open(tmp_path / "x.pt", "rb") as f,
        pytest.raises(ptarchive.PtError, match="named otherwise in its local header"),
    ):
        ptarchive.inspect(f)


def test_a_file_cut_short_after_it_was_checked_is_one_reason(tmp_path):
    """Inspected whole, then truncated before its values are read: an error naming the file, no out-of-bounds
    read and no traceback."""
    n, b = pair(3 * fused.CHUNK, torch.bfloat16)
    torch.save(n, tmp_path / "n.pt")
    torch.save(b, tmp_path / "b.pt")
    ne, be = load_elements(tmp_path, "n.pt"), load_elements(tmp_path, "b.pt")
    with open(tmp_path / "b.pt", "r+b") as f:
        f.truncate(be.start + 1000)
    with pytest.raises(ptarchive.PtError, match=r"^b\.pt: the file ends inside its storage"):
        tensor_metrics(ne, be)
    with pytest.raises(ptarchive.PtError, match=r"^b\.pt: the file ends inside its storage"):
        be.in_memory()  # read whole, for a transpose


def test_a_bad_crc_is_read_as_torch_load_reads_it(tmp_path):
    """A stored entry's CRC is not verified, as torch.load (msprobe's reader) does not: its values are read."""
    t = torch.randn(64)
    torch.save(t, tmp_path / "x.pt")
    entry = stored_entry(tmp_path / "x.pt")
    raw = bytearray((tmp_path / "x.pt").read_bytes())
    struct.pack_into("<I", raw, entry.header_offset + 14, entry.CRC ^ 1)
    (tmp_path / "x.pt").write_bytes(raw)
    assert torch.equal(torch.load(tmp_path / "x.pt", weights_only=True), t)
    np.testing.assert_array_equal(load_elements(tmp_path, "x.pt").array(), t.numpy())


@pytest.mark.filterwarnings("ignore::UserWarning")
@odd_file_examples
@given(case=odd_files())
def test_any_odd_file_is_compared_or_one_reason(tmp_path, case):
    """test_hostile_data's odd files (any declared storage, offset, size and stride, other layouts, views) through
    compare's reader and pass: numbers, or one line naming the file; never another exception or a read past
    what inspect checked."""
    write_odd(tmp_path / "x.pt", dict(case))
    try:
        e = load_elements(tmp_path, "x.pt")
        metrics = tensor_metrics(e, e)
    except (ValueError, ptarchive.PtError) as error:
        assert str(error).startswith("x.pt: ") and "\n" not in str(error)
        return
    assert set(metrics.values) == set(CompareConst.BUILTIN_COMPARE_COLUMNS)
