"""A step of ranks compared rank by rank, read as one step: where the runs first part, on which rank, and how that
reached the other ranks.

Each rank's compare names the first record whose outputs differ while its inputs agree, and on a rank that only
received the divergence that is the collective or the receive that handed it over: rank 0's all_to_all_single is
"suspect" when rank 1's expert was wrong and sent rank 0 its tokens back. A rank's own records cannot tell, the
step's can: a record is inherited from a peer rank when

- it is a collective (or an all-to-all) and, on a rank of its group, the same record's inputs already differ
  (msprobe numbers each rank's calls, and the ranks of a group make the same collective calls in the same order:
  ``Distributed.all_to_all_single.2`` is one call on every rank that holds it);
- it is a receive whose differing tensor came from a send whose tensor already differed on its rank: the k-th
  receive of a channel (group, sender, receiver, tag) is the k-th send of that channel (precheck.dump.p2p_calls
  reads both ends, batch_isend_irecv's P2POps included, and pairs them as run_ut's step grades them), so two
  messages of equal statistics, or a message the divergence changed, are told apart by where they travelled. A
  plain irecv's record msprobe rewrote with a later message of its peer (the buffer reused before msprobe read it:
  ``later_messages`` there) holds that message's statistics, within their rounding, and not its own send's: its
  divergence is that later send's, inherited where it differed on the sender, and the record is named rewritten
  (``rewritten_with`` in the summary; its row's Produced by) where it stays the rank's own;
- it is a record whose differing input no record of its rank produced (msprobe wrote the receive that got it
  before its message arrived) and that input has exactly the statistics of what an earlier receive of its rank
  got (that receive's send, paired as above) while it differed on the sender, or of a tensor a peer's collective
  gave while it differed there (the message, as the compare names a producer within one rank:
  precheck.compare.divergence).

Such a record is no suspect: its verdict becomes inherited, naming the rank and the record it came through, in the
rank's summary and records CSV. The step's verdict follows each rank's first divergence back to the rank where it
was born: that rank and its record, then every rank it reached and through what. It reads the summaries' findings
and a few records of the target dumps (no tensor is loaded, torch is not imported).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precheck.compare.divergence import AMPLIFIED, INHERITED, SUSPECT, Finding, fingerprint
from precheck.compare.dumps import write_summary
from precheck.compare.entries import DumpIndex, Item, open_dump
from precheck.compare.record_log import mark_verdict
from precheck.compare.summary import DumpComparison
from precheck.dump.cannot_grade import CannotGrade
from precheck.dump.copied_stats import recorded_copy
from precheck.dump.index import RecordError
from precheck.dump.p2p_calls import Channels, Op, read_calls
from precheck.dump.record_names import call_of, is_collective, is_point_to_point, split_item
from precheck.paths import claim_stamp
from precheck.schema import COMPARE_STEP

MAX_DEPTH = 8  # nesting searched for a recorded process group's ranks


@dataclass
class StepVerdict:
    """One verdict for a step of ranks: where the runs first part and how it reached the other ranks."""

    origins: list[tuple[int, Finding]] = field(default_factory=list)  # (rank, its first divergence): its own
    reached: list[tuple[int, Finding]] = field(default_factory=list)  # (rank, its first divergence): a peer's
    unexplained: list[tuple[int, Finding]] = field(default_factory=list)  # inherited from no record of the step
    agree: list[int] = field(default_factory=list)  # ranks whose runs do not part

    def lines(self) -> list[str]:
        """The step's lines on the console, and in the summary and the report."""
        if not (self.origins or self.reached or self.unexplained):
            return [f"step: the runs part on no rank ({len(self.agree)} ranks compared)"]
        lines = []
        if len(self.origins) == 1:
            rank, first = self.origins[0]
            lines.append(f"step: the runs first part on rank {rank}, at {first.name} ({first.verdict})")
        elif self.origins:
            each = "; ".join(f"rank {r} at {f.name} ({f.verdict})" for r, f in self.origins)
            lines.append(f"step: the runs part on {len(self.origins)} ranks on their own: {each}")
        for rank, first in self.reached:
            own = "" if first.through == first.name else f" (its first divergent record {first.name})"
            lines.append(f"  it reached rank {rank} from rank {first.from_rank} through {first.through}{own}")
        for rank, first in self.unexplained:
            lines.append(
                f"  rank {rank} first parts at {first.name}, inherited from an input no record of the step's "
                f"ranks produced ({first.worst_input})"
            )
        if self.agree:
            lines.append(f"  the runs agree on rank{'s' * (len(self.agree) > 1)} {', '.join(map(str, self.agree))}")
        return lines

    def as_dict(self) -> dict[str, Any]:
        def one(rank: int, f: Finding) -> dict[str, Any]:
            return {"rank": rank, "record": f.name, "verdict": f.verdict}

        first = self.origins[0] if len(self.origins) == 1 else None
        return {
            "first": one(*first) if first else None,
            "origins": [one(r, f) for r, f in self.origins],
            "reached": [one(r, f) | {"from_rank": f.from_rank, "through": f.through} for r, f in self.reached],
            "unexplained": [one(r, f) for r, f in self.unexplained],
            "agree": self.agree,
            "lines": self.lines(),
        }


