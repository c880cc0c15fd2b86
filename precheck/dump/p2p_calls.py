"""What a send's or a receive's record says: each message end it holds (``Op``), the channel its message travels
on, and its tensor as given and once the call had run.

A plain call (``send``, ``recv``, ``isend``, ``irecv``) holds one end; a ``batch_isend_irecv`` holds one per
P2POp of its list, which msprobe writes as ``{"class_type": "torch.distributed.P2POp", "tensor": ..., "op":
"isend"|"irecv", "peer": R, "tag": T, "group_id": ...}`` (``peer`` a global rank). Messages between two ranks in
one process group with one tag arrive in the order they were sent, so a channel is (group, sender, receiver, tag).
Torch 2.6+ names a peer by its rank in the group (``group_dst=1``, as torch.distributed.pipelining does): it is
resolved through the record's group to the global rank. A group is known by msprobe's ``group_id`` (the crc32 of
its ranks as a Python list), which a P2POp carries and a ProcessGroup argument carries beside its ``group_ranks``;
the default group (a record's ``group`` null) is the world's ranks.

The k-th receive of a channel on its receiver is the k-th send of that channel on its sender (``Channels``): how
run_ut's step pairs a receive with the send it grades it against (precheck.ranks.p2p), and how the step compare
follows a divergence from one rank to the next (precheck.compare.steps), never by which tensor looks alike.
Torch-free: the compare imports no torch.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from precheck.core.older_python import zip_strict
from precheck.core.reasons import Reason
from precheck.dump.cannot_grade import CannotGrade
from precheck.dump.distributed_args import global_rank, readable, recorded_input, recorded_output
from precheck.dump.record_names import BATCH_POINT_TO_POINT, POINT_TO_POINT, is_point_to_point
from precheck.escape import clip

__all__ = ["Channel", "Channels", "Op", "ops_of", "read_calls"]

Channel = tuple[str, int, int, int]  # (group id, sender, receiver, tag)

# send/isend(tensor, dst, group, tag, group_dst) and recv/irecv(tensor, src, group, tag, group_src)
_TENSOR, _GROUP, _TAG = (0, "tensor"), (2, "group"), (3, "tag")
_OPS = (0, "p2p_op_list")  # batch_isend_irecv(p2p_op_list)
_PEER = {"dst": ((1, "dst"), (4, "group_dst")), "src": ((1, "src"), (4, "group_src"))}
_P2P_OP = "torch.distributed.P2POp"
_LARGEST_WORLD = 1 << 16  # a default group of more ranks is named, not hashed (a forged rank999999999 folder)


@dataclass(frozen=True)
class Op:
    """One end of a message: a send or a receive, a plain call's or one P2POp of a ``batch_isend_irecv``."""

    rank: int
    name: str  # its call: Distributed.isend.0
    index: int  # its place among its call's ops (0 for a plain call): its details row's output index
    sends: bool
    channel: Channel
    before: Any  # its tensor as recorded when given (msprobe writes a receive's as null)
    after: Any  # once the call had run (None where not recorded: msprobe writes none of an isend's)
    batch: bool = False
    # its tensor's items as a compare names them under the record (``input.0``, ``output.0.1.tensor``)
    items: tuple[str, str] = ("input.0", "output.0")

    @property
    def peer(self) -> int:
        return self.channel[2] if self.sends else self.channel[1]

    @property
    def where(self) -> str:
        """The op as a message names it: ``rank 0: Distributed.batch_isend_irecv.4 op 1``."""
        return f"rank {self.rank}: {self.name}" + (f" op {self.index}" if self.batch else "")


def ops_of(rank: int, name: str, record: dict, world: int) -> list[Op]:
    """The message ends of rank ``rank``'s call ``name``; CannotGrade where its record does not say which."""
    if name.split(".")[1] == BATCH_POINT_TO_POINT:
        return _batch(rank, name, record, world)
    return [_plain(rank, name, record, world)]


def read_calls(
    rank: int, names: Iterable[str], record: Callable[[str], dict], world: int
) -> dict[str, list[Op] | CannotGrade]:
    """Each send or receive among ``names`` (a rank's calls, in its run's order), read by ``record`` (a call's forward
    record, CannotGrade where it has none): its message ends, or why they cannot be read."""
    found: dict[str, list[Op] | CannotGrade] = {}
    for name in (n for n in names if is_point_to_point(n)):
        try:
            raw = record(name)
            with readable(name):
                found[name] = ops_of(rank, name, raw, world)
        except CannotGrade as e:
            found[name] = e
    return found


