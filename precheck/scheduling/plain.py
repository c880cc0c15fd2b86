"""A result as plain data, JSON text, and back: how a case's result crosses from a Dask worker to this process.

A worker that could hand this process a pickle could run code in it (the training process, with
``precheck record --check``): a pickle is a program. So a worker sends only JSON text of the result's values, and
this process rebuilds the result from it field by field, each of the type the result declares, a status or a
reason only among its known values, for the case it asked about, and never unpickles anything. The compared and
input tensors a run keeps with ``keep_tensors`` do not cross: they stay on the worker.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from precheck.core.comparison import Comparison, Metrics
from precheck.core.reasons import Reason
from precheck.results import ApiResult, DetailRow, Direction, Recorded, Status

__all__ = ["Refused", "from_plain", "to_plain"]

_KEPT_AWAY = {"target", "golden", "inputs"}  # tensors: never sent
_ENUMS = {"Status": Status, "Reason": Reason, "Direction": Direction}
_NESTED = {"Metrics": Metrics, "Comparison": Comparison, "DetailRow": DetailRow}
_LONGEST = 64 << 20  # characters of one case's result: far more than its rows, far less than a tensor


class Refused(ValueError):
    """A worker's answer that is not a result of the case it was sent: its one line says what is wrong."""


def to_plain(result: ApiResult) -> str:
    """``result``'s values as JSON text, without the tensors it may keep."""
    return json.dumps(_values(result))


def _values(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _values(getattr(value, f.name)) for f in dataclasses.fields(value) if f.name not in _KEPT_AWAY}
    if isinstance(value, (list, tuple)):
        return [_values(v) for v in value]
    return value


def from_plain(text: Any, case: Recorded) -> ApiResult:
    """The result a worker sent for ``case``, rebuilt from JSON text; Refused when it is anything else."""
    if type(text) is not str:
        raise Refused(f"not JSON text but a {type(text).__name__}")
    if len(text) > _LONGEST:
        raise Refused(f"{len(text)} characters, more than {_LONGEST}")
    try:
        data = json.loads(text)
    except ValueError as e:
        raise Refused(f"not JSON: {e}") from None
    result = _build(ApiResult, data, "result")
    if (result.name, result.order) != (case.name, case.order):
        raise Refused(f"the result of {result.name[:200]!r} (order {result.order}), not of this call")
    return result


def _build(kind: type, data: Any, where: str) -> Any:
    """A ``kind`` (a result's dataclass) from a JSON object with exactly its fields, each as its annotation says."""
    wanted = {f.name: f.type for f in dataclasses.fields(kind) if f.name not in _KEPT_AWAY}
    if not isinstance(data, dict) or set(data) != set(wanted):
        got = sorted(data)[:20] if isinstance(data, dict) else type(data).__name__
        raise Refused(f"{where}: not the fields of a {kind.__name__} ({got})")
    return kind(**{name: _field(str(hint), data[name], f"{where}.{name}") for name, hint in wanted.items()})


def _field(hint: str, value: Any, where: str) -> Any:
    """``value`` as the annotation ``hint`` (a dataclass field's, as written) declares it."""
    if hint.endswith(" | None"):
        return None if value is None else _field(hint.removesuffix(" | None"), value, where)
    if hint in _ENUMS and type(value) is str and value in set(_ENUMS[hint]):
        return _ENUMS[hint](value)
    if hint in _NESTED:
        return _build(_NESTED[hint], value, where)
    if hint in ("str", "int", "bool") and type(value).__name__ == hint:
        return value
    if hint == "float" and type(value) in (int, float):
        return float(value)
    if hint in ("tuple[int, ...]", "list[DetailRow]") and isinstance(value, list):
        item = hint.removeprefix("tuple[").removeprefix("list[").removesuffix(", ...]").removesuffix("]")
        items = [_field(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if hint.startswith("tuple") else items
    raise Refused(f"{where}: {type(value).__name__} {str(value)[:80]!r} is not a {hint}")
