"""Collectives (``Distributed.all_reduce.0`` ...) graded across the ranks of one step.

One rank's record of a collective cannot be replayed alone: its result depends on what every other rank sent. The
ranks' records together hold all of it, so a step folder of ranks is graded as one: the golden of a collective is
the float64 collective of every rank's recorded inputs, and each rank's recorded output is that rank's target
(msprobe records a collective's arguments once it has run as its ``output``: it works in place). A rank whose dump
or record is missing leaves nothing to compute the golden from: each other rank's row is SKIP and says which.
The ranks that take part are the recorded process group's (``group_ranks``), else every rank of the world.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from precheck.core.reasons import Reason
from precheck.dump.decode import TensorSpec, clip, decode_value
from precheck.dump.index import RecordError, RecordIndex
from precheck.dump.record_names import COLLECTIVES, is_collective
from precheck.execution.options import CheckOptions
from precheck.grader.rows import RowGrader
from precheck.inputs.builder import InputError, load_tree
from precheck.results import ApiResult, graded, skipped
from precheck.walk import flatten

__all__ = ["Rank", "grade_collectives", "is_collective", "readable"]

# what a record of another shape raises where a collective's fields are read (a dict for a list, a string rank)
_MALFORMED = (TypeError, ValueError, KeyError, IndexError, AttributeError, RuntimeError)

_NOT_TENSORS = frozenset({"op", "group", "src", "dst", "output_split", "input_split"})  # arguments, by _GOLDENS' names
_OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "SUM": lambda x: x.sum(0),
    "AVG": lambda x: x.mean(0),
    "PRODUCT": lambda x: x.prod(0),
    "MIN": lambda x: x.amin(0),
    "MAX": lambda x: x.amax(0),
}


class NotCheckable(Exception):
    """A collective's records hold no golden: its rows are SKIP with this reason and code."""

    def __init__(self, why: str, code: Reason = Reason.SKIP_INPUTS) -> None:
        super().__init__(why)
        self.code = code


@contextmanager
def readable(name: str) -> Iterator[None]:
    """A record of ``name`` that is not shaped as a collective's (fields of other types, ranks' tensors that do
    not stack) is NotCheckable, its row SKIP with the reason, never the step's end."""
    try:
        yield
    except _MALFORMED as e:
        raise NotCheckable(
            f"{name}: its records are not a collective precheck reads ({type(e).__name__}: {clip(str(e))})",
            Reason.SKIP_BAD_RECORD,
        ) from None


@dataclass(frozen=True)
class Rank:
    """One rank's dump, as the check of its collectives reads it: its records, and the place of each case in
    the rank's run (its row's order)."""

    rank: int
    index: RecordIndex | None  # None for a rank that recorded no collective
    orders: dict[str, int]
    _at: dict[str, int] = field(default_factory=dict, compare=False, repr=False)  # record key -> its place

    def record(self, name: str) -> dict:
        """The forward record of the collective ``name``; NotCheckable when it is not one precheck can read."""
        key = f"{name}.forward"
        assert self.index is not None, "a rank with collectives has their records"
        if not self._at:
            self._at.update((k, i) for i, k in enumerate(self.index.keys))
        try:
            if key not in self._at:
                raise ValueError(f"no record {key}")
            raw = self.index.read(self._at[key])
        except (ValueError, RecordError) as e:
            raise NotCheckable(f"rank {self.rank}: {key}: {clip(str(e))}", Reason.SKIP_BAD_RECORD) from None
        if not isinstance(raw, dict):
            raise NotCheckable(f"rank {self.rank}: {key} is not a record", Reason.SKIP_BAD_RECORD)
        return raw

    @property
    def data_dir(self) -> Path:
        assert self.index is not None, "a rank with collectives has their records"
        return self.index.data_dir


@dataclass(frozen=True)
class CallRecord:
    """A graded call as results.graded and skipped take it: its name and its place in its rank's run."""

    name: str
    order: int
    has_backward: bool = False


