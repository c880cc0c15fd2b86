"""Look inside a ``torch.save`` file before torch reads a byte of its data.

``torch.load(weights_only=True)`` never runs pickled code, but it still builds whatever tensor the file describes:
a sparse tensor whose indices point outside it (a segfault or a wrong verdict later), a quantized, nested or meta
tensor, or a (2, 3) tensor backed by a storage that a 4 MB file inflates to 4 GB. So the archive is inspected
first: its zip directory is read, and its pickle is replayed with every global replaced by a stand-in that only
records what it was given (nothing of the file is called, no storage is read). Only one dense strided tensor of
the expected dtype and shape is accepted, backed by one storage that holds what the tensor reaches (a saved view
may keep some more of its base, never far more) and whose zip entry holds exactly the declared bytes, within the
memory limit. Anything else is a :class:`PtError` with the reason, and torch never sees the file.

Nothing here imports torch: dtypes are torch's names ("float32", "bfloat16"), so `precheck compare` reads tensor
files as numpy arrays without torch's import time (precheck.dump.ptfile gives torch tensors).
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import struct
import zipfile
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from precheck.core.older_python import zip_strict

MAX_PICKLE = 1 << 20  # bytes of data.pkl: a tensor's is about 150; anything near this is not a saved tensor
MAX_ENTRIES = 64  # zip entries: a saved tensor has 7
# A saved view keeps its base's storage (torch.save of x[:, :3]); a storage is refused when it holds more than
# twice what its tensor reaches, plus this (a (2, 3) tensor on a 4 GB storage is a decompression bomb).
SLACK = 1 << 20
# What the other rebuild functions of torch._utils describe, for the refusal's message.
_REFUSED = {
    "_rebuild_sparse_tensor": "a sparse tensor",
    "_rebuild_qtensor": "a quantized tensor",
    "_rebuild_nested_tensor": "a nested tensor",
    "_rebuild_meta_tensor_no_storage": "a meta tensor (no data)",
    "_rebuild_wrapper_subclass": "a tensor subclass",
    "_rebuild_device_tensor_from_numpy": "a device tensor",
    "_rebuild_device_tensor_from_cpu_tensor": "a device tensor",
    "_rebuild_xla_tensor": "an XLA tensor",
    "_rebuild_tensor": "a tensor in a legacy format",
}


class _DType(str):
    """A dtype pickled by name (torch.float32): its canonical name, as a str."""


class _Marker:
    """torch.Tensor or torch.nn.Parameter as a pickle names them, never built."""


class _Tensor(_Marker):
    pass


class _Parameter(_Marker):
    pass


# torch's dtypes by every name torch gives them (torch.float is torch.float32), with their item sizes; a test holds
# this table against torch's own.
ITEMSIZE = {
    "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2, "uint32": 4, "uint64": 8,
    "float16": 2, "float32": 4, "float64": 8, "bfloat16": 2, "complex32": 4, "complex64": 8, "complex128": 16,
    "bool": 1, "qint8": 1, "quint8": 1, "qint32": 4, "quint4x2": 1, "quint2x4": 1,
    "float8_e5m2": 1, "float8_e4m3fn": 1, "float8_e5m2fnuz": 1, "float8_e4m3fnuz": 1, "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1, "bits1x8": 1, "bits2x4": 1, "bits4x2": 1, "bits8": 1, "bits16": 2,
    **{f"uint{n}": 1 for n in range(1, 8)}, **{f"int{n}": 1 for n in range(1, 8)},
}  # fmt: skip
ALIASES = {
    "short": "int16", "int": "int32", "long": "int64", "half": "float16", "float": "float32", "double": "float64",
    "chalf": "complex32", "cfloat": "complex64", "cdouble": "complex128", "bit": "uint1",
}  # fmt: skip
_STORAGE_DTYPES = {
    "ByteStorage": "uint8", "CharStorage": "int8", "ShortStorage": "int16", "IntStorage": "int32",
    "LongStorage": "int64", "HalfStorage": "float16", "FloatStorage": "float32", "DoubleStorage": "float64",
    "BFloat16Storage": "bfloat16", "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128", "QUInt8Storage": "quint8", "QInt8Storage": "qint8",
    "QInt32Storage": "qint32", "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4", "Storage": "float32",
}  # fmt: skip
_DTYPES = {**{name: _DType(name) for name in ITEMSIZE}, **{a: _DType(n) for a, n in ALIASES.items()}}
# numpy reads these; bfloat16 is read as its raw uint16 bits, widened to the upper float32 half (exact)
_NUMPY = {
    name: np.dtype(name)
    for name in ("uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "float32",
                 "float64", "complex64", "complex128", "bool")
}  # fmt: skip


class PtError(Exception):
    """The file is not one dense tensor torch may safely read; the message is the reason."""


class NotAnArchive(PtError):
    """The file is no zip archive at all (empty, truncated, another format): unreadable rather than refused."""


@dataclass(frozen=True)
class _Storage:
    dtype: str  # uint8 for an untyped storage (its size counts bytes)
    key: str
    numel: int


@dataclass(frozen=True)
class StoredTensor:
    """What the file declares, before anything of it is read."""

    dtype: str  # torch's name: float32, bfloat16
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    storage_bytes: int
    entry: str  # the storage's zip entry
    data_start: int | None = None  # where a stored (uncompressed) entry's bytes begin in the file; None: deflated


@dataclass(frozen=True)
class _Rebuilt:
    storage: _Storage
    offset: Any
    size: Any
    stride: Any
    dtype: str


def _rebuild_v2(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any = False, *rest: Any) -> _Rebuilt:
    if not isinstance(storage, _Storage):
        raise PtError("a tensor without a storage")
    return _Rebuilt(storage, offset, size, stride, storage.dtype)


def _rebuild_v3(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any, hooks: Any, dtype: Any, *_):
    if not isinstance(storage, _Storage) or not isinstance(dtype, _DType):
        raise PtError("a tensor without a storage or a dtype")
    return _Rebuilt(storage, offset, size, stride, dtype)


def _parameter(data: Any, *_: Any) -> Any:
    return data


def _from_type(func: Any, kind: Any, args: Any, state: Any) -> Any:
    if kind not in (_Tensor, _Parameter) or state:
        raise PtError(f"a tensor of type {getattr(kind, '__name__', kind)!r} with state")
    return func(*args)


_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_v3,
    ("torch._utils", "_rebuild_parameter"): _parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _from_type,
    ("torch", "Tensor"): _Tensor,
    ("torch.nn.parameter", "Parameter"): _Parameter,
    ("collections", "OrderedDict"): dict,
    ("torch.storage", "UntypedStorage"): _DType("uint8"),
}


class _DryUnpickler(pickle.Unpickler):
    """Replays a tensor's pickle with stand-ins: storages become their declarations, rebuilds their arguments."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return _ALLOWED[module, name]
        if module == "torch" and name in _STORAGE_DTYPES:
            return _DType(_STORAGE_DTYPES[name])
        if module == "torch" and name in _DTYPES:
            return _DTYPES[name]
        what = _REFUSED.get(name) if module == "torch._utils" else None
        raise PtError(f"holds {what or 'something other than a dense tensor'} ({_short(module)}.{_short(name)})")

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise PtError("a storage reference that is not ('storage', type, key, location, size)")
        _, dtype, key, _location, numel = pid
        if not isinstance(dtype, _DType) or not isinstance(key, str) or not _is_count(numel):
            raise PtError("a malformed storage reference")
        return _Storage(dtype, key, numel)


