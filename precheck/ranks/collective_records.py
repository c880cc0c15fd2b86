"""What a collective's record says (``Distributed.all_reduce.0`` ...): where each argument is, its value as given
and once the call had run, the group of ranks that took part, and how many ranks the step's records show.

A collective's rows are graded among the members of the group its record names (``group_ranks``; a Megatron step
all_reduces in {0,1} and in {2,3} under one name), else among every rank of the world. A step where only some
ranks dumped (msprobe's ``"rank": [0, 1]``) shows its world only in its records: an all_gather's list of 4, an
all_gather_into_tensor's output 4 times its input.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precheck.core.reasons import Reason
from precheck.dump.cannot_grade import CannotGrade
from precheck.dump.distributed_args import global_rank, group_members, readable, recorded_input, recorded_output
from precheck.dump.index import RecordError, RecordIndex
from precheck.escape import clip

__all__ = [
    "PLACES",
    "NoValues",
    "Rank",
    "agreed",
    "members",
    "reduce_op",
    "root",
    "started_async",
    "world_shown",
]


@dataclass(frozen=True)
class Rank:
    """One rank's dump, as the check of its collectives reads it: its records, and the place of each case in
    the rank's run (its row's order)."""

    rank: int
    index: RecordIndex | None  # None for a rank that recorded no collective
    orders: dict[str, int]
    _at: dict[str, int] = field(default_factory=dict, compare=False, repr=False)  # record key -> its place

    def record(self, name: str) -> dict:
        """The forward record of the collective ``name``; CannotGrade when it is not one precheck can read."""
        key = f"{name}.forward"
        assert self.index is not None, "a rank with collectives has their records"
        if not self._at:
            self._at.update((k, i) for i, k in enumerate(self.index.keys))
        try:
            if key not in self._at:
                raise ValueError(f"no record {key}")
            raw = self.index.read(self._at[key])
        except (ValueError, RecordError) as e:
            raise CannotGrade(f"rank {self.rank}: {key}: {clip(str(e))}", Reason.SKIP_BAD_RECORD) from None
        if not isinstance(raw, dict):
            raise CannotGrade(f"rank {self.rank}: {key} is not a record", Reason.SKIP_BAD_RECORD)
        return raw

    @property
    def data_dir(self) -> Path:
        assert self.index is not None, "a rank with collectives has their records"
        return self.index.data_dir


# the most ranks a record may show the step's world to have: a record showing more (a group_ranks of 10**9) widens
# no default group to that many members, each a row's missing rank (its own row says what is wrong with it)
_LARGEST_WORLD = 1 << 16

_Places = dict[str, tuple[int, str]]
_INTO = {"output": (0, "output_tensor"), "input": (1, "input_tensor"), "group": (2, "group")}
_SCATTER_INTO = {"output": (0, "output"), "input": (1, "input"), "op": (2, "op"), "group": (3, "group")}
# API -> the place of each argument the check reads (position, keyword), as torch.distributed's signature has it
PLACES: dict[str, _Places] = {
    "all_reduce": {"tensor": (0, "tensor"), "op": (1, "op"), "group": (2, "group")},
    "broadcast": {"tensor": (0, "tensor"), "src": (1, "src"), "group": (2, "group")},
    "reduce": {"tensor": (0, "tensor"), "dst": (1, "dst"), "op": (2, "op"), "group": (3, "group")},
    "gather": {"tensor": (0, "tensor"), "gather_list": (1, "gather_list"), "dst": (2, "dst"), "group": (3, "group")},
    "scatter": {"tensor": (0, "tensor"), "scatter_list": (1, "scatter_list"), "src": (2, "src"),
                "group": (3, "group")},
    "all_to_all": {"output": (0, "output_tensor_list"), "input": (1, "input_tensor_list"), "group": (2, "group")},
    "all_to_all_single": {"output": (0, "output"), "input": (1, "input"), "output_split": (2, "output_split_sizes"),
                          "input_split": (3, "input_split_sizes"), "group": (4, "group")},
    "all_gather": {"tensor_list": (0, "tensor_list"), "tensor": (1, "tensor"), "group": (2, "group")},
    "reduce_scatter": {"output": (0, "output"), "input": (1, "input_list"), "op": (2, "op"), "group": (3, "group")},
    **dict.fromkeys(("all_gather_into_tensor", "_all_gather_base", "all_gather_single"), _INTO),
    **dict.fromkeys(("reduce_scatter_tensor", "_reduce_scatter_base", "reduce_scatter_single"), _SCATTER_INTO),
}  # fmt: skip


class NoValues(CannotGrade):
    """A collective's records hold statistics, not tensors (a statistics dump): no golden, but what the
    statistics still say can be checked (precheck.ranks.collective_stats)."""


def reduce_op(raw: Any) -> str:
    """The name of a recorded reduce op (``{"value": "RedOpType.SUM"}``: SUM; none given: SUM, torch's default);
    empty where the record holds something else."""
    if raw is None:
        return "SUM"
    return str(raw.get("value", "")).rsplit(".", 1)[-1] if isinstance(raw, dict) else ""


# API -> its root's global-rank argument, that root as a rank of the group (torch 2.6+'s ``group_src``/``group_dst``,
# which torch.distributed.pipelining passes), and torch's root where neither is given (gather and scatter: global
# rank 0; a broadcast or a reduce needs one)
_ROOTS: dict[str, tuple[str, tuple[int, str], int | None]] = {
    "broadcast": ("src", (4, "group_src"), None),
    "reduce": ("dst", (5, "group_dst"), None),
    "gather": ("dst", (5, "group_dst"), 0),
    "scatter": ("src", (5, "group_src"), 0),
}


def root(api: str, record: dict) -> Any:
    """The global rank of a rooted collective's root (a broadcast's src, a gather's dst) as its record names it:
    ``src=``, ``group_src=`` resolved through the record's group, or torch's default; what else is recorded as it
    is, for the caller's message."""
    arg, group_place, default = _ROOTS[api]
    return global_rank(record, PLACES[api][arg], group_place, PLACES[api]["group"], default)


def started_async(api: str, record: dict) -> bool:
    """Whether the call was started with ``async_op=True`` (every collective's argument after its group)."""
    flag = recorded_input(record, PLACES[api]["group"][0] + 1, "async_op")
    return (flag.get("value") if isinstance(flag, dict) else flag) is True


def members(name: str, record: dict, world: int) -> Sequence[int]:
    """The ranks of the group a rank's record of the call names (``group_ranks``), else every rank of the world:
    never a list as long as the world (a forged folder rank999999999 makes it 10^9)."""
    group = recorded_input(record, *PLACES[name.split(".")[1]]["group"])
    if isinstance(group, dict) and isinstance(group.get("group_ranks"), list):
        return group_members(group["group_ranks"])
    return range(world)


def agreed(name: str, group: Sequence[int], groups: dict[int, Sequence[int]], missing: str,
           ranks: dict[int, Rank]) -> None:  # fmt: skip
    """CannotGrade unless every member of ``group`` recorded the call in that same group (``groups``: each rank's
    record's): a member without the call's record (its rank not dumped: ``"rank": [0, 1]`` in a job of 4) leaves
    no golden, never one from the ranks found."""
    for r, its in groups.items():
        if its == group and r not in group:
            raise CannotGrade(f"rank {r} recorded {name} in the group {_shown(group)}, which does not hold it",
                               Reason.SKIP_BAD_RECORD)  # fmt: skip
    for m, its in groups.items():  # only the ranks present are looked up: a world of 10^9 costs what the dumps hold
        if m in group and its != group:
            raise CannotGrade(
                f"rank {m} recorded {name} in the group {_shown(its)}, its peers in {_shown(group)}",
                Reason.SKIP_BAD_RECORD,
            )
    present = sum(m in group for m in groups)
    if present < len(group):
        first = next(m for m in group if m not in groups)  # at most present + 1 steps
        where = "recorded no such call" if first in ranks else f"has no dump in {missing}"
        raise CannotGrade(
            f"rank {first} {where}: the golden of a collective needs every rank's inputs "
            f"({len(group) - present} of {len(group)} ranks of its group missing)",
            Reason.SKIP_MISSING_RANK,
        )


def _shown(group: Sequence[int]) -> str:
    """A group as a message names it: its ranks, or the range of a default group as long as the world."""
    return f"ranks 0-{len(group) - 1}" if isinstance(group, range) else str(list(group))


def world_shown(read: dict[str, dict[int, Any]]) -> int:
    """The fewest ranks the step's collective records show (``read``: each call's record on each rank, or why it
    cannot be read): the ranks their groups name, and the size of the default group a call's own tensors show."""
    shown = 0
    for name, records in read.items():
        api = name.split(".")[1]
        for record in records.values():
            if not isinstance(record, dict):
                continue  # its row says what is wrong with it
            try:
                with readable(name):
                    group = members(name, record, 0)
                    size = max(group) + 1 if group else _SIZES.get(api, _no_size)(record)
            except CannotGrade:
                continue
            shown = max(shown, size if size <= _LARGEST_WORLD else 0)
    return shown


def _no_size(record: dict) -> int:
    return 0


def _value(api: str, arg: str, record: dict) -> Any:
    """Argument ``arg`` of a record of ``api`` once the call had run, else as given (msprobe writes null for an
    all_gather's list as given)."""
    done = recorded_output(record, *PLACES[api][arg])
    return recorded_input(record, *PLACES[api][arg]) if done is None else done


def _listed(api: str, arg: str) -> Callable[[dict], int]:
    """The size of a call's default group its list argument ``arg`` shows: the tensors it holds."""

    def size(record: dict) -> int:
        value = _value(api, arg, record)
        return len(value) if isinstance(value, list) else 0

    return size


def _numel(value: Any) -> int:
    shape = value.get("shape") if isinstance(value, dict) else None
    return math.prod(int(n) for n in shape) if isinstance(shape, list) else 0


def _ratio(api: str, whole: str, part: str) -> Callable[[dict], int]:
    """The size of a single-tensor collective's default group: its ``whole`` tensor's elements over its ``part``'s."""

    def size(record: dict) -> int:
        one = _numel(_value(api, part, record))
        return _numel(_value(api, whole, record)) // one if one else 0

    return size


# API -> the size of the default group its own record shows (0: none): its rows need every rank of that many
_SIZES: dict[str, Callable[[dict], int]] = {
    "all_gather": _listed("all_gather", "tensor_list"),
    "all_to_all": _listed("all_to_all", "output"),
    "reduce_scatter": _listed("reduce_scatter", "input"),
    "gather": _listed("gather", "gather_list"),
    "scatter": _listed("scatter", "scatter_list"),
    **{api: _ratio(api, "output", "input") for api in ("all_gather_into_tensor", "_all_gather_base",
                                                      "all_gather_single")},
    **{api: _ratio(api, "input", "output") for api in ("reduce_scatter_tensor", "_reduce_scatter_base",
                                                      "reduce_scatter_single")},
}  # fmt: skip
