"""msprobe's six tensor metrics of two tensors in one chunked pass (precheck.compare.metrics formats them).

A heavy dump's tensors are hundreds of megabytes, and msprobe's formulas, applied whole, make a float64 copy of
each side and of their difference, then a float32 relative error: a dozen passes over memory and several
temporaries the size of the tensor. Here each tensor is walked once in chunks that stay in the CPU's cache: a
chunk is widened (bfloat16 from its raw bits, by a shift) into the pass's dtype, the three dot products and the
distance accumulate in float64 as msprobe computes them, the relative error is computed in msprobe's dtype, and
what is kept per chunk is a handful of numbers; the temporaries are a few chunks whatever the tensor's size.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from precheck.dump import ptarchive
from precheck.dump.safe_files import DataFile

CHUNK = 1 << 16  # elements: the chunk's float64 and float32 temporaries stay within a core's L2 cache
_LOCAL = threading.local()  # each thread's chunk buffers
_READ = max(1 << 20, CHUNK * 16)  # bytes read at once: whole chunks of any dtype (complex128 the widest)
_ROW = 10_000  # elements: OpenBLAS (numpy's) computes a dot product this short on the calling thread alone


@dataclass(frozen=True)
class Elements:
    """A tensor's values as recorded: in memory (``raw``: the array, bfloat16 as its uint16 bits), or in its
    open file (``file``, from byte ``start`` in C order: read a chunk at a time, never whole, and only through
    the descriptor that was checked). Closing it (or leaving its ``with``) closes that file."""

    shape: tuple[int, ...]
    stored: np.dtype  # the dtype of ``raw`` or of the file's elements (uint16 for bfloat16)
    bf16: bool = False
    raw: np.ndarray | None = None
    file: DataFile | None = None
    start: int = 0

    @classmethod
    def of(cls, raw: np.ndarray, bf16: bool = False) -> Elements:
        return cls(raw.shape, raw.dtype, bf16, raw=raw)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype(self) -> np.dtype:
        """The dtype of its values (float32 for bfloat16)."""
        return np.dtype(np.float32) if self.bf16 else self.stored

    def in_memory(self) -> Elements:
        """The same values held in memory (for a transpose, or the rare paths that need the tensor whole)."""
        if self.raw is not None:
            return self
        flat = np.empty(self.size, self.stored)
        _named(self.file.path, ptarchive.read_into, self.file.file.fileno(), self.start, flat)
        return Elements.of(flat.reshape(self.shape), self.bf16)

    def array(self, dtype: np.dtype | None = None) -> np.ndarray:
        """The whole tensor (in ``dtype``), bfloat16 widened to float32."""
        raw = self.in_memory().raw
        return np.asarray(ptarchive.widened(raw) if self.bf16 else raw, dtype=dtype)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()

    def __enter__(self) -> Elements:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class _Reader:
    """One side's chunks (of its ``size`` elements): from memory, or read from the file a block of ``scratch``
    (bytes) at a time, several chunks per read (a read costs about as much as a megabyte's copy)."""

    def __init__(self, e: Elements, flat: np.ndarray | None, scratch: np.ndarray, size: int) -> None:
        self.e, self.flat, self.size = e, flat, size
        self.fd = None if flat is not None else e.file.file.fileno()
        self.scratch = scratch.view(e.stored)
        self.block = (0, 0)  # the elements the scratch holds

    def fill(self, out: np.ndarray, start: int, stop: int) -> np.ndarray:
        """Elements start..stop as values of ``out``'s dtype, in ``out``: bfloat16 bits shifted into place."""
        view = out[: stop - start]
        if self.fd is None:
            source = self.flat[start:stop]
        else:
            if not self.block[0] <= start < stop <= self.block[1]:
                self.block = (start, min(start + self.scratch.size, self.size))
                into = self.scratch[: self.block[1] - start]
                position = self.e.start + start * self.e.stored.itemsize
                _named(self.e.file.path, ptarchive.read_into, self.fd, position, into)
            source = self.scratch[start - self.block[0] : stop - self.block[0]]
        if self.e.bf16 and view.dtype == np.float32:
            bits = view.view(np.uint32)
            np.copyto(bits, source)
            np.left_shift(bits, 16, out=bits)
        elif self.e.bf16:
            np.copyto(view, np.left_shift(source, np.uint32(16), dtype=np.uint32).view(np.float32))
        else:
            np.copyto(view, source, casting="unsafe")
        return view


def _named(path: Path, read: Callable[..., Any], *args: Any) -> Any:
    """``read(*args)``; a file that cannot be read to the end (it changed after it was checked) is a PtError
    naming it."""
    try:
        return read(*args)
    except (ptarchive.PtError, OSError) as e:
        raise ptarchive.PtError(f"{path.name[:80]}: {e}") from None


@dataclass
class Sums:
    """What one pass over two tensors keeps."""

    nn: float = 0.0  # sum of n*n, in float64
    bb: float = 0.0
    nb: float = 0.0
    dd: float = 0.0  # sum of (n - b)^2, in float64
    max_abs: float = 0.0  # max |n - b|, in float64
    top: float = 0.0  # max |b|
    max_rel: float = 0.0  # max |n - b| / |b|, in msprobe's dtype
    below_1e3: int = 0  # how many relative errors are below 0.001
    below_5e3: int = 0


def passed(
    n: Elements, b: Elements, kind: np.dtype, drop: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
) -> Sums:
    """The sums of ``n`` against ``b`` (same size), the relative error in ``kind`` (float32 or float64). Raises
    ptarchive.PtError when a file cannot be read to its end. ``drop``: given a chunk of each side, the places to
    leave out (zeroed on both sides, as msprobe zeroes equal infinities), for a deviation that a mask's constants
    or the target dtype's range must not decide (precheck.compare.metrics).

    On one thread: on the 2-core machine of benchmarks/bench_compare.py --heavy, splitting a tensor's chunks
    between two threads (numpy lets go of the GIL in its loops) cost 1.1-1.6 s more CPU and 0.5 s more wall
    time on the heavy pair than this (2.8 s)."""
    sums, buffers, size = Sums(), _Buffers.of_thread(kind), n.size
    flats = [None if e.raw is None else e.raw.reshape(-1) for e in (n, b)]  # a copy only for a strided view
    n_reader, b_reader = _Reader(n, flats[0], buffers.raw_n, size), _Reader(b, flats[1], buffers.raw_b, size)
    for start in range(0, size, CHUNK):
        stop = min(start + CHUNK, size)
        n_values, b_values = n_reader.fill(buffers.n, start, stop), b_reader.fill(buffers.b, start, stop)
        if drop is not None:
            gone = drop(n_values, b_values)
            n_values[gone], b_values[gone] = 0, 0
        _chunk(sums, buffers, n_values, b_values)
    return sums


class _Buffers:
    """One chunk's temporaries: made once per thread and dtype (fresh pages cost a fault each, every time) and
    reused by every pass the thread makes, so the pass's memory is a few chunks."""

    def __init__(self, kind: np.dtype) -> None:
        self.n, self.b, self.rel, self.zn = (np.empty(CHUNK, kind) for _ in range(4))
        self.n64, self.b64 = np.empty(CHUNK, np.float64), np.empty(CHUNK, np.float64)
        self.mask = np.empty(CHUNK, bool)
        self.raw_n, self.raw_b = np.empty(_READ, np.uint8), np.empty(_READ, np.uint8)

    @staticmethod
    def of_thread(kind: np.dtype) -> _Buffers:
        made = vars(_LOCAL).setdefault("buffers", {})
        if kind not in made:
            made[kind] = _Buffers(kind)
        return made[kind]


@np.errstate(divide="ignore", invalid="ignore", over="ignore")
def _chunk(s: Sums, buf: _Buffers, n: np.ndarray, b: np.ndarray) -> None:
    """One chunk into the sums, by msprobe's formulas: float64 for the cosine, distance and max abs error
    (msprobe's ``astype(float)``), ``kind`` for the relative error (its ``result_type(n, b, float32)``)."""
    length = n.size
    n64, b64 = buf.n64[:length], buf.b64[:length]
    np.copyto(n64, n)
    np.copyto(b64, b)
    s.nn += _dot(n64, n64)
    s.bb += _dot(b64, b64)
    s.nb += _dot(n64, b64)
    d64 = np.subtract(n64, b64, out=b64)  # the bench's float64 copy is done with
    s.dd += _dot(d64, d64)
    s.max_abs = max(s.max_abs, float(d64.max()), -float(d64.min()))
    s.top = max(s.top, float(b.max()), -float(b.min()))
    rel, largest = _relative(n, b, buf, length)
    mask = buf.mask[:length]
    s.max_rel = max(s.max_rel, largest)
    s.below_1e3 += int(np.count_nonzero(np.less(rel, 0.001, out=mask)))
    s.below_5e3 += int(np.count_nonzero(np.less(rel, 0.005, out=mask)))


def _relative(n: np.ndarray, b: np.ndarray, buf: _Buffers, length: int) -> tuple[np.ndarray, float]:
    """msprobe's relative error |(n - b) / b| (get_relative_err) and its largest; where the bench is zero, the
    dtype's epsilon is added on both sides: |(n + eps) - eps| / eps there. A chunk without a zero, nearly all,
    is known by the finite quotients it holds."""
    out = buf.rel[:length]
    np.abs(np.divide(np.subtract(n, b, out=out), b, out=out), out=out)
    largest = float(out.max())
    if math.isfinite(largest) or b.all():
        return out, largest
    zero, at_zero = np.equal(b, 0, out=buf.mask[:length]), buf.zn[:length]
    eps = np.finfo(n.dtype).eps
    np.add(n, eps, out=at_zero, where=zero)
    np.subtract(at_zero, eps, out=at_zero, where=zero)
    np.divide(at_zero, eps, out=at_zero, where=zero)
    np.abs(at_zero, out=out, where=zero)
    return out, float(out.max())


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """A float64 dot product that BLAS computes on the calling thread: numpy's OpenBLAS starts its own threads
    for more than 10,000 elements, and they spin on after it, against the pass's (several times slower on two
    busy cores). Up to that, BLAS's sum over the whole tensor, as msprobe's, to its last digit; beyond, summed
    by rows and chunks, the last of a distance's 17 printed digits may differ from msprobe's, whose own last
    digits change with the number of threads BLAS runs."""
    if x.size <= _ROW:
        return float(np.dot(x, y))
    whole = x.size - x.size % _ROW
    total = float(np.matmul(x[:whole].reshape(-1, 1, _ROW), y[:whole].reshape(-1, _ROW, 1)).sum())
    return total + float(np.dot(x[whole:], y[whole:]))