def inspect(f: BinaryIO, *, max_bytes: int | None = None) -> StoredTensor:
    """The tensor the open ``torch.save`` file ``f`` declares, checked without reading its storage; PtError says
    why not. ``f`` is the descriptor its storage is then read from (precheck.dump.safe_files opens it)."""
    try:
        _check_directory(f)
        with zipfile.ZipFile(f) as archive:
            entries = archive.infolist()
            pickled = _pickle_entry(entries)
            prefix = pickled.filename[: -len("data.pkl")]
            with archive.open(pickled) as p:
                raw = p.read(MAX_PICKLE + 1)
            rebuilt = _replayed(raw)
            named = {e.filename: e for e in entries}
            if f"{prefix}byteorder" in named:
                with archive.open(f"{prefix}byteorder") as order:
                    if order.read(16) != b"little":
                        raise PtError("a big-endian archive")
            entry = named.get(f"{prefix}data/{rebuilt.storage.key}")
            stored = _checked(rebuilt, f"{prefix}data/{rebuilt.storage.key}")
            if entry is None:
                raise PtError(f"storage {_short(rebuilt.storage.key)!r} is missing from the archive")
            if entry.file_size != stored.storage_bytes:
                raise PtError(f"storage declares {stored.storage_bytes} bytes, its entry holds {entry.file_size}")
            if max_bytes is not None and stored.storage_bytes > max_bytes:
                raise PtError(f"storage of {_size(stored.storage_bytes)} above --max-memory {_size(max_bytes)}")
            return dataclasses.replace(stored, data_start=_data_start(f, entry))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as e:
        raise NotAnArchive(f"not a torch.save archive ({_short(str(e) or type(e).__name__)})") from None


