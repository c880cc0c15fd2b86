"""The catalogue of APIs precheck can run, keyed by their msprobe dump name (``Functional.linear``).

The table is built once per process from what the installed torch provides: the public functions of
torch.nn.functional, torch (with linalg, fft and special), the methods of torch.Tensor, torch._VF, and the ATen
operators with their overloads (``Aten.add.Tensor`` -> torch.ops.aten.add.Tensor, resolved on first use). A dump
name that is not in the table is not supported: it is never turned into an attribute lookup. ``catalogue.py``
says which precision-standard class grades each family and which names are never run (file access, global
state, hooks).

What an API is, without the table: ``catalogue`` (classes, denials), ``classes.api_class`` (a name's class),
``dropouts``, ``calls``, ``plugins``, ``unchecked`` (calls that may crash a process): these import no torch, so
the commands that only read CSVs can ask them.
The table's names below load on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from api_registry.table import ApiEntry, aten_names, lookup, registry, why_unsupported

__all__ = ["ApiEntry", "aten_names", "lookup", "registry", "why_unsupported"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("api_registry.table"), name)
