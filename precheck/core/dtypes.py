"""What the grader needs to know of a dtype, by its name (``torch.float16``), so that judging metrics read from a
CSV needs no torch: whether it is floating or complex, its size, its real counterpart. A ``torch.dtype`` is named
by ``str()``; tests/test_standards.py holds this table against torch's own dtypes.
"""

from __future__ import annotations

from typing import Any

# name -> (bytes an element takes, kind): "f" floating, "c" complex, "o" other (integers, bool, bits, quantized).
_DTYPES = {
    **{f"torch.{n}": (1, "f") for n in ("float4_e2m1fn_x2", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2")},
    **{f"torch.{n}": (1, "f") for n in ("float8_e5m2fnuz", "float8_e8m0fnu")},
    "torch.float16": (2, "f"),
    "torch.bfloat16": (2, "f"),
    "torch.float32": (4, "f"),
    "torch.float64": (8, "f"),
    "torch.complex32": (4, "c"),
    "torch.complex64": (8, "c"),
    "torch.complex128": (16, "c"),
    **{f"torch.{n}": (1, "o") for n in ("bool", "bits8", "bits1x8", "bits2x4", "bits4x2", "qint8", "quint8")},
    **{f"torch.{n}": (1, "o") for n in ("quint2x4", "quint4x2", "int8", "uint8")},
    **{f"torch.{p}int{b}": (1, "o") for p in ("", "u") for b in range(1, 8)},
    **{f"torch.{p}int{b}": (b // 8, "o") for p in ("", "u") for b in (16, 32, 64)},
    "torch.bits16": (2, "o"),
    "torch.qint32": (4, "o"),
}
_REAL = {"torch.complex32": "torch.float16", "torch.complex64": "torch.float32", "torch.complex128": "torch.float64"}
# MindSpore's spelling of the dtypes its dumps record.
MINDSPORE = {
    "Float16": "torch.float16",
    "Float32": "torch.float32",
    "Float64": "torch.float64",
    "BFloat16": "torch.bfloat16",
    "Int8": "torch.int8",
    "Int16": "torch.int16",
    "Int32": "torch.int32",
    "Int64": "torch.int64",
    "UInt8": "torch.uint8",
    "Bool": "torch.bool",
    "Complex64": "torch.complex64",
    "Complex128": "torch.complex128",
}
NAMES = tuple(_DTYPES)


def canonical(text: str) -> str | None:
    """The torch name of a dtype as a dump or a CSV spells it (torch's or MindSpore's), or None."""
    name = MINDSPORE.get(text, text)
    return name if name in _DTYPES else None


def is_floating(dtype: Any) -> bool:
    return _DTYPES.get(str(dtype), (0, ""))[1] == "f"


def is_complex(dtype: Any) -> bool:
    return _DTYPES.get(str(dtype), (0, ""))[1] == "c"


def real(dtype: Any) -> str:
    """A complex dtype's component (complex64 -> float32); any other dtype's own name."""
    return _REAL.get(str(dtype), str(dtype))


def itemsize(dtype: Any) -> int:
    return _DTYPES.get(str(dtype), (4, ""))[0]


def computed_in(ran_in: Any, held: Any) -> Any:
    """The dtype a floating value held in ``held`` was computed in, when autocast ran its call in ``ran_in`` and that
    is narrower (an fp32 weight's gradient computed in fp16 and cast back); None otherwise. The grader holds such a
    value to ``ran_in``'s precision and range, and the honest kernel's value is rounded to it first."""
    if ran_in is None or held is None or not is_floating(held) or itemsize(ran_in) >= itemsize(held):
        return None
    return ran_in