class Channels:
    """Which send each receive got, and which receive got each send, across a step's ranks: the k-th receive of a
    channel is the k-th send of that channel. ``orders``: each rank's calls and their places in its run."""

    def __init__(
        self, calls: dict[int, dict[str, list[Op] | CannotGrade]], orders: dict[int, dict[str, int]], missing: str
    ) -> None:
        self.orders, self.missing = orders, missing
        self.ends: dict[tuple[bool, Channel], list[Op]] = {}  # (sends, channel) -> its ops in their rank's order
        self.unread: dict[int, str] = {}  # rank -> its first send or receive not read: later places are unknown
        self.in_order: dict[int, list[Op]] = {r: [] for r in calls}
        for r, named in calls.items():
            for name, ops in sorted(named.items(), key=lambda n: orders[r][n[0]]):
                if isinstance(ops, CannotGrade):
                    self.unread.setdefault(r, name)
                    continue
                for op in ops:
                    self.ends.setdefault((op.sends, op.channel), []).append(op)
                    self.in_order[r].append(op)

    def order(self, op: Op) -> tuple[int, int]:
        """The op's place in its rank's run."""
        return self.orders[op.rank][op.name], op.index

    def _known(self, op: Op) -> None:
        """CannotGrade where a record of ``op``'s rank before it was not read: its place in its channel is unknown."""
        first = self.unread.get(op.rank)
        if first is not None and self.orders[op.rank][first] < self.orders[op.rank][op.name]:
            raise CannotGrade(f"rank {op.rank}'s {first} before {op.where} could not be read (its row says why): "
                               "which message it is in its channel is unknown", Reason.SKIP_MISSING_RANK)  # fmt: skip

    def other_end(self, op: Op) -> Op:
        """The send a receive got, or the receive that got a send; CannotGrade saying why there is none."""
        self._known(op)
        peer, channel = op.peer, op.channel
        if peer not in self.orders:
            raise CannotGrade(f"rank {peer} has no dump in {self.missing}: {op.where} is graded against its peer's",
                               Reason.SKIP_MISSING_RANK)  # fmt: skip
        k = next(i for i, o in enumerate(self.ends[(op.sends, channel)]) if o is op)
        others = self.ends.get((not op.sends, channel), [])
        if k >= len(others):
            first = self.unread.get(peer)
            raise CannotGrade(
                f"rank {peer} recorded {len(others)} {'receives from' if op.sends else 'sends to'} rank {op.rank} "
                f"(tag {channel[3]}, group {channel[0]}), so none matches {op.where}, its "
                f"{'send' if op.sends else 'receive'} number {k + 1}"
                + (f" (its {first} could not be read)" if first else ""),
                Reason.SKIP_MISSING_RANK,
            )
        self._known(others[k])
        return others[k]

    def later_messages(self, received: Op, send: Op) -> list[Op]:
        """The messages a plain irecv's record may hold in place of ``send`` (the one it got), in their sender's
        order: msprobe 26.2 rewrites a rank's last isend/irecv record when a later batch_isend_irecv's inner irecv
        completes, with what that irecv got, so a plain irecv followed on its rank by a batch's receive from the
        same peer may hold any later send of that peer to this rank (another tag's too); none otherwise."""
        if received.batch or received.sends:
            return []
        after = (
            o for o in self.in_order[received.rank] if o.batch and not o.sends and self.order(o) > self.order(received)
        )
        if not any(o.peer == received.peer for o in after):
            return []
        sent = (o for o in self.in_order.get(received.peer, []) if o.sends and o.peer == received.rank)
        return [o for o in sent if self.order(o) > self.order(send)]


def _plain(rank: int, name: str, record: dict, world: int) -> Op:
    arg = POINT_TO_POINT[name.split(".")[1]]
    peer = global_rank(record, *_PEER[arg], _GROUP)
    if not _is_rank(peer):
        anyone = " (recv from any rank: the record does not say which sent)" if peer is None and arg == "src" else ""
        raise CannotGrade(
            f"{name} names no {arg} rank (recorded {clip(repr(peer), 40)}){anyone}: which message it is is unknown",
            Reason.SKIP_MISSING_RANK,
        )
    tag = _value(recorded_input(record, *_TAG))
    if not (tag is None or _is_rank(tag)):
        raise CannotGrade(f"{name}: its tag {clip(repr(tag), 40)} is not a number", Reason.SKIP_BAD_RECORD)
    group = group_id(recorded_input(record, *_GROUP), world, name)
    sends = arg == "dst"
    channel = (group, rank, peer, tag or 0) if sends else (group, peer, rank, tag or 0)
    before, after = recorded_input(record, *_TENSOR), recorded_output(record, *_TENSOR)
    return Op(rank, name, 0, sends, channel, before, after, items=_items(record, *_TENSOR))


