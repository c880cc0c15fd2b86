"""A call's arguments and outputs as msprobe's dump.json spells them, and their tensor files.

The encoding is msprobe 26.2's (its PytorchDataProcessor), field for field, so that what ``precheck record``
writes is read by msprobe's tools and by precheck exactly as msprobe's own dump: a tensor is ``type, dtype, shape,
Max, Min, Mean, Norm, requires_grad`` and its ``data_name``; the statistics are computed in the tensor's own dtype
(a float64 or integer tensor has no Mean or Norm, a bool's Max is any() and Min all(), a 0-d tensor's four are
its value, an empty tensor's are null and it has no file); a number is ``{"type": "int", "value": 3}``; a dtype
or device only under the keyword that names one; anything else is null. The walk is msprobe's own (a namedtuple
is a dict by field, a structseq a list), which no other walk in precheck follows: it is the format's.

A DTensor (tensor parallelism, FSDP2) is written as msprobe writes one: ``"type": "torch.distributed.tensor.DTensor"``,
the statistics, shape and file of its local shard (a plain tensor: run_ut loads it without torch.distributed), and
its ``device_mesh`` (the ranks) and ``placements`` (``{"Shard": {"dim": 0}}``, ``{"Replicate": {}}``,
``{"Partial": {"reduce_op": "sum"}}``). An AsyncCollectiveTensor, a collective's result not yet waited for, is
written with its type and shape only: reading it would wait for the collective, which the program had not done.
So is a FakeTensor (DTensor propagates shapes on them, loss_parallel's cross_entropy among its calls): it holds
no values, and reading one raised inside the call ("DataDependentOutputException"), which lost the call and said
the dump partial. A ``torch.distributed.P2POp`` (batch_isend_irecv's list: pipeline stages' activations and
gradients) is msprobe's map of its ``op``, ``peer``, ``tag``, ``group_id`` and its ``tensor`` (before: null, the
tensors a pipeline exchanges missing from its records).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import zlib
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
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # the tensor types no subclass check is needed for
DTENSOR = "torch.distributed.tensor.DTensor"  # msprobe's type names of these subclasses
ASYNC_COLLECTIVE = "torch.distributed._functional_collectives.AsyncCollectiveTensor"
FAKE = "torch._subclasses.fake_tensor.FakeTensor"


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
        p2p = _class("torch.distributed.distributed_c10d", "P2POp")
        if p2p is not None and isinstance(value, p2p):
            return self._p2p(value, ".".join([stem, *map(str, keys)]))
        return _distributed(value)

    def _p2p(self, op: Any, name: str) -> dict:
        """msprobe's record of a P2POp: its tensor (saved under the op's own place) and where it goes; a field it
        cannot read ends the map there, as msprobe's does."""
        out: dict = {"class_type": "torch.distributed.P2POp"}
        with contextlib.suppress(Exception):
            out["tensor"] = self._tensor(op.tensor, name)
            out["op"] = op.op.__name__
            out["peer"] = op.peer
            out["tag"] = op.tag
            out["group_id"] = _group_id(op.group or torch.distributed.distributed_c10d._get_default_group())
        return out

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
        kind, local, placed = ("torch.Tensor", t, {}) if type(t) in _PLAIN else _subclass(t)
        strided = local.layout == torch.strided and not local.is_nested
        # a sparse or nested tensor has no max() to take, nor always a shape: it is written without them, and the
        # user's step goes on (the recorder must never make a call fail); a pending collective's are not read
        readable = strided and not _is_async(local) and not _is_fake(local)
        plain = _plain(local)
        with _outside_transforms(plain is not local):
            high, low, mean, norm = stats_of(plain) if readable else (None, None, None, None)
        out = {
            "type": kind,
            "dtype": str(t.dtype),
            "shape": list(local.shape) if strided or local.layout != torch.strided else None,
            "Max": high,
            "Min": low,
            "Mean": mean,
            "Norm": norm,
            "requires_grad": t.requires_grad,
            **placed,
        }
        if self.data_dir is not None and readable and local.numel() and local.device.type != "meta":
            out["data_name"] = f"{name}.pt"
            with _outside_transforms(plain is not local):
                self._save(plain, self.data_dir / out["data_name"])
        return out


def _outside_transforms(unwrapped: bool) -> contextlib.AbstractContextManager:
    """Where a tensor was unwrapped from torch.func.grad's wrapper, its statistics and copy are computed with
    functorch's transforms off: on torch 2.1 an op on the unwrapped value inside grad is wrapped again, and the
    wrapper has no storage to read ("Cannot access data pointer of Tensor that doesn't have storage")."""
    guard = getattr(torch._C, "_DisableFuncTorch", None)
    return guard() if unwrapped and guard is not None else contextlib.nullcontext()


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


def _subclass(t: torch.Tensor) -> tuple[str, torch.Tensor, dict]:
    """A tensor subclass as msprobe writes it: its type name, the tensor its values are read from, and its
    placement fields (a DTensor's)."""
    dtensor = _class("torch.distributed.tensor", "DTensor") or _class("torch.distributed._tensor", "DTensor")
    if dtensor is not None and isinstance(t, dtensor):
        with torch.no_grad():
            local = t.to_local()
        return DTENSOR, local, {"device_mesh": t.device_mesh.mesh.tolist(), "placements": _placements(t.placements)}
    if _is_async(t):
        return ASYNC_COLLECTIVE, t, {}
    if _is_fake(t):
        return FAKE, t, {}
    return "torch.Tensor", t, {}


def _placements(placements: Any) -> list[dict]:
    """msprobe's record of a DTensor's placements (a Partial whose reduce op is not a name is left out, as there)."""
    out: list[dict] = []
    for p in placements:
        if p.is_shard() and isinstance(getattr(p, "dim", None), int):
            out.append({"Shard": {"dim": p.dim}})
        elif p.is_replicate():
            out.append({"Replicate": {}})
        elif p.is_partial() and isinstance(getattr(p, "reduce_op", None), str):
            out.append({"Partial": {"reduce_op": p.reduce_op}})
    return out


def _is_async(t: torch.Tensor) -> bool:
    """Whether ``t`` is a functional collective's result not yet waited for (msprobe saves no data of one)."""
    cls = _class("torch.distributed._functional_collectives", "AsyncCollectiveTensor")
    return cls is not None and isinstance(t, cls)


def _is_fake(t: torch.Tensor) -> bool:
    """Whether ``t`` is a FakeTensor: a shape and dtype without values (msprobe saves no data of one)."""
    cls = _class("torch._subclasses.fake_tensor", "FakeTensor")
    return cls is not None and isinstance(t, cls)


def _class(module: str, name: str) -> type | None:
    """A class of a module the program has imported (none of its instances can exist otherwise), not imported
    here: torch.distributed.tensor costs a second to import."""
    return getattr(sys.modules.get(module), name, None)


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
        return {"type": "torch.ProcessGroup", "group_ranks": ranks, "group_id": _crc(ranks)}
    return None


def _group_id(group: Any) -> str:
    """msprobe's group_id of a process group: the CRC-32 of its ranks' list as 8 hex digits."""
    return _crc(torch.distributed.get_process_group_ranks(group))


def _crc(ranks: list[int]) -> str:
    return f"{zlib.crc32(str(ranks).encode()):08x}"


def _device(value: Any) -> dict:
    if isinstance(value, torch.device):
        return {"type": "torch.device", "value": f"{value.type}:{value.index}"}
    return {"type": "torch.device", "value": value}


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None
