"""Where a torch.distributed call's record holds an argument, as given and once the call had run, and which global
rank an argument names: what the cross-rank grading (precheck.ranks) and the step compare (precheck.compare.steps)
both read of a collective's or a send's record, torch-free.

msprobe records a call of torch.distributed with its arguments as given (``input_args``, ``input_kwargs``) and as
they were once the call had run (``output``: the arguments again, positional then keyword); a scalar as
``{"type": "int", "value": 1}``, a process group as a map with its ``group_ranks`` and ``group_id``. A record of
another shape is CannotGrade, never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from precheck.core.reasons import Reason
from precheck.dump.cannot_grade import CannotGrade
from precheck.escape import clip

__all__ = ["global_rank", "group_members", "readable", "recorded_input", "recorded_output"]

# what a record of another shape raises where a collective's fields are read (a dict for a list, a string rank)
_MALFORMED = (TypeError, ValueError, KeyError, IndexError, AttributeError, RuntimeError)


@contextmanager
def readable(name: str) -> Iterator[None]:
    """A record of ``name`` that is not shaped as a collective's (fields of other types, ranks' tensors that do
    not stack) is CannotGrade, its row SKIP with the reason, never the step's end."""
    try:
        yield
    except _MALFORMED as e:
        raise CannotGrade(
            f"{name}: its records are not a collective precheck reads ({type(e).__name__}: {clip(str(e))})",
            Reason.SKIP_BAD_RECORD,
        ) from None


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


def global_rank(
    record: dict, place: tuple[int, str], group_place: tuple[int, str], group_at: tuple[int, str], default: Any = None
) -> Any:
    """The global rank an argument names: given as one (``dst=3``, at ``place``), or as a rank of the record's group
    (``group_dst=1`` at ``group_place`` in the group [1, 3] at ``group_at``: rank 3; in the default group a group
    rank is the global rank), else ``default``. A value of another kind is returned as it is, for the caller's
    message; CannotGrade where the group does not hold that group rank or its ranks are not recorded."""
    given = _plain(recorded_input(record, *place))
    if given is not None:
        return given
    in_group = _plain(recorded_input(record, *group_place))
    if in_group is None:
        return default
    group = recorded_input(record, *group_at)
    if group is None or not isinstance(in_group, int) or isinstance(in_group, bool):
        return in_group
    ranks = group.get("group_ranks") if isinstance(group, dict) else None
    if not isinstance(ranks, list):
        raise CannotGrade(f"its {group_place[1]} {in_group} is a rank of a group whose ranks are not recorded",
                           Reason.SKIP_BAD_RECORD)  # fmt: skip
    members = group_members(ranks)
    if not 0 <= in_group < len(members):
        raise CannotGrade(f"its {group_place[1]} {in_group} is no rank of its group {list(members)}",
                           Reason.SKIP_BAD_RECORD)  # fmt: skip
    return members[in_group]


def _plain(raw: Any) -> Any:
    """A recorded scalar's value (``{"type": "int", "value": 1}``: 1)."""
    return raw.get("value") if isinstance(raw, dict) else raw


def group_members(recorded: list) -> tuple[int, ...]:
    """The ranks of a recorded process group. torch makes no group that names a rank twice: a record that does is
    malformed (a forged group holding rank 0 40,000 times had its golden stack 40,000 copies of one tensor)."""
    members = tuple(int(r) for r in recorded)
    if len(set(members)) < len(members):
        seen: set[int] = set()
        twice = next(r for r in members if r in seen or seen.add(r))
        raise CannotGrade(
            f"its group_ranks name rank {twice} more than once ({len(members)} members, {len(set(members))} "
            f"distinct): no process group does",
            Reason.SKIP_BAD_RECORD,
        )
    return members
