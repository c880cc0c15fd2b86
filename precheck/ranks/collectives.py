"""Collectives (``Distributed.all_reduce.0`` ...) graded across the ranks of one step.

One rank's record of a collective cannot be replayed alone: its result depends on what every other rank sent. The
ranks' records together hold all of it, so a step folder of ranks is graded as one: the golden of a collective is
the float64 collective of every rank's recorded inputs, and each rank's recorded output is that rank's target
(msprobe records a collective's arguments once it has run as its ``output``: it works in place). A rank whose dump
or record is missing leaves nothing to compute the golden from: each other rank's row is SKIP and says which.
The ranks that take part are the recorded process group's (``group_ranks``), else every rank of the world.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from precheck.core.older_python import zip_strict
from precheck.core.reasons import Reason
from precheck.core.status import ERROR
from precheck.dump.cannot_grade import CannotGrade
from precheck.dump.decode import TensorSpec, clip, decode_value
from precheck.dump.distributed_args import readable, recorded_input, recorded_output
from precheck.dump.index import RecordError
from precheck.dump.record_names import COLLECTIVES, is_collective
from precheck.execution.options import CheckOptions
from precheck.grader.rows import RowGrader
from precheck.inputs.builder import InputError, load_tree
from precheck.ranks.all_to_all_splits import incoming
from precheck.ranks.collective_records import (
    PLACES,
    NoValues,
    Rank,
    agreed,
    members,
    reduce_op,
    root,
    started_async,
    world_shown,
)
from precheck.ranks.collective_stats import statistics_rows
from precheck.results import ApiResult, graded, skipped
from precheck.walk import flatten

__all__ = ["Rank", "grade_collectives", "is_collective", "readable"]

_NOT_TENSORS = frozenset({"op", "group", "src", "dst", "output_split", "input_split"})  # arguments, by PLACES' names

_OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "SUM": lambda x: x.sum(0),
    "AVG": lambda x: x.mean(0),
    "PRODUCT": lambda x: x.prod(0),
    "MIN": lambda x: x.amin(0),
    "MAX": lambda x: x.amax(0),
}


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
    ``ranks`` and any missing; a record that shows more, an all_gather's list of 4 in a step of 2 dumps, widens
    it); ``missing`` says where a missing rank's dump was looked for."""
    out: dict[int, dict[str, ApiResult]] = {r: {} for r in ranks}
    names = sorted({n for rank in ranks.values() for n in rank.orders if is_collective(n)})
    read = {name: _read(name, ranks) for name in names}  # each record read once
    world = max(world, world_shown(read))
    for name in names:
        for r, result in _grade_call(name, ranks, read[name], world, missing, options).items():
            out[r][name] = result
    return out


def _read(name: str, ranks: dict[int, Rank]) -> dict[int, dict | CannotGrade]:
    """Each rank's record of the collective ``name``, or why it cannot be read."""
    found: dict[int, dict | CannotGrade] = {}
    for r, rank in ranks.items():
        if name in rank.orders:
            try:
                with readable(name):
                    found[r] = rank.record(name)
            except CannotGrade as e:
                found[r] = e
    return found


def _grade_call(
    name: str, ranks: dict[int, Rank], read: dict[int, dict | CannotGrade], world: int, missing: str,
    options: CheckOptions,
) -> dict[int, ApiResult]:  # fmt: skip
    """The rows of the collective ``name`` on the ranks that recorded it (``read``: their records): each graded
    among the members of the group its own record names (a Megatron step all_reduces in {0,1} and in {2,3} under
    one name)."""
    present = list(read)
    try:
        records = {r: _record(record) for r, record in read.items()}
        with readable(name):
            groups = {r: members(name, records[r], world) for r in present}
    except CannotGrade as e:
        return {r: _skipped(ranks[r], name, e) for r in present}
    found: dict[int, ApiResult] = {}
    for group in dict.fromkeys(groups.values()):
        graded_here = [r for r in present if groups[r] == group]
        try:
            with readable(name):
                agreed(name, group, groups, missing, ranks)
                calls = _Calls(name, {m: ranks[m] for m in group}, {m: records[m] for m in group}, options)
                _sized(calls, options)
        except CannotGrade as e:
            found.update({r: _skipped(ranks[r], name, e) for r in graded_here})
        else:
            found.update({r: calls.graded(r) for r in graded_here})
    return found


def _sized(calls: _Calls, options: CheckOptions) -> None:
    """Refuse a collective whose golden needs more than --max-memory before any of its tensors is loaded: every
    member's recorded tensors, each loaded, widened to 64 bits and stacked with the others'."""
    limit = options.max_memory
    if limit is None:
        return
    places = [p for arg, p in PLACES[calls.api].items() if arg not in _NOT_TENSORS]
    try:
        values = [
            get(calls.records[m], *p)
            for m in calls.members
            for p in places
            for get in (recorded_input, recorded_output)
        ]
        specs = flatten(decode_value(values, calls.name))
    except RecordError as e:
        raise CannotGrade(clip(str(e)), Reason.SKIP_BAD_RECORD) from None
    need = sum(s.numel * (s.dtype.itemsize + 16) for s in specs if isinstance(s, TensorSpec))
    if need > limit:
        raise CannotGrade(
            f"its golden needs about {need / 2**30:.3g} GiB ({len(calls.members)} ranks' tensors in float64), "
            f"above --max-memory {limit / 2**30:.3g} GiB",
            Reason.SKIP_MEMORY,
        )