def grade_collectives(
    ranks: dict[int, Rank], world: int, missing: str, options: CheckOptions
) -> dict[int, dict[str, ApiResult]]:
    """Each rank's results of its collectives, by case name. ``world``: how many ranks the step ran (those of
    ``ranks`` and any missing); ``missing`` says where a missing rank's dump was looked for."""
    out: dict[int, dict[str, ApiResult]] = {r: {} for r in ranks}
    names = sorted({n for rank in ranks.values() for n in rank.orders if is_collective(n)})
    for name in names:
        present = [r for r, rank in ranks.items() if name in rank.orders]
        try:
            with readable(name):
                calls = _Calls(name, {r: ranks[r] for r in present}, world, options)
            absent = _absent(calls.members, ranks, name)
            if absent:
                first, count = absent
                where = "recorded no such call" if first in ranks else f"has no dump in {missing}"
                raise NotCheckable(
                    f"rank {first} {where}: the golden of a collective needs every rank's inputs "
                    f"({count} of {len(calls.members)} ranks missing)",
                    Reason.SKIP_MISSING_RANK,
                )
            with readable(name):
                _sized(calls, options)
        except NotCheckable as e:
            found = {r: skipped(CallRecord(name, ranks[r].orders[name]), str(e), e.code) for r in present}
        else:
            found = {r: calls.graded(r) for r in present}
        for r, result in found.items():
            out[r][name] = result
    return out


class _Calls:
    """One collective's records on every rank, their tensors loaded as they are asked for."""

    def __init__(self, name: str, ranks: dict[int, Rank], world: int, options: CheckOptions) -> None:
        self.name, self.ranks, self.options = name, ranks, options
        self.api = name.split(".")[1]
        self.records = {r: rank.record(name) for r, rank in ranks.items()}
        self.members = self._members(world)
        self._inputs: dict[tuple[int, str], Any] = {}  # each member's inputs loaded once, not once per rank graded

    def _members(self, world: int) -> Sequence[int]:
        place = _GOLDENS[self.api][1].get("group")
        for raw in self.records.values():
            group = recorded_input(raw, *place) if place else None
            if isinstance(group, dict) and isinstance(group.get("group_ranks"), list):
                return group_members(group["group_ranks"])
        return range(world)  # never a list as long as the world: a forged folder rank999999999 makes it 10^9

    def raw(self, r: int, arg: str) -> Any:
        return recorded_input(self.records[r], *_GOLDENS[self.api][1][arg])

    def input(self, r: int, arg: str) -> Any:
        """The loaded tensors of argument ``arg`` as rank ``r`` passed it (read from its files once)."""
        if (r, arg) not in self._inputs:
            self._inputs[(r, arg)] = self._load(r, self.raw(r, arg), f"rank {r}: input {arg}")
        return self._inputs[(r, arg)]

    def output(self, r: int, arg: str) -> Any:
        """The loaded tensors of argument ``arg`` of rank ``r`` once the collective had run (its target)."""
        done = recorded_output(self.records[r], *_GOLDENS[self.api][1][arg])
        if done is None:
            raise NotCheckable(f"rank {r}: the record holds no output of {arg} (recorded by an older recorder?)")
        return self._load(r, done, f"rank {r}: output {arg}")

    def op(self, r: int) -> Callable[[torch.Tensor], torch.Tensor]:
        raw = self.raw(r, "op")
        name = "SUM" if raw is None else str(raw.get("value", "")).rsplit(".", 1)[-1] if isinstance(raw, dict) else ""
        if name not in _OPS:
            raise NotCheckable(
                f"reduce op {clip(repr(name), 40)} is not one precheck computes", Reason.SKIP_UNSUPPORTED
            )
        return _OPS[name]

    def _load(self, r: int, raw: Any, where: str) -> Any:
        return load(self.ranks[r], raw, where)

    def graded(self, r: int) -> ApiResult:
        """Rank ``r``'s row: its outputs against the collective of every member's inputs, in float64; SKIP where
        this rank's record holds nothing to grade (a reduce's rank other than its dst)."""
        try:
            with readable(self.name):
                targets, goldens = _GOLDENS[self.api][0](self, r)
                honest = [g.to(t.dtype) if isinstance(g, torch.Tensor) and isinstance(t, torch.Tensor) else g
                          for t, g in zip(targets, goldens, strict=True)]  # fmt: skip
        except NotCheckable as e:
            return skipped(CallRecord(self.name, self.ranks[r].orders[self.name]), str(e), e.code)
        o = self.options
        rows = RowGrader(o.standard, o.cosine, o.max_abs, "").outputs(
            self.name, targets, goldens, None, lambda i, _: honest[i]
        )
        return graded(CallRecord(self.name, self.ranks[r].orders[self.name]), rows, [], "")