def _replayed(raw: bytes) -> _Rebuilt:
    """The pickle replayed with stand-ins: what the tensor declares, or PtError."""
    try:
        rebuilt = _DryUnpickler(io.BytesIO(raw)).load()
    except PtError:
        raise
    except Exception as e:  # any malformed pickle: the file's problem
        raise PtError(f"malformed tensor pickle ({type(e).__name__}: {_short(str(e))})") from None
    if not isinstance(rebuilt, _Rebuilt):
        raise PtError(f"holds {type(rebuilt).__name__}, not a tensor")
    return rebuilt


def _data_start(f: BinaryIO, entry: zipfile.ZipInfo) -> int | None:
    """Where a stored entry's bytes begin, from its local header (checked as zipfile checks it: signature and
    name), when they lie within the file; None for a compressed or encrypted entry (read through zipfile)."""
    if entry.compress_type != zipfile.ZIP_STORED or entry.flag_bits & 1 or entry.compress_size != entry.file_size:
        return None
    f.seek(entry.header_offset)
    header = f.read(zipfile.sizeFileHeader)
    if len(header) != zipfile.sizeFileHeader or header[:4] != zipfile.stringFileHeader:
        raise PtError(f"entry {_short(entry.filename)!r} has no local header where the directory says")
    fields = struct.unpack(zipfile.structFileHeader, header)
    name_length, extra_length = fields[zipfile._FH_FILENAME_LENGTH], fields[zipfile._FH_EXTRA_FIELD_LENGTH]
    if f.read(name_length) != entry.orig_filename.encode("utf-8" if entry.flag_bits & 0x800 else "cp437"):
        raise PtError(f"entry {_short(entry.filename)!r} is named otherwise in its local header")
    start = entry.header_offset + zipfile.sizeFileHeader + name_length + extra_length
    if start + entry.file_size > os.fstat(f.fileno()).st_size:
        raise PtError(f"entry {_short(entry.filename)!r} reaches past the end of the file")
    return start


def read_bytes(f: BinaryIO, stored: StoredTensor) -> bytearray:
    """The storage's bytes of the tensor :func:`inspect` accepted in ``f`` (run_ut's reader); nothing beyond the
    checked entry is read. A stored entry is read at the offset :func:`inspect` checked, with no zip stream and
    no CRC, as :func:`read_raw` reads it (zipfile's CRC-checked stream took 1.0-1.25 s for the 1.1 GB of a heavy
    bf16 step); a deflated one goes through zipfile, CRC-checked."""
    if stored.data_start is None:
        with zipfile.ZipFile(f) as archive:
            return bytearray(archive.read(stored.entry))
    raw = bytearray(stored.storage_bytes)
    read_into(f.fileno(), stored.data_start, np.frombuffer(raw, dtype=np.uint8))
    return raw


def numpy_dtype(stored: StoredTensor) -> np.dtype:
    """The numpy dtype of the tensor's stored elements (uint16: bfloat16's raw bits); PtError when numpy has none."""
    if stored.dtype == "bfloat16":
        return np.dtype(np.uint16)
    if stored.dtype not in _NUMPY:
        raise PtError(f"a torch.{stored.dtype} tensor, which numpy cannot hold")
    return _NUMPY[stored.dtype]


def read_raw(f: BinaryIO, stored: StoredTensor) -> np.ndarray:
    """The tensor as a numpy view of its storage, bfloat16 as its raw uint16 bits; PtError for a dtype numpy lacks.

    A stored entry is read by :func:`read_bytes` in one call at the offset :func:`inspect` checked, with no zip
    stream and no CRC: torch.load (so msprobe's compare) does not verify it either, a CRC guards against
    a damaged disk, not a hostile file, and every bound that keeps the read inside the file is still checked
    (a file that shrank since is refused, never read past)."""
    dtype = numpy_dtype(stored)
    flat = np.frombuffer(read_bytes(f, stored), dtype=dtype)
    strides = tuple(s * dtype.itemsize for s in stored.stride)
    return np.lib.stride_tricks.as_strided(flat[stored.offset :], stored.shape, strides, writeable=False)


