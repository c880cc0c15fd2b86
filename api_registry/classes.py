"""The precision-standard class of a dump API name, without building the table (no torch): what
``api_precision_compare`` needs of an API it only reads about in a CSV.

It agrees with ``lookup(name).standard`` for every name the table holds (tests/test_registry.py checks all of
them); a name the table does not hold (another torch version's API, a denied one) still gets the class of its
family, where the table gives no entry at all.
"""

from __future__ import annotations

from api_registry import catalogue

_PREFIXES = ("Functional", "Torch", "Tensor", "VF", "Aten")


def base_name(api: str) -> tuple[str, str]:
    """(prefix, name without an ATen overload): ``Aten.sum.dim_IntList`` -> (Aten, sum), as the lists name it."""
    prefix, _, name = api.partition(".")
    return prefix, name.partition(".")[0] if prefix == "Aten" else name


def api_class(api: str) -> str | None:
    """``Functional.linear`` -> matmul; ``NPU.npu_rms_norm`` -> other; None for a name of no known prefix."""
    prefix, base = base_name(api)
    if prefix == "NPU":
        return catalogue.NPU.get(base)
    if prefix not in _PREFIXES or not base:
        return None
    return catalogue.class_of(prefix, base)