def group_members(recorded: list) -> list[int]:
    """The ranks of a recorded process group. torch makes no group that names a rank twice: a record that does is
    malformed (a forged group holding rank 0 40,000 times had its golden stack 40,000 copies of one tensor)."""
    members = [int(r) for r in recorded]
    if len(set(members)) < len(members):
        seen: set[int] = set()
        twice = next(r for r in members if r in seen or seen.add(r))
        raise NotCheckable(
            f"its group_ranks name rank {twice} more than once ({len(members)} members, {len(set(members))} "
            f"distinct): no process group does",
            Reason.SKIP_BAD_RECORD,
        )
    return members


def _absent(members: Sequence[int], ranks: dict[int, Rank], name: str) -> tuple[int, int] | None:
    """The first member with no record of ``name`` and how many lack one; None where none does. Only the ranks
    present are looked up, so a world of 10^9 ranks (a forged rank number) costs what the dumps hold."""
    present = {r for r, rank in ranks.items() if name in rank.orders and r in members}
    if len(present) == len(members):
        return None
    first = next(m for m in members if m not in present)  # at most len(present) + 1 steps
    return first, len(members) - len(present)


def _sized(calls: _Calls, options: CheckOptions) -> None:
    """Refuse a collective whose golden needs more than --max-memory before any of its tensors is loaded: every
    member's recorded tensors, each loaded, widened to 64 bits and stacked with the others'."""
    limit = options.max_memory
    if limit is None:
        return
    places = [p for arg, p in _GOLDENS[calls.api][1].items() if arg not in _NOT_TENSORS]
    try:
        values = [
            get(calls.records[m], *p)
            for m in calls.members
            for p in places
            for get in (recorded_input, recorded_output)
        ]
        specs = flatten(decode_value(values, calls.name))
    except RecordError as e:
        raise NotCheckable(clip(str(e)), Reason.SKIP_BAD_RECORD) from None
    need = sum(s.numel * (s.dtype.itemsize + 16) for s in specs if isinstance(s, TensorSpec))
    if need > limit:
        raise NotCheckable(
            f"its golden needs about {need / 2**30:.3g} GiB ({len(calls.members)} ranks' tensors in float64), "
            f"above --max-memory {limit / 2**30:.3g} GiB",
            Reason.SKIP_MEMORY,
        )


def load(rank: Rank, raw: Any, where: str) -> Any:
    """The tensors of the recorded value ``raw`` of ``rank``, loaded from its files; NotCheckable saying why not."""
    try:
        tree = decode_value(raw, where)
        if any(isinstance(s, TensorSpec) and s.data_name is None for s in flatten(tree)):
            raise NotCheckable(f"{where}: no tensor file (a statistics dump): a collective needs its values")
        return load_tree(tree, rank.data_dir)
    except RecordError as e:
        raise NotCheckable(clip(str(e)), Reason.SKIP_BAD_RECORD) from None
    except InputError as e:
        raise NotCheckable(f"{where}: {e}", e.reason) from None