def contiguous_start(stored: StoredTensor) -> int | None:
    """The file position of the tensor's first element when its elements lie one after another in C order in a
    stored (uncompressed) entry, so that any range of them can be read straight from the file; else None."""
    if stored.data_start is None:
        return None
    expected = 1
    for n, s in zip_strict(reversed(stored.shape), reversed(stored.stride)):
        if n != 1 and s != expected:
            return None
        expected *= n
    return stored.data_start + stored.offset * ITEMSIZE[stored.dtype]


def read_into(fd: int, position: int, out: np.ndarray) -> None:
    """``out`` (contiguous) filled with the file's bytes from ``position``, without moving a shared file offset
    (threads read ranges of one file side by side); PtError when the file ends first (it shrank since
    :func:`inspect` checked it). One ``preadv`` returns at most 0x7ffff000 bytes on Linux (a 2.2 GB storage
    came back short and was refused), so it reads until ``out`` is full or the file ends."""
    buffer = memoryview(out.view(np.uint8)).cast("B")
    done = 0
    while done < len(buffer):
        got = os.preadv(fd, [buffer[done:]], position + done)
        if got == 0:
            raise PtError("the file ends inside its storage (it changed after it was checked)")
        done += got


def widened(bits: np.ndarray) -> np.ndarray:
    """bfloat16's raw uint16 bits as the float32 values they are (the upper half of a float32, exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _check_directory(f: BinaryIO) -> None:
    """Refuse an archive whose central directory is far beyond a tensor's before zipfile builds an object per
    entry (a small file can list millions). zipfile's own reader of the end record is used: it is what it
    trusts next."""
    end = zipfile._EndRecData(f)
    if end is None:
        raise zipfile.BadZipFile("File is not a zip file")
    if end[zipfile._ECD_ENTRIES_TOTAL] > MAX_ENTRIES or end[zipfile._ECD_SIZE] > MAX_ENTRIES * 1024:
        raise PtError(f"an archive of {end[zipfile._ECD_ENTRIES_TOTAL]} entries, not one tensor")


def _pickle_entry(entries: list[zipfile.ZipInfo]) -> zipfile.ZipInfo:
    """The archive's one data.pkl; archives that two readers could read differently are refused."""
    names = [e.filename for e in entries]
    if len(entries) > MAX_ENTRIES:
        raise PtError(f"an archive of {len(entries)} entries, not one tensor")
    if len(set(names)) != len(names):
        raise PtError("an archive with two entries of one name")
    pickles = [e for e in entries if e.filename.endswith("/data.pkl") and e.filename.count("/") == 1]
    if len(pickles) != 1 or any(not n.startswith(pickles[0].filename[:-8]) for n in names):
        raise PtError("not a torch.save archive (expected one <name>/data.pkl and nothing beside <name>/)")
    if pickles[0].file_size > MAX_PICKLE:
        raise PtError(f"a tensor pickle of {pickles[0].file_size} bytes")
    return pickles[0]


def _checked(r: _Rebuilt, entry: str) -> StoredTensor:
    """The declared tensor, when its sizes are sane and its storage is what it reaches (within SLACK)."""
    if not (isinstance(r.size, tuple) and isinstance(r.stride, tuple) and len(r.size) == len(r.stride)):
        raise PtError("a tensor whose size and stride do not match")
    if not all(map(_is_count, (*r.size, *r.stride, r.offset))):
        raise PtError("a tensor with a negative or non-integer size, stride or offset")
    storage = r.storage
    itemsize = ITEMSIZE[r.dtype]
    storage_bytes = storage.numel * ITEMSIZE[storage.dtype]
    if storage.dtype != r.dtype and storage.dtype != "uint8":
        raise PtError(f"a torch.{r.dtype} tensor on a torch.{storage.dtype} storage")
    if storage_bytes % itemsize:
        raise PtError(f"a storage of {storage_bytes} bytes for torch.{r.dtype} elements of {itemsize}")
    if 0 in r.size:
        reach = r.offset
    else:
        reach = r.offset + 1 + sum((n - 1) * s for n, s in zip_strict(r.size, r.stride))
    if reach * itemsize > storage_bytes:
        raise PtError(
            f"the tensor reaches element {reach} of a storage of {storage_bytes // itemsize} (storage offset "
            f"{r.offset}, size {r.size}, stride {r.stride})"
        )
    if storage_bytes > 2 * reach * itemsize + SLACK:
        raise PtError(
            f"a storage of {_size(storage_bytes)} behind a {tuple(r.size)} tensor that reaches "
            f"{_size(reach * itemsize)} of it"
        )
    return StoredTensor(str(r.dtype), tuple(r.size), tuple(r.stride), r.offset, storage_bytes, entry)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} bytes"