def step_verdict(results: dict[int, DumpComparison]) -> StepVerdict:
    """The step's verdict from each rank's compare (rank -> its comparison), once every rank is compared. A
    record whose divergence came from a peer rank is made inherited in its rank's summary and records CSV, which
    are written again, each with the step's verdict."""
    dumps = _Dumps(results)
    for rank, result in results.items():
        d = result.divergence
        named: list[Finding] = []
        for finding in (f for f in [d.first, *d.suspects] if f is not None):
            if not any(finding is f for f in named):
                named.append(finding)
        for finding in named:
            source = _source(dumps, rank, finding)
            if source is not None:
                _inherit(result, finding, *source)
            elif finding.rewritten:
                mark_verdict(result.records_path, finding.name, finding.verdict, f"rewritten with {finding.rewritten}")
    verdict = _verdict(results)
    for result in results.values():
        result.step = verdict.as_dict()
        write_summary(result)
    return verdict


def _inherit(result: DumpComparison, finding: Finding, peer: int, through: str) -> None:
    """The finding as inherited from ``peer`` through ``through``: no longer a suspect of its rank."""
    d = result.divergence
    d.verdicts[finding.verdict] -= 1
    d.verdicts[INHERITED] += 1
    finding.verdict, finding.from_rank, finding.through = INHERITED, peer, through
    d.suspects = [f for f in d.suspects if f is not finding]
    mark_verdict(result.records_path, finding.name, INHERITED, f"rank {peer}: {through}")


def _source(dumps: _Dumps, rank: int, finding: Finding) -> tuple[int, str] | None:
    """(peer rank, the record it came through) where ``finding``'s divergence came from a peer rank; None where it
    is this rank's own, or its source is not known."""
    call = call_of(finding.name)
    if is_collective(call) and finding.verdict in (SUSPECT, AMPLIFIED):
        members = dumps.group(rank, finding.name)
        for peer in sorted(dumps.results):
            if peer != rank and (members is None or peer in members) and dumps.differed(peer, finding.name):
                return peer, finding.name
        return None
    if is_point_to_point(call) and finding.verdict in (SUSPECT, AMPLIFIED):
        return _message(dumps, rank, finding)
    if finding.verdict == INHERITED and finding.producer is None and finding.direction != "parameters_grad":
        return _received_earlier(dumps, rank, finding)
    return None


def _message(dumps: _Dumps, rank: int, finding: Finding) -> tuple[int, str] | None:
    """Where a receive's differing tensor came from: the send it got, where that send's tensor already differed on
    its rank. Where msprobe rewrote the receive's record with a later message (its recorded statistics are that later
    send's and not its own send's), the record's divergence is that message's: inherited where that send's tensor
    differed, else the rank's own still, but ``finding.rewritten`` names the message its record holds."""
    op = dumps.op_of(rank, finding.name, finding.worst_output)
    own = dumps.sent_to(op) if op is not None and not op.sends else None
    if op is None or own is None:
        return None
    later = dumps.rewritten_with(op, own)
    if later is None:
        return (own.rank, _through(op, own)) if dumps.diverged(own) else None
    finding.rewritten = f"{_end(later)} of rank {later.rank}"
    if not dumps.diverged(later):
        return None
    return later.rank, f"{_end(op)} (its record rewritten by msprobe with {finding.rewritten})"