def recorded_output(record: dict, i: int, key: str) -> Any:
    """The recorded value of argument ``i`` (keyword ``key``) once the call had run; None where none was recorded.
    The output of a record of torch.distributed is its arguments after the call, positional then keyword."""
    args, kwargs, done = record.get("input_args") or [], record.get("input_kwargs") or {}, record.get("output") or []
    at = i if i < len(args) else len(args) + list(kwargs).index(key) if key in kwargs else len(done)
    return done[at] if at < len(done) else None


def recorded_input(record: dict, i: int, key: str) -> Any:
    """The recorded value of argument ``i`` (keyword ``key``) as the call was given it; None where not given."""
    args, kwargs = record.get("input_args") or [], record.get("input_kwargs") or {}
    return args[i] if i < len(args) else kwargs.get(key) if isinstance(kwargs, dict) else None


def _wide(t: torch.Tensor) -> torch.Tensor:
    if t.is_complex():
        return t.to(torch.complex128)
    return t.to(torch.float64) if t.is_floating_point() else t.to(torch.int64)


def _reduced(calls: _Calls, parts: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    golden = calls.op(next(iter(calls.records)))(torch.stack([_wide(p) for p in parts]))
    golden = golden.reshape(like.shape)
    return golden if golden.is_floating_point() or golden.is_complex() else golden.to(like.dtype)


def _all_reduce(c: _Calls, r: int) -> tuple[list, list]:
    target = c.output(r, "tensor")
    return [target], [_reduced(c, [c.input(m, "tensor") for m in c.members], target)]


def _peer(c: _Calls, r: int, arg: str) -> int:
    """The rank named by argument ``arg`` (a broadcast's src, a reduce's dst) as rank ``r`` recorded it."""
    peer = c.raw(r, arg)
    peer = peer.get("value") if isinstance(peer, dict) else peer
    if peer not in c.members:
        raise NotCheckable(f"{c.api} {arg} rank {clip(repr(peer), 40)}, which is not in the group {c.members}")
    return peer


def _copy(source: torch.Tensor) -> torch.Tensor:
    """The golden of a tensor a collective only moves: the sent values, float64 where they are floating."""
    return _wide(source) if source.is_floating_point() else source


def _broadcast(c: _Calls, r: int) -> tuple[list, list]:
    return [c.output(r, "tensor")], [_copy(c.input(_peer(c, r, "src"), "tensor"))]


def _reduce(c: _Calls, r: int) -> tuple[list, list]:
    dst = _peer(c, r, "dst")
    if r != dst:
        raise NotCheckable(
            f"rank {r} is not the reduce's dst (rank {dst}): a reduce leaves no defined result in its other ranks",
            Reason.SKIP_RECORDED_OUTPUT,
        )
    return _all_reduce(c, r)


def _gather(c: _Calls, r: int) -> tuple[list, list]:
    """The dst rank's list holds every member's tensor; another rank's tensor was only sent, so is unchanged."""
    if r != _peer(c, r, "dst"):
        return [c.output(r, "tensor")], [_copy(c.input(r, "tensor"))]
    return list(c.output(r, "gather_list")), [_copy(c.input(m, "tensor")) for m in c.members]


def _scatter(c: _Calls, r: int) -> tuple[list, list]:
    source = c.input(_peer(c, r, "src"), "scatter_list")[c.members.index(r)]
    return [c.output(r, "tensor")], [_copy(source)]


def _all_to_all(c: _Calls, r: int) -> tuple[list, list]:
    i = c.members.index(r)
    return list(c.output(r, "output")), [_copy(c.input(m, "input")[i]) for m in c.members]


def _all_to_all_single(c: _Calls, r: int) -> tuple[list, list]:
    if any(c.raw(m, arg) is not None for m in c.members for arg in ("output_split", "input_split")):
        raise NotCheckable("all_to_all_single with split sizes: precheck grades its even split only",
                           Reason.SKIP_UNSUPPORTED)  # fmt: skip
    target, i, n = c.output(r, "output"), c.members.index(r), len(c.members)
    golden = torch.cat([_copy(c.input(m, "input")).chunk(n)[i] for m in c.members]).reshape(target.shape)
    return [target], [golden]


def _all_gather(c: _Calls, r: int) -> tuple[list, list]:
    gathered = [_wide(c.input(m, "tensor")) for m in c.members]
    targets = list(c.output(r, "tensor_list"))
    return targets, [g if t.is_floating_point() else g.to(t.dtype) for t, g in zip(targets, gathered, strict=False)]


def _all_gather_into(c: _Calls, r: int) -> tuple[list, list]:
    target = c.output(r, "output")
    golden = torch.cat([_wide(c.input(m, "input")).reshape(-1) for m in c.members]).reshape(target.shape)
    return [target], [golden if target.is_floating_point() else golden.to(target.dtype)]


def _reduce_scatter(c: _Calls, r: int) -> tuple[list, list]:
    target, i = c.output(r, "output"), c.members.index(r)
    return [target], [_reduced(c, [c.input(m, "input")[i] for m in c.members], target)]


def _reduce_scatter_into(c: _Calls, r: int) -> tuple[list, list]:
    target, i, n = c.output(r, "output"), c.members.index(r), len(c.members)
    return [target], [_reduced(c, [c.input(m, "input").reshape(n, -1)[i] for m in c.members], target)]


# API -> (its golden: rank -> (targets, goldens)), the place of each argument it reads (position, keyword).
_GOLDENS: dict[str, tuple[Callable[[_Calls, int], tuple[list, list]], dict[str, tuple[int, str]]]] = {
    "all_reduce": (_all_reduce, {"tensor": (0, "tensor"), "op": (1, "op"), "group": (2, "group")}),
    "broadcast": (_broadcast, {"tensor": (0, "tensor"), "src": (1, "src"), "group": (2, "group")}),
    "reduce": (_reduce, {"tensor": (0, "tensor"), "dst": (1, "dst"), "op": (2, "op"), "group": (3, "group")}),
    "gather": (
        _gather,
        {"tensor": (0, "tensor"), "gather_list": (1, "gather_list"), "dst": (2, "dst"), "group": (3, "group")},
    ),  # fmt: skip
    "scatter": (
        _scatter,
        {"tensor": (0, "tensor"), "scatter_list": (1, "scatter_list"), "src": (2, "src"), "group": (3, "group")},
    ),  # fmt: skip
    "all_to_all": (
        _all_to_all,
        {"output": (0, "output_tensor_list"), "input": (1, "input_tensor_list"), "group": (2, "group")},
    ),
    "all_to_all_single": (
        _all_to_all_single,
        {
            "output": (0, "output"),
            "input": (1, "input"),
            "output_split": (2, "output_split_sizes"),
            "input_split": (3, "input_split_sizes"),
            "group": (4, "group"),
        },
    ),  # fmt: skip
    "all_gather": (_all_gather, {"tensor_list": (0, "tensor_list"), "tensor": (1, "tensor"), "group": (2, "group")}),
    **{
        api: (_all_gather_into, {"output": (0, "output_tensor"), "input": (1, "input_tensor"), "group": (2, "group")})
        for api in ("all_gather_into_tensor", "_all_gather_base")
    },
    "reduce_scatter": (
        _reduce_scatter,
        {"output": (0, "output"), "input": (1, "input_list"), "op": (2, "op"), "group": (3, "group")},
    ),
    **{
        api: (
            _reduce_scatter_into,
            {"output": (0, "output"), "input": (1, "input"), "op": (2, "op"), "group": (3, "group")},
        )
        for api in ("reduce_scatter_tensor", "_reduce_scatter_base")
    },
}
assert set(_GOLDENS) == COLLECTIVES, "record_names.COLLECTIVES names the collectives graded here"