def _batch(rank: int, name: str, record: dict, world: int) -> list[Op]:
    """Each P2POp of a batch_isend_irecv, its tensor as given and (from the record's output, the same list once the
    call had run) after."""
    given, done = recorded_input(record, *_OPS), recorded_output(record, *_OPS)
    listed = _items(record, *_OPS)
    if not isinstance(given, list) or not given:
        raise CannotGrade(f"{name}: its list of P2POps is not recorded (recorded {clip(repr(given), 40)})",
                           Reason.SKIP_BAD_RECORD)  # fmt: skip
    if not (isinstance(done, list) and len(done) == len(given)):
        done = [None] * len(given)
    ops = []
    for i, (op, after) in enumerate(zip_strict(given, done)):
        if not (isinstance(op, dict) and op.get("class_type") == _P2P_OP):
            why = "precheck record writes a P2POp as null" if op is None else "it is not a recorded P2POp"
            raise CannotGrade(f"{name}: its op {i} is {clip(repr(op), 40)} ({why}): the batch's messages are unknown",
                               Reason.SKIP_BAD_RECORD)  # fmt: skip
        kind, peer, tag = op.get("op"), op.get("peer"), op.get("tag", 0)
        if kind not in ("isend", "irecv") or not (_is_rank(peer) and _is_rank(tag)):
            raise CannotGrade(
                f"{name}: its op {i} (op {clip(repr(kind), 20)}, peer {clip(repr(peer), 20)}, tag "
                f"{clip(repr(tag), 20)}) is not an isend or irecv with a peer rank and a tag",
                Reason.SKIP_BAD_RECORD,
            )
        assert isinstance(peer, int) and isinstance(tag, int)  # _is_rank's, for the type checker
        group = op.get("group_id")
        if not isinstance(group, str):
            group = group_id(None, world, name)  # msprobe writes the default group's id; none here: take it
        sends = kind == "isend"
        channel = (group, rank, peer, tag) if sends else (group, peer, rank, tag)
        same = isinstance(after, dict) and after.get("op") == kind and after.get("peer") == peer
        items = (f"{listed[0]}.{i}.tensor", f"{listed[1]}.{i}.tensor")
        ops.append(Op(rank, name, i, sends, channel, op.get("tensor"), after.get("tensor") if same else None, True,
                      items))  # fmt: skip
    return ops


def _items(record: dict, i: int, key: str) -> tuple[str, str]:
    """The items a compare names argument ``i`` (keyword ``key``) by, as given and once the call had run: positional
    ``input.0``, keyword ``input.tensor``; the output the arguments again, positional then keyword (``output.2``)."""
    args, kwargs = record.get("input_args") or [], record.get("input_kwargs") or {}
    if i < len(args):
        return f"input.{i}", f"output.{i}"
    at = len(args) + list(kwargs).index(key) if isinstance(kwargs, dict) and key in kwargs else i
    return f"input.{key}", f"output.{at}"


def group_id(raw: Any, world: int, name: str) -> str:
    """msprobe's id of a recorded process group (a ProcessGroup argument's ``group_id``, else the crc32 of its
    ``group_ranks``); the default group's (a null ``group``) is that of the world's ranks."""
    if isinstance(raw, dict):
        if isinstance(raw.get("group_id"), str):
            return raw["group_id"]
        ranks = raw.get("group_ranks")
        if isinstance(ranks, list):
            return _crc(str([int(r) for r in ranks]))
    elif raw is None:
        return _crc(str(list(range(world)))) if world <= _LARGEST_WORLD else f"the world of {world} ranks"
    raise CannotGrade(f"{name}: its group {clip(repr(raw), 40)} names no ranks", Reason.SKIP_BAD_RECORD)


def _crc(text: str) -> str:
    return f"{zlib.crc32(text.encode('utf-8')):08x}"


def _value(raw: Any) -> Any:
    return raw.get("value") if isinstance(raw, dict) else raw


def _is_rank(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