def _received_earlier(dumps: _Dumps, rank: int, finding: Finding) -> tuple[int, str] | None:
    """Where a differing input no record of its rank produced came from: the latest earlier receive of the rank
    whose send gave a tensor of exactly its statistics while that tensor differed on the sender, else a peer's
    collective that did (the receive's own record may hold its buffer as given: msprobe wrote it too early)."""
    item = dumps.item(rank, finding.name, finding.worst_input)
    mark = fingerprint(item) if item is not None else None
    if mark is None:
        return None
    for op in dumps.receives_before(rank, finding.name):
        send = dumps.send_of(op)
        if send is not None and dumps.fingerprint(send) == mark:
            return send.rank, _through(op, send)
    for peer in sorted(dumps.results):
        sent = dumps.sent_as(peer, mark) if peer != rank else None
        if sent is not None:
            return peer, f"{sent} of rank {peer}"
    return None


def _through(received: Op, sent: Op) -> str:
    """A message as the step's verdict names it: ``Distributed.irecv.1.forward (Distributed.isend.1.forward of rank
    0)``, a batch_isend_irecv's P2POp by its place in the list (``... op 1``)."""
    return f"{_end(received)} ({_end(sent)} of rank {sent.rank})"


def _end(op: Op) -> str:
    return f"{op.name}.forward" + (f" op {op.index}" if op.batch else "")


def _verdict(results: dict[int, DumpComparison]) -> StepVerdict:
    """Each rank's first divergence followed to where it was born."""
    verdict = StepVerdict()
    for rank, result in sorted(results.items()):
        first = result.divergence.first
        if first is None:
            verdict.agree.append(rank)
        elif first.from_rank is not None:
            verdict.reached.append((rank, first))
        elif first.verdict == INHERITED and first.producer is None and first.direction != "parameters_grad":
            verdict.unexplained.append((rank, first))
        else:
            verdict.origins.append((rank, first))
    return verdict


