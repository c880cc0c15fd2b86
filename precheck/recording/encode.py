"""A call's arguments and outputs as msprobe's dump.json spells them, and their tensor files.

The encoding is msprobe 26.2's (its PytorchDataProcessor), field for field, so that what ``precheck record``
writes is read by msprobe's tools and by precheck exactly as msprobe's own dump: a tensor is ``type, dtype, shape,
Max, Min, Mean, Norm, requires_grad`` and its ``data_name``; the statistics are computed in the tensor's own dtype
(a float64 or integer tensor has no Mean or Norm, a bool's Max is any() and Min all(), a 0-d tensor's four are
its value, an empty tensor's are null and it has no file); a number is ``{"type": "int", "value": 3}``; a dtype
or device only under the keyword that names one; anything else is null. The walk is msprobe's own (a namedtuple
is a dict by field, a structseq a list), which no other walk in precheck follows: it is the format's.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["Encoder", "copy_of", "data_names", "save_copy", "stats_of"]

MAX_DEPTH = 400  # msprobe's DUMP_MAX_DEPTH: deeper arguments are not recorded
_OBJECT_KEYS = ("dtype", "output_dtype", "device")  # keywords whose torch.dtype / torch.device is written
_MEMORY_FORMATS = {
    getattr(torch, name): name for name in ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format")
}
_SPECIAL = (bool, int, float, str, slice, type(Ellipsis), torch.Size, torch.Tensor, torch.memory_format)
_SPECIAL += (torch.dtype, torch.device, np.integer, np.floating, np.bool_, np.ndarray)


def stats_of(t: torch.Tensor) -> tuple[Any, Any, Any, Any]:
    """Max, Min, Mean, Norm of ``t`` as msprobe computes them, as Python values (None where msprobe writes null)."""
    data = t.detach()
    if data.numel() == 0 or data.device.type == "meta" or _functorch("is_batchedtensor", data):
        return None, None, None, None  # a vmap's batched tensor: no value to take outside it (msprobe's nulls)
    if data.is_complex():
        magnitude = np.abs(data.cpu().numpy())
        return np.max(magnitude).item(), np.min(magnitude).item(), np.mean(magnitude).item(), None
    if data.dtype == torch.bool:
        return bool(torch.any(data)), bool(torch.all(data)), None, None
    if data.dim() == 0:
        value = data.item()
        return value, value, value, value
    if data.is_floating_point() and data.dtype != torch.float64:
        # one copy to the host for the four (each stays in the tensor's dtype, so the values are item()'s)
        high, low, mean, norm = torch.stack(
            [torch.max(data), torch.min(data), torch.mean(data), torch.norm(data)]
        ).tolist()
        return high, low, mean, norm
    high, low = torch.stack([torch.max(data), torch.min(data)]).tolist()
    return high, low, None, None


def data_names(record: Any) -> list[str]:
    """The tensor files a record (or any part of one) names."""
    if isinstance(record, dict):
        own = [record["data_name"]] if isinstance(record.get("data_name"), str) else []
        return own + [n for v in record.values() for n in data_names(v)]
    if isinstance(record, list):
        return [n for v in record for n in data_names(v)]
    return []


class Encoder:
    """Encodes one record's values; in the tensor task every non-empty tensor is saved under ``data_dir`` as
    ``{record}.{category}.{place}.pt`` (a fresh contiguous copy, dtype and device kept, as msprobe saves it)."""

    def __init__(self, data_dir: Path | None, save: Callable[[torch.Tensor, Path], None] | None = None) -> None:
        self.data_dir = data_dir
        self._save = save or save_copy

    def values(self, value: Any, stem: str) -> Any:
        """``value`` (args, kwargs or outputs of the call ``stem``: ``Functional.linear.0.forward.input``)."""
        return self._walk(value, stem, [], 0)

    def _walk(self, value: Any, stem: str, keys: list, depth: int) -> Any:
        if depth > MAX_DEPTH:
            return None
        if isinstance(value, _SPECIAL):
            return self._leaf(value, stem, keys)
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return {f: self._walk(getattr(value, f), stem, [*keys, f], depth + 1) for f in value._fields}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = [f.name for f in dataclasses.fields(value)]
            return {f: self._walk(getattr(value, f), stem, [*keys, f], depth + 1) for f in fields}
        if isinstance(value, (list, tuple)):
            return [self._walk(v, stem, [*keys, i], depth + 1) for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {k: self._walk(v, stem, [*keys, k], depth + 1) for k, v in value.items()}
        return _distributed(value)

    def _leaf(self, value: Any, stem: str, keys: list) -> Any:
        if keys and keys[-1] in _OBJECT_KEYS:
            if isinstance(value, torch.dtype):
                return {"type": "torch.dtype", "value": str(value)}
            if keys[-1] == "device":
                return _device(value)
        if isinstance(value, torch.Tensor):
            return self._tensor(value, ".".join([stem, *map(str, keys)]))
        if isinstance(value, slice):
            return {"type": "slice", "value": [_int(v) for v in (value.start, value.stop, value.step)]}
        if isinstance(value, (bool, int, float, str)) or value is Ellipsis:
            return {"type": type(value).__name__, "value": "..." if value is Ellipsis else value}
        if isinstance(value, torch.Size):
            return {"type": "torch.Size", "value": [int(n) for n in value]}
        if isinstance(value, torch.memory_format):
            return {"type": "torch.memory_format", "format": _MEMORY_FORMATS.get(value)}
        if isinstance(value, (np.integer, np.floating, np.bool_)):
            return {"type": type(value).__name__, "value": value.item()}
        if isinstance(value, np.ndarray):
            return self._tensor(torch.from_numpy(value), ".".join([stem, *map(str, keys)]))
        return {}  # a dtype or device passed by position: msprobe writes an empty object

    def _tensor(self, t: torch.Tensor, name: str) -> dict:
        strided = t.layout == torch.strided and not t.is_nested
        # a sparse or nested tensor has no max() to take, nor always a shape: it is written without them, and the
        # user's step goes on (the recorder must never make a call fail)
        high, low, mean, norm = stats_of(_plain(t)) if strided else (None, None, None, None)
        out = {
            "type": "torch.Tensor",
            "dtype": str(t.dtype),
            "shape": list(t.shape) if strided or t.layout != torch.strided else None,
            "Max": high,
            "Min": low,
            "Mean": mean,
            "Norm": norm,
            "requires_grad": t.requires_grad,
        }
        if self.data_dir is not None and strided and t.numel() and t.device.type != "meta":
            out["data_name"] = f"{name}.pt"
            self._save(_plain(t), self.data_dir / out["data_name"])
        return out


def save_copy(t: torch.Tensor, path: Path) -> None:
    """``t`` saved as msprobe saves it: a fresh contiguous copy, so a view saves only its own elements."""
    torch.save(copy_of(t), path)


def copy_of(t: torch.Tensor) -> torch.Tensor:
    """A fresh contiguous copy of ``t``'s value, as msprobe saves it: inside torch.func.grad (vjp, jacrev) a copy
    is wrapped again, and torch.save cannot write a wrapper, so it is unwrapped before and after."""
    return _plain(_plain(t).detach().clone().contiguous())


def _plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` without functorch's grad-tracking wrappers, as msprobe unwraps them; a vmap's batched tensor stays
    (its value is not the call's: the call is not recorded, and the recorder says so)."""
    while _functorch("is_gradtrackingtensor", t):
        t = torch._C._functorch.get_unwrapped(t)
    return t