def _record(read: dict | CannotGrade) -> dict:
    if isinstance(read, CannotGrade):
        raise read
    return read


def _skipped(rank: Rank, name: str, e: CannotGrade) -> ApiResult:
    return skipped(CallRecord(name, rank.orders[name]), str(e), e.code)


class _Calls:
    """One collective's records on every member of one group, their tensors loaded as they are asked for."""

    def __init__(self, name: str, ranks: dict[int, Rank], records: dict[int, dict], options: CheckOptions) -> None:
        self.name, self.ranks, self.options = name, ranks, options
        self.api = name.split(".")[1]
        self.records = records
        self.members = list(ranks)
        self._inputs: dict[tuple[int, str], Any] = {}  # each member's inputs loaded once, not once per rank graded
        self._shared: dict[str, Any] = {}  # what every rank's statistics rows read, read once

    def raw(self, r: int, arg: str) -> Any:
        return recorded_input(self.records[r], *PLACES[self.api][arg])

    def input(self, r: int, arg: str) -> Any:
        """The loaded tensors of argument ``arg`` as rank ``r`` passed it (read from its files once)."""
        if (r, arg) not in self._inputs:
            self._inputs[(r, arg)] = self._load(r, self.raw(r, arg), f"rank {r}: input {arg}")
        return self._inputs[(r, arg)]

    def output(self, r: int, arg: str) -> Any:
        """The loaded tensors of argument ``arg`` of rank ``r`` once the collective had run (its target)."""
        done = recorded_output(self.records[r], *PLACES[self.api][arg])
        if done is None:
            raise CannotGrade(f"rank {r}: the record holds no output of {arg} (recorded by an older recorder?)")
        return self._load(r, done, f"rank {r}: output {arg}")

    def op(self, r: int) -> Callable[[torch.Tensor], torch.Tensor]:
        name = reduce_op(self.raw(r, "op"))
        if name not in _OPS:
            raise CannotGrade(f"reduce op {clip(repr(name), 40)} is not one precheck computes", Reason.SKIP_UNSUPPORTED)
        return _OPS[name]

    def _load(self, r: int, raw: Any, where: str) -> Any:
        return load(self.ranks[r], raw, where)

    def graded(self, r: int) -> ApiResult:
        """Rank ``r``'s row: its outputs against the collective of every member's inputs, in float64; SKIP where
        this rank's record holds nothing to grade (a reduce's rank other than its dst)."""
        try:
            with readable(self.name):
                targets, goldens = _GOLDENS[self.api](self, r)
                honest = [g.to(t.dtype) if isinstance(g, torch.Tensor) and isinstance(t, torch.Tensor) else g
                          for t, g in zip_strict(targets, goldens)]  # fmt: skip
        except NoValues as e:
            return self._statistics(r, e)
        except CannotGrade as e:
            return skipped(CallRecord(self.name, self.ranks[r].orders[self.name]), str(e), e.code)
        o = self.options
        rows = RowGrader(o.standard, o.cosine, o.max_abs, "").outputs(
            self.name, targets, goldens, None, lambda i, _: honest[i]
        )
        result = graded(CallRecord(self.name, self.ranks[r].orders[self.name]), rows, [], "")
        if result.forward == ERROR and started_async(self.api, self.records[r]):
            return skipped(
                CallRecord(self.name, result.order), self._unfinished(r, targets), Reason.SKIP_RECORDED_OUTPUT
            )
        return result

    def _statistics(self, r: int, no_values: NoValues) -> ApiResult:
        """Rank ``r``'s rows from a statistics dump: what the group's statistics still say of its output."""
        call = CallRecord(self.name, self.ranks[r].orders[self.name])
        try:
            with readable(self.name):
                rows = statistics_rows(self.name, r, self.members, self.records, self._shared)
        except CannotGrade as e:
            return skipped(call, f"{no_values}; {e}", e.code)
        return graded(call, rows, [], "; ".join(f"{row.short_name}: {row.comparison.message}" for row in rows))

    def _unfinished(self, r: int, targets: list) -> str:
        """Why an async call's output that is not the collective of the inputs is no error: it may be the buffer
        before the collective completed, which is what msprobe records where the program never calls wait()."""
        try:
            mine = flatten(self.input(r, _IN_PLACE[self.api])) if self.api in _IN_PLACE else []
        except CannotGrade:
            mine = []
        same = len(mine) == len(targets) and all(
            isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
            for a, b in zip_strict(mine, targets)
        )
        state = "it is still this rank's input: the collective had not run" if same else (
            "it is not the collective of the ranks' inputs")  # fmt: skip
        return (
            f"async_op=True and the recorded output is unfinished or wrong ({state}). msprobe records an async "
            "collective's output at Work.wait(), but where the program waits otherwise (the Work's future, a "
            "barrier, a stream) at the call's return, before the collective completed; such a record cannot tell "
            "an unfinished buffer from a wrong result, so it is not graded: record the step with precheck record, "
            "which reads the output once the collective completes, or wait() on the Work"
        )


