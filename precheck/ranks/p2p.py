"""Point-to-point transfers (``Distributed.send.0``, ``recv``, ``isend``, ``irecv``, and each P2POp of a
``batch_isend_irecv``, as torch.distributed.pipelining moves activations and gradients) graded across the ranks of
one step.

A receive's tensor holds what its peer sent, and the messages of one channel (group, sender, receiver, tag) arrive
in the order they were sent: the k-th receive of a channel on its receiver is the k-th send of that channel on its
sender (precheck.dump.p2p_calls reads both ends, a peer named by its group rank resolved through the group, and
pairs them; the step compare follows a divergence through the same pairs). Its recorded tensor must be that send's
recorded tensor: in a tensor dump bit for bit (the values were copied, not computed), in a statistics dump statistic
for statistic (precheck.ranks.p2p_stats). A send only reads its tensor: its row grades the tensor after the call
against the one before where both are recorded, and otherwise says which receive got it (msprobe records no isend's
tensor after the call), so a wrong transfer is an error on the receiving rank only. A transfer is sized before
anything is loaded, as a collective is: above ``--max-memory`` it is SKIP.

A receive whose sender left no dump, recorded no matching send, or named no source (``recv(src=None)`` takes any
rank's) is SKIP saying why; so is every later receive whose place in its channel such a record leaves unknown. So is
a receive whose recorded tensor msprobe wrote at the wrong time, where the record shows it: a batch's receive still
holding its buffer as given, an irecv rewritten with a later batch's message (make_pipeline_steps.py says when
msprobe 26.2 does both).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from precheck.core.comparison import Comparison
from precheck.core.reasons import Reason
from precheck.core.status import ERROR, PASS, SKIP
from precheck.dump.cannot_grade import CannotGrade
from precheck.dump.decode import TensorSpec, clip, decode_value
from precheck.dump.distributed_args import readable
from precheck.dump.index import RecordError
from precheck.dump.p2p_calls import Channels, Op, read_calls
from precheck.dump.record_names import is_point_to_point
from precheck.execution.options import CheckOptions
from precheck.grader.rows import RowGrader
from precheck.ranks.collectives import CallRecord, Rank, load
from precheck.ranks.p2p_stats import copied_statistics, same_statistics
from precheck.results import ApiResult, DetailRow, Direction, graded, skipped

__all__ = ["grade_point_to_point", "is_point_to_point"]


def grade_point_to_point(
    ranks: dict[int, Rank], missing: str, options: CheckOptions
) -> dict[int, dict[str, ApiResult]]:
    """Each rank's results of its sends and receives, by case name; ``missing`` says where a missing rank's dump
    was looked for."""
    world = max(ranks, default=-1) + 1
    calls = {r: read_calls(r, sorted(rank.orders, key=rank.orders.__getitem__), rank.record, world)
             for r, rank in ranks.items()}  # fmt: skip
    links = _Links(ranks, calls, missing)
    out: dict[int, dict[str, ApiResult]] = {r: {} for r in ranks}
    for r, named in calls.items():
        for name, ops in named.items():
            call = CallRecord(name, ranks[r].orders[name])
            if isinstance(ops, CannotGrade):
                out[r][name] = skipped(call, str(ops), ops.code)
            else:
                out[r][name] = _result(call, [_row(links, op, options) for op in ops])
    return out


class _Links(Channels):
    """Which send each receive got (precheck.dump.p2p_calls' Channels), and the ranks' dumps to grade it from."""

    def __init__(self, ranks: dict[int, Rank], calls: dict[int, dict[str, list[Op] | CannotGrade]], missing: str):
        super().__init__(calls, {r: rank.orders for r, rank in ranks.items()}, missing)
        self.ranks = ranks

    def rewritten(self, op: Op, got: TensorSpec, send: Op) -> str:
        """Why a plain irecv's recorded tensor ``got`` is another message's, where it is: msprobe 26.2 rewrites the
        rank's last isend/irecv record when a later batch_isend_irecv's inner irecv completes, with what that irecv
        got, a later message from the same peer (``send``: the one this irecv got). Empty otherwise."""
        for later in self.later_messages(op, send):
            try:
                sent = _spec(later.before, later.where)
            except CannotGrade:
                continue
            if same_statistics(got, sent):
                return (f"{op.where}: its recorded tensor is {later.where}'s, a later message a batch_isend_irecv of "
                        "this rank received: msprobe rewrites an irecv's record when a later batch's inner irecv "
                        "completes, so what this receive got is not recorded")  # fmt: skip
        return ""


def _row(links: _Links, op: Op, options: CheckOptions) -> DetailRow:
    """The details row of one message end; SKIP with the reason where it cannot be graded."""
    try:
        with readable(op.name):
            return _received(links, op, options) if not op.sends else _sent(links, op, options)
    except CannotGrade as e:
        return DetailRow(op.name, Direction.FORWARD, op.index, Comparison.failed(str(e), e.code, SKIP))


def _received(links: _Links, op: Op, options: CheckOptions) -> DetailRow:
    """A receive's recorded tensor against the one its matching send sent."""
    send = links.other_end(op)
    if op.after is None:
        raise CannotGrade(f"{op.where}: the record holds no received tensor", Reason.SKIP_RECORDED_OUTPUT)
    row = _compared(links.ranks, op, op.after, send, send.before, options)
    if row.comparison.status == ERROR:
        got = _spec(op.after, op.where)
        why = links.rewritten(op, got, send) or _unfinished(op, got)
        if why:
            raise CannotGrade(why, Reason.SKIP_RECORDED_OUTPUT)
    return row


def _unfinished(op: Op, got: TensorSpec) -> str:
    """Why a batch's received tensor that is still its buffer as given is no error: msprobe wrote it when the batch
    returned, before the receive completed. Empty where the record does not show that."""
    if not op.batch or op.before is None or not same_statistics(got, _spec(op.before, op.where)):
        return ""
    return (f"{op.where}: its recorded tensor is its buffer as given: msprobe wrote batch_isend_irecv's output when "
            "it returned, before the receive completed (on gloo the batch's Works are its inner irecv's, whose wait "
            "hook fires instead), so what arrived is not recorded")  # fmt: skip


def _sent(links: _Links, op: Op, options: CheckOptions) -> DetailRow:
    """A send's tensor after the call against before (a send only reads it); where the record holds no tensor after
    the call (an isend's in msprobe's dumps), the receive that got it, whose row grades what arrived."""
    if op.after is not None and op.before is not None:
        return _compared(links.ranks, op, op.after, op, op.before, options)
    got = links.other_end(op)
    spec = _spec(op.before, op.where)
    message = (f"sent to {got.where}, whose row grades what arrived against this send's tensor; the record holds "
               "no tensor after the call")  # fmt: skip
    verdict = Comparison(PASS, message, None, golden_dtype=str(spec.dtype), target_dtype=str(spec.dtype),
                         shape=spec.shape, standard="matched", reason=Reason.PASSED)  # fmt: skip
    return DetailRow(op.name, Direction.FORWARD, op.index, verdict)


def _compared(ranks: dict[int, Rank], op: Op, target_raw: Any, source: Op, golden_raw: Any,
              options: CheckOptions) -> DetailRow:  # fmt: skip
    """``op``'s recorded tensor ``target_raw`` against ``golden_raw`` recorded by ``source``: statistics where either
    holds no file, else their values bit for bit, sized before they are loaded."""
    target, golden = _spec(target_raw, op.where), _spec(golden_raw, source.where)
    whose = "its tensor as given (a send leaves it unchanged)" if source is op else f"the tensor {source.where} sent"
    if target.data_name is None or golden.data_name is None:
        return DetailRow(op.name, Direction.FORWARD, op.index, copied_statistics(target, golden, whose))
    _sized(op, target, golden, options)
    values = load(ranks[op.rank], target_raw, f"{op.where}: tensor")
    sent = load(ranks[source.rank], golden_raw, f"{source.where}: sent tensor")
    rows = RowGrader("binary", options.cosine, options.max_abs, "").outputs(op.name, [values], [sent], None,
                                                                          lambda *_: None)  # fmt: skip
    return replace(rows[0], index=op.index)


def _sized(op: Op, target: TensorSpec, golden: TensorSpec, options: CheckOptions) -> None:
    """Refuse a transfer whose check needs more than --max-memory before either tensor is loaded: both tensors,
    each loaded and compared in 64 bits (as a collective is sized)."""
    limit = options.max_memory
    need = sum(s.numel * (s.dtype.itemsize + 16) for s in (target, golden))
    if limit is not None and need > limit:
        raise CannotGrade(
            f"{op.where}: its check needs about {need / 2**30:.3g} GiB (the received and the sent tensor, compared in "
            f"64 bits), above --max-memory {limit / 2**30:.3g} GiB",
            Reason.SKIP_MEMORY,
        )


def _spec(raw: Any, where: str) -> TensorSpec:
    """A recorded tensor, decoded; CannotGrade where it is not one."""
    try:
        spec = decode_value(raw, where)
    except RecordError as e:
        raise CannotGrade(clip(str(e)), Reason.SKIP_BAD_RECORD) from None
    if not isinstance(spec, TensorSpec):
        raise CannotGrade(f"{where}: its tensor is recorded as {clip(repr(raw), 40)}", Reason.SKIP_BAD_RECORD)
    return spec


def _result(call: CallRecord, rows: list[DetailRow]) -> ApiResult:
    """A call's result from its ops' rows: SKIP only where none was graded (SKIP never hides a graded op)."""
    batch = len(rows) > 1 or call.name.split(".")[1] == "batch_isend_irecv"
    said = [(f"op {row.index}: " if batch else "") + row.comparison.message for row in rows if row.comparison.message]
    if all(row.comparison.status == SKIP for row in rows):
        return skipped(call, "; ".join(said), rows[0].comparison.reason or Reason.SKIPPED)
    return graded(call, rows, [], "; ".join(said))
