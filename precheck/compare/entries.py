"""The records of one dump as `precheck compare` sees them: every argument, output and parameter a row of its own.

A record (``Functional.linear.0.forward``, ``Module.block.up.Linear.forward.0``, ``Mint.add.3.backward``) is cut
into items named as msprobe's compare names them (``<record>.input.0``, ``<record>.input.keepdim``,
``<record>.output.0.1``, ``<record>.parameters.weight``, ``<record>.parameters_grad.bias``), each with what the dump
says of it: dtype, shape, statistics, CRC-32, data file. The dump is indexed once by precheck.dump.index (names and
byte spans, flat memory), as run_ut's is; a record is decoded from its own bytes when the compare reaches it, so a
broken record costs its own rows, worded as run_ut words it.
Nothing here imports torch.
"""

from __future__ import annotations

import functools
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from precheck.dump.index import RecordError, RecordIndex
from precheck.dump.record_names import split_key
from precheck.errors import PrecheckError

MAX_DEPTH = 32  # nesting of an argument (msprobe's own limit is lower)
_FIELDS = (  # (record field, name suffix, state) in msprobe's order: a module's parameters before its outputs
    ("input_args", ".input", "input"),
    ("input_kwargs", ".input", "input"),
    ("input", ".input", "input"),
    ("parameters", ".parameters", "parameters"),
    ("output", ".output", "output"),
)


class CompareInputError(PrecheckError):
    """A dump, a folder or a mapping that cannot be compared at all (one line, exit code 2)."""


@dataclass(frozen=True)
class Item:
    name: str
    state: str  # input, output, parameters, parameters_grad
    tensor: bool
    dtype: str | None  # as recorded: torch.float32, BFloat16, <class 'int'>; None for a None argument
    shape: str | None  # msprobe's text: "[2, 16]", "[]"
    requires_grad: str | None  # "True" / "False"
    stats: tuple[Any, Any, Any, Any]  # Max, Min, Mean, Norm (a value's own value for a non-tensor)
    md5: str | None
    data_name: str  # "-1" when the item has no file

    @property
    def dims(self) -> tuple[int, ...] | None:
        """The shape as numbers, None when it is not a tensor's."""
        if not self.tensor or self.shape is None:
            return None
        try:
            return tuple(int(n) for n in json.loads(self.shape))
        except (ValueError, TypeError):
            return None


@dataclass(frozen=True)
class Record:
    key: str
    api: str  # the key without its counter and direction: Functional.linear, Module.block.up.Linear
    direction: str
    items: tuple[Item, ...]
    problem: str | None = None  # why the record could not be read (its items are then empty)

    @property
    def inputs(self) -> tuple[Item, ...]:
        return tuple(i for i in self.items if i.state in ("input", "parameters"))

    @property
    def outputs(self) -> tuple[Item, ...]:
        return tuple(i for i in self.items if i.state in ("output", "parameters_grad"))


class DumpIndex(RecordIndex):
    """A dump's index as compare reads it: each record cut into items by :meth:`record`."""

    @functools.cached_property
    def summary_mode(self) -> str:
        """statistics, md5 or tensor: msprobe's md5 dumps are statistics dumps whose tensors carry "md5", and the
        first record tells."""
        if self.task == "tensor":
            return "tensor"
        return "md5" if self.keys and self.first_records_hold((b'"md5"',)) else "statistics"

    def record(self, i: int, f: BinaryIO) -> Record:
        """Record ``i`` cut into items; one that cannot be read is kept with its ``problem``."""
        key = self.keys[i]
        parts = split_key(key)
        api, direction = (parts[0], parts[2]) if parts else (key, "forward")
        try:
            data = self.read(i, f)
            if parts is None:
                raise ValueError(f"{key!r} is not a record name (api.N.forward / Module.path.Class.forward.N)")
            return Record(key, api, direction, tuple(record_items(key, data)))
        except (RecordError, ValueError) as e:
            reason = str(e) or type(e).__name__
            return Record(key, api, direction, (), problem=f"record {key[:120]}: {reason[:200]}")

    def records(self) -> Iterator[Record]:
        with self.file() as f:
            yield from (self.record(i, f) for i in range(len(self.keys)))


def open_dump(path: str | os.PathLike) -> DumpIndex:
    """Index a dump.json (or the folder holding it); CompareInputError names the file and what is wrong."""
    index = DumpIndex.open(path, CompareInputError)
    task = index.task
    if task not in ("tensor", "statistics"):
        raise CompareInputError(
            f"{index.path}: not an msprobe dump ('task' is {str(task)[:40]!r}, expected tensor or statistics)"
        )
    return index


def record_items(key: str, data: Any) -> list[Item]:
    """The items of one decoded record, in msprobe's order and with its names."""
    if not isinstance(data, dict):
        raise ValueError(f"a record that is {type(data).__name__}, not an object")
    parts = key.split(".")
    if "parameters_grad" in parts[-2:]:
        return _parse(data, key, "parameters_grad", 0, key)
    items: list[Item] = []
    for field, suffix, state in _FIELDS:
        if field in data:
            items += _parse(data[field], key + suffix, state, 0, key)
    return items


def _parse(data: Any, name: str, state: str, depth: int, key: str) -> list[Item]:
    if depth > MAX_DEPTH:
        raise ValueError(f"arguments nested deeper than {MAX_DEPTH} levels")
    if data is None:
        return [Item(name, state, False, None, None, None, (None,) * 4, None, "-1")]
    if isinstance(data, list):
        in_grads = state == "parameters_grad"
        return [
            i for n, d in enumerate(data) for i in _parse(d, name if in_grads else f"{name}.{n}", state, depth + 1, key)
        ]
    if isinstance(data, dict) and isinstance(data.get("type"), str):
        return [_leaf(data, name, state, key)]
    if isinstance(data, dict):
        return [i for k, d in data.items() for i in _parse(d, f"{name}.{k}", state, depth + 1, key)]
    return []


def _leaf(data: dict, name: str, state: str, key: str) -> Item:
    data_name = data.get("data_name") or "-1"
    if not isinstance(data_name, str):
        data_name = "-1"
    stem = data_name.rsplit(".", 1)[0]
    full = stem if data_name != "-1" and stem.startswith(key + ".") else name  # msprobe names a row by its file
    kind = data["type"]
    if data.get("dtype"):
        stats = tuple(data.get(k) for k in ("Max", "Min", "Mean", "Norm"))
        req = data.get("requires_grad")
        md5 = data.get("md5")
        return Item(
            full, state, True, str(data["dtype"]), _text(data.get("shape")), None if req is None else str(req),
            stats, None if md5 is None else str(md5), data_name,
        )  # fmt: skip
    value = data.get("value")
    if kind == "torch.Size":
        dtype, shape = kind, str(value)
    elif kind == "slice":
        dtype, shape = kind, f"({len(value)},)" if isinstance(value, list) else "()"
    else:
        dtype, shape = str(type(value)), "[]"
    crc = f"{zlib.crc32(str(value if value is not None else '').encode()):08x}"
    return Item(full, state, False, dtype, shape, None, (value,) * 4, crc, data_name)


def _text(shape: Any) -> str | None:
    return None if shape is None else str(shape)