def _functorch(test: str, t: torch.Tensor) -> bool:
    """``torch._C._functorch``'s ``test`` of ``t``; False on a torch without it."""
    found = getattr(getattr(torch._C, "_functorch", None), test, None)
    return found is not None and bool(found(t))


def _distributed(value: Any) -> dict | None:
    """msprobe's records of torch.distributed's objects, which a check of a collective reads: a reduce op by its
    name (``RedOpType.MAX``), a process group by its ranks; None for any other object, as msprobe writes it."""
    dist = torch.distributed
    if not dist.is_available():
        return None
    if isinstance(value, dist.ReduceOp):
        return {"type": "torch.distributed.ReduceOp", "value": str(value)}
    if isinstance(value, dist.ProcessGroup):
        try:
            ranks = dist.get_process_group_ranks(value)
        except (RuntimeError, ValueError):  # a group this process is not in
            return {"type": "torch.ProcessGroup"}
        return {"type": "torch.ProcessGroup", "group_ranks": ranks,
                "group_id": hashlib.md5(str(ranks).encode()).hexdigest()}  # fmt: skip
    return None


def _device(value: Any) -> dict:
    if isinstance(value, torch.device):
        return {"type": "torch.device", "value": f"{value.type}:{value.index}"}
    return {"type": "torch.device", "value": value}


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None