class _Dumps:
    """The target dumps of the step's ranks, read record by record where a finding needs one."""

    def __init__(self, results: dict[int, DumpComparison]) -> None:
        self.results = results
        self._index: dict[int, tuple[DumpIndex, dict[str, int]]] = {}
        self._channels: Channels | None = None

    def differed(self, rank: int, record: str) -> bool:
        """Whether an input of ``record`` already differed on ``rank`` beyond its own dtype's rounding: a rank that
        went through bf16 holds its later records to bf16's, but what it hands a peer is held there to the peer's."""
        kept = self.results[rank].divergence.exchanges.get(record)
        return kept is not None and (not kept[0].inputs_agree or bool(_inputs(kept[1])))

    def _at(self, rank: int) -> dict[str, int]:
        """``rank``'s records and their places in its run (its target dump, indexed once)."""
        if rank not in self._index:
            index = open_dump(Path(self.results[rank].target))
            self._index[rank] = (index, {k: i for i, k in enumerate(index.keys)})
        return self._index[rank][1]

    def _read(self, rank: int, record: str) -> Any:
        at = self._at(rank)
        index = self._index[rank][0]
        if record not in at:
            return None
        try:
            return index.read(at[record])
        except (RecordError, ValueError):
            return None

    def group(self, rank: int, record: str) -> set[int] | None:
        """The ranks of the process group ``rank``'s record names (``group_ranks``); None: the default group."""
        raw = self._read(rank, record)
        if not isinstance(raw, dict):
            return None
        ranks = _group_ranks(raw.get("input_kwargs"), 0) or _group_ranks(raw.get("input_args"), 0)
        return set(ranks) if ranks else None

    def item(self, rank: int, record: str, name: str | None) -> Item | None:
        """The item ``name`` of ``rank``'s record, as the compare reads it."""
        if name is None or self._read(rank, record) is None:
            return None
        index, at = self._index[rank]
        with index.file() as f:
            found = index.record(at[record], f)
        return next((i for i in found.items if i.name == name), None)

    def sent_as(self, rank: int, mark: tuple) -> str | None:
        """The collective of ``rank`` that gave a tensor with the fingerprint ``mark`` while that tensor already
        differed on ``rank``; None where none did (a send is found by its channel: ``send_of``)."""
        for record, (_, beyond) in self.results[rank].divergence.exchanges.items():
            for name in _inputs(beyond) if is_collective(call_of(record)) else []:
                item = self.item(rank, record, name)
                if item is not None and fingerprint(item) == mark:
                    return record
        return None

    def channels(self) -> Channels:
        """Every rank's sends and receives, read once, paired by channel and order."""
        if self._channels is None:
            world = max(self.results) + 1
            calls, orders = {}, {}
            for rank in self.results:
                orders[rank] = {call_of(k): i for k, i in self._at(rank).items() if k.endswith(".forward")}
                names = sorted((c for c in orders[rank] if is_point_to_point(c)), key=orders[rank].__getitem__)
                calls[rank] = read_calls(rank, names, lambda call, r=rank: self._record(r, call), world)
            self._channels = Channels(calls, orders, "the step folder")
        return self._channels

    def _record(self, rank: int, call: str) -> dict:
        raw = self._read(rank, f"{call}.forward")
        if not isinstance(raw, dict):
            raise CannotGrade(f"rank {rank}: {call}.forward is not a record it can read")
        return raw

    def op_of(self, rank: int, record: str, item: str | None) -> Op | None:
        """The message end of ``rank``'s record whose tensor, once the call had run, is ``item``."""
        call = call_of(record)
        ops = (o for o in self.channels().in_order.get(rank, []) if o.name == call)
        return next((o for o in ops if f"{record}.{o.items[1]}" == item), None)

    def sent_to(self, received: Op) -> Op | None:
        """The send a receive got (its channel's send of the same number); None where it is not known."""
        try:
            return self.channels().other_end(received)
        except CannotGrade:
            return None

    def diverged(self, send: Op) -> bool:
        """Whether the tensor a send gave already differed on its rank."""
        kept = self.results[send.rank].divergence.exchanges.get(f"{send.name}.forward")
        return kept is not None and f"{send.name}.forward.{send.items[0]}" in kept[1]

    def send_of(self, received: Op) -> Op | None:
        """The send a receive got, where that send's tensor already differed on its rank; None where it agreed
        there, or the send is not known."""
        send = self.sent_to(received)
        return send if send is not None and self.diverged(send) else None

    def rewritten_with(self, received: Op, send: Op) -> Op | None:
        """The later message whose tensor a plain irecv's record holds in place of ``send``'s, the one it got
        (precheck.dump.p2p_calls' later_messages: msprobe rewrote it): the first whose recorded statistics the
        receive's are, within their rounding, where ``send``'s are not; None where the record is its own message's."""
        if recorded_copy(received.after, send.before):
            return None
        return next(
            (o for o in self.channels().later_messages(received, send) if recorded_copy(received.after, o.before)), None
        )

    def receives_before(self, rank: int, record: str) -> list[Op]:
        """``rank``'s receives recorded before ``record``, the latest first."""
        channels, place = self.channels(), self._at(rank).get(record, -1)
        return [o for o in reversed(channels.in_order.get(rank, [])) if not o.sends and channels.order(o)[0] < place]

    def fingerprint(self, op: Op) -> tuple | None:
        """The statistics of the tensor a send gave, as its rank recorded it."""
        item = self.item(op.rank, f"{op.name}.forward", f"{op.name}.forward.{op.items[0]}")
        return fingerprint(item) if item is not None else None


def _inputs(names: frozenset[str]) -> list[str]:
    """The input items among ``names`` (``<record>.input.1``, ``<record>.input.0.0.tensor``), in a stable order."""
    return sorted(n for n in names if split_item(n)[4] == "input")


def _group_ranks(value: Any, depth: int) -> list[int] | None:
    """The first ``group_ranks`` list of ints found in a record's arguments."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(value, dict):
        ranks = value.get("group_ranks")
        if isinstance(ranks, list) and all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            return ranks
        value = list(value.values())
    if isinstance(value, list):
        for v in value:
            found = _group_ranks(v, depth + 1)
            if found:
                return found
    return None


def write_step(verdict: StepVerdict, folder: Path) -> Path:
    """The step's verdict as ``compare_step_{ts}.json`` in ``folder``, beside its ranks' compares."""
    stem = claim_stamp(folder, COMPARE_STEP.format("_{}"))
    path = folder / COMPARE_STEP.format(f"_{stem}")
    path.write_text(json.dumps(verdict.as_dict(), indent=1) + "\n", encoding="utf-8")
    return path