# API -> its argument that the collective overwrites in place: its value before is the rank's own input
_IN_PLACE = {"all_reduce": "tensor", "broadcast": "tensor", "reduce": "tensor"}


def load(rank: Rank, raw: Any, where: str) -> Any:
    """The tensors of the recorded value ``raw`` of ``rank``, loaded from its files; CannotGrade saying why not."""
    try:
        tree = decode_value(raw, where)
        if any(isinstance(s, TensorSpec) and s.data_name is None for s in flatten(tree)):
            raise NoValues(f"{where}: no tensor file (a statistics dump): a collective needs its values")
        return load_tree(tree, rank.data_dir)
    except RecordError as e:
        raise CannotGrade(clip(str(e)), Reason.SKIP_BAD_RECORD) from None
    except InputError as e:
        raise CannotGrade(f"{where}: {e}", e.reason) from None


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
    """The rank named by argument ``arg`` (a broadcast's src, a reduce's dst) as rank ``r`` recorded it: given as a
    global rank, as a rank of its group (``group_src=``) or by torch's default (a gather's dst: rank 0)."""
    peer = root(c.api, c.records[r])
    if peer not in c.members:
        raise CannotGrade(f"{c.api} {arg} rank {clip(repr(peer), 40)}, which is not in the group {c.members}")
    return peer


def _copy(source: torch.Tensor) -> torch.Tensor:
    """The golden of a tensor a collective only moves: the sent values, float64 where they are floating."""
    return _wide(source) if source.is_floating_point() else source


def _broadcast(c: _Calls, r: int) -> tuple[list, list]:
    return [c.output(r, "tensor")], [_copy(c.input(_peer(c, r, "src"), "tensor"))]


def _reduce(c: _Calls, r: int) -> tuple[list, list]:
    dst = _peer(c, r, "dst")
    if r != dst:
        raise CannotGrade(
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
    """Rank ``r``'s j-th output tensor is member j's input tensor for ``r``, whatever the sizes."""
    i, targets = c.members.index(r), list(c.output(r, "output"))
    sent = [c.input(m, "input") for m in c.members]
    for m, tensors in [(r, targets), *zip_strict(c.members, sent)]:
        if len(tensors) != len(c.members):
            raise CannotGrade(f"rank {m}: its all_to_all list holds {len(tensors)} tensors, its group "
                               f"{len(c.members)} ranks", Reason.SKIP_BAD_RECORD)  # fmt: skip
    return targets, [_copy(tensors[i]) for tensors in sent]


def _all_to_all_single(c: _Calls, r: int) -> tuple[list, list]:
    """Rank ``r``'s output is the rows each member cut for it (its input_split_sizes, equal chunks where none),
    in rank order: MoE's dispatch and combine, uneven splits and empty chunks included."""
    target = c.output(r, "output")
    chunks = incoming(c.members, c.records, r)
    parts = [_copy(c.input(k.sender, "input")).reshape(-1, k.width)[k.start : k.start + k.rows] for k in chunks]
    return [target], [torch.cat(parts).reshape(target.shape)]


def _all_gather(c: _Calls, r: int) -> tuple[list, list]:
    targets = list(c.output(r, "tensor_list"))
    if len(targets) != len(c.members):
        raise CannotGrade(f"rank {r}: its all_gather list holds {len(targets)} tensors, its group {len(c.members)} "
                           "ranks", Reason.SKIP_BAD_RECORD)  # fmt: skip
    gathered = [_wide(c.input(m, "tensor")) for m in c.members]
    return targets, [g if t.is_floating_point() else g.to(t.dtype) for t, g in zip_strict(targets, gathered)]


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


# API -> its golden: rank -> (targets, goldens)
_GOLDENS: dict[str, Callable[[_Calls, int], tuple[list, list]]] = {
    "all_reduce": _all_reduce,
    "broadcast": _broadcast,
    "reduce": _reduce,
    "gather": _gather,
    "scatter": _scatter,
    "all_to_all": _all_to_all,
    "all_to_all_single": _all_to_all_single,
    "all_gather": _all_gather,
    "reduce_scatter": _reduce_scatter,
    **dict.fromkeys(("all_gather_into_tensor", "_all_gather_base", "all_gather_single"), _all_gather_into),
    **dict.fromkeys(("reduce_scatter_tensor", "_reduce_scatter_base", "reduce_scatter_single"), _reduce_scatter_into),
}
assert set(_GOLDENS) == set(PLACES) == COLLECTIVES, "record_names.COLLECTIVES names the collectives graded here"
