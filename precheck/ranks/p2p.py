"""Point-to-point calls (``Distributed.send.0``, ``recv``, ``isend``, ``irecv``) graded across the ranks of one step.

A receive's tensor holds what its peer sent, and the messages between two ranks arrive in the order they were
sent (per tag): the k-th receive from rank s on rank r is the k-th send to r on rank s. Its recorded output must be
that send's recorded input bit for bit: the values were copied, not computed. A send only reads its tensor, so its
row grades the tensor after the call against the one before. A receive whose sender left no dump, recorded no
matching send, or named no source (``recv(src=None)`` takes any rank's) is SKIP saying why: one rank's record alone
says nothing of what arrived.
"""

from __future__ import annotations

from typing import Any

from precheck.core.reasons import Reason
from precheck.dump.decode import clip
from precheck.dump.record_names import POINT_TO_POINT, is_point_to_point
from precheck.execution.options import CheckOptions
from precheck.grader.rows import RowGrader
from precheck.ranks.cannot_grade import CannotGrade
from precheck.ranks.collective_records import readable, recorded_input, recorded_output
from precheck.ranks.collectives import CallRecord, Rank, load
from precheck.results import ApiResult, graded, skipped

__all__ = ["grade_point_to_point", "is_point_to_point"]

# torch.distributed.send(tensor, dst, group, tag) and recv(tensor, src, group, tag): the places of what is read
_TENSOR, _TAG = (0, "tensor"), (3, "tag")
_PEER = {"dst": (1, "dst"), "src": (1, "src")}

_Key = tuple[int, int, Any]  # (from rank, to rank, tag) of a message


def grade_point_to_point(
    ranks: dict[int, Rank], missing: str, options: CheckOptions
) -> dict[int, dict[str, ApiResult]]:
    """Each rank's results of its sends and receives, by case name; ``missing`` says where a missing rank's dump
    was looked for."""
    sends: dict[_Key, list[tuple[int, str, dict]]] = {}  # each message's sends: (rank, name, record)
    receives: list[tuple[int, str, dict, _Key, int]] = []  # (rank, name, record, its message, its place among them)
    out: dict[int, dict[str, ApiResult]] = {r: {} for r in ranks}
    for r, rank in ranks.items():
        counted: dict[_Key, int] = {}
        for name in sorted((n for n in rank.orders if is_point_to_point(n)), key=rank.orders.__getitem__):
            try:
                record = rank.record(name)
                with readable(name):
                    key = _message(r, name, record)
            except CannotGrade as e:
                out[r][name] = _skipped(rank, name, e)
                continue
            if POINT_TO_POINT[name.split(".")[1]] == "dst":
                sends.setdefault(key, []).append((r, name, record))
                out[r][name] = _graded(rank, name, record, rank, record, options)
            else:
                receives.append((r, name, record, key, counted.setdefault(key, 0)))
                counted[key] += 1
    for r, name, record, key, k in receives:
        rank = ranks[r]
        try:
            sender, sent = _matching_send(ranks, sends, key, k, name, missing)
            out[r][name] = _graded(rank, name, record, sender, sent, options)
        except CannotGrade as e:
            out[r][name] = _skipped(rank, name, e)
    return out


def _message(r: int, name: str, record: dict) -> _Key:
    """The (from, to, tag) of the message the call ``name`` of rank ``r`` sends or receives."""
    arg = POINT_TO_POINT[name.split(".")[1]]
    peer = recorded_input(record, *_PEER[arg])
    peer = peer.get("value") if isinstance(peer, dict) else peer
    if not isinstance(peer, int) or isinstance(peer, bool):
        raise CannotGrade(
            f"{name} names no {arg} rank (recorded {clip(repr(peer), 40)}): which rank's send it got is unknown",
            Reason.SKIP_MISSING_RANK,
        )
    tag = recorded_input(record, *_TAG)
    tag = tag.get("value") if isinstance(tag, dict) else tag
    if not (tag is None or isinstance(tag, int)):
        raise CannotGrade(f"{name}: its tag {clip(repr(tag), 40)} is not a number", Reason.SKIP_BAD_RECORD)
    return (r, peer, tag or 0) if arg == "dst" else (peer, r, tag or 0)


def _matching_send(
    ranks: dict[int, Rank], sends: dict[_Key, list[tuple[int, str, dict]]], key: _Key, k: int, name: str, missing: str
) -> tuple[Rank, dict]:
    """The rank and record of the k-th send of the message ``key``, which the receive ``name`` got."""
    src = key[0]
    if src not in ranks:
        raise CannotGrade(f"rank {src} has no dump in {missing}: {name} is graded against its send",
                           Reason.SKIP_MISSING_RANK)  # fmt: skip
    matched = sends.get(key, [])
    if k >= len(matched):
        raise CannotGrade(
            f"rank {src} recorded {len(matched)} sends to rank {key[1]} (tag {key[2]}), "
            f"so none matches {name}, its receive number {k + 1}",
            Reason.SKIP_MISSING_RANK,
        )
    return ranks[src], matched[k][2]


def _graded(rank: Rank, name: str, record: dict, sender: Rank, sent: dict, options: CheckOptions) -> ApiResult:
    """Rank's row of ``name``: its tensor once the call had run against the sent tensor, bit for bit (a send's
    own row: against its tensor before the call)."""
    where = f"rank {rank.rank}: {name}"
    try:
        done = recorded_output(record, *_TENSOR)
        if done is None:
            raise CannotGrade(f"{where}: the record holds no output of its tensor (msprobe writes none for an isend)")
        with readable(name):
            target = load(rank, done, f"{where} output tensor")
            golden = load(sender, recorded_input(sent, *_TENSOR), f"rank {sender.rank}: sent tensor")
    except CannotGrade as e:
        return _skipped(rank, name, e)
    rows = RowGrader("binary", options.cosine, options.max_abs, "").outputs(name, [target], [golden], None,
                                                                          lambda *_: None)  # fmt: skip
    return graded(CallRecord(name, rank.orders[name]), rows, [], "")


def _skipped(rank: Rank, name: str, e: CannotGrade) -> ApiResult:
    return skipped(CallRecord(name, rank.orders[name]), str(e), e.code)
