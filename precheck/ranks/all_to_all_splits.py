"""Which rows of which rank an ``all_to_all_single`` moves into each rank's output, from the split sizes every
member recorded.

``all_to_all_single(output, input, output_split_sizes, input_split_sizes)`` cuts each rank's input along dim 0 into
one chunk per member (``input_split_sizes`` rows each, or equal chunks where none are given) and gives member i the
i-th chunk of every rank, in rank order: MoE expert parallelism dispatches and combines its tokens so, the splits
uneven and some of them 0. A rank's output is therefore the concatenation of the chunks its senders cut for it, and
the sizes are recorded on both ends: the receiver's ``output_split_sizes`` must agree with each sender's
``input_split_sizes`` (torch refuses a call where they do not), the splits must sum to the tensors' rows, and the
tensors' rows must be of one width. A record where they do not is a bad record, its row SKIP naming the ranks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from precheck.core.reasons import Reason
from precheck.dump.cannot_grade import CannotGrade
from precheck.dump.decode import clip
from precheck.dump.distributed_args import recorded_input, recorded_output
from precheck.ranks.collective_records import PLACES

__all__ = ["Chunk", "incoming"]

_PLACES = PLACES["all_to_all_single"]


@dataclass(frozen=True)
class Chunk:
    """The rows one sender cut for a receiver: its rank, the first row in its input, how many rows, and how many
    elements a row holds."""

    sender: int
    start: int
    rows: int
    width: int

    @property
    def numel(self) -> int:
        return self.rows * self.width


def incoming(members: Sequence[int], records: dict[int, dict], r: int) -> list[Chunk]:
    """The chunks that make rank ``r``'s output, in its order (one per member of the group); CannotGrade
    (skip_bad_record) where the records disagree on them."""
    n, i = len(members), list(members).index(r)
    out_rows, width = _rows(records[r], "output", r)
    wanted = _splits(records[r], "output_split", out_rows, n, r)
    chunks = []
    for j, m in enumerate(members):
        in_rows, its_width = _rows(records[m], "input", m)
        if in_rows and out_rows and its_width != width:
            raise _bad(f"rank {m}'s input rows hold {its_width} elements, rank {r}'s output rows {width}")
        sent = _splits(records[m], "input_split", in_rows, n, m)
        if sent[i] != wanted[j]:
            raise _bad(f"rank {r}'s output_split_sizes take {wanted[j]} rows from rank {m}, whose "
                       f"input_split_sizes send it {sent[i]}")  # fmt: skip
        chunks.append(Chunk(m, sum(sent[:i]), sent[i], width))
    return chunks


def _bad(why: str) -> CannotGrade:
    return CannotGrade(f"all_to_all_single: {why}: no such call runs", Reason.SKIP_BAD_RECORD)


def _rows(record: dict, arg: str, r: int) -> tuple[int, int]:
    """The rows (dim 0) of rank ``r``'s ``arg`` tensor and the elements a row holds, from its recorded shape."""
    raw = recorded_output(record, *_PLACES[arg]) if arg == "output" else None
    raw = raw if raw is not None else recorded_input(record, *_PLACES[arg])
    shape = raw.get("shape") if isinstance(raw, dict) else None
    if not isinstance(shape, list) or not shape or not all(isinstance(s, int) and s >= 0 for s in shape):
        raise _bad(f"rank {r}'s {arg} has no shape with a dim 0 (recorded {clip(repr(shape), 60)})")
    return shape[0], math.prod(shape[1:])


def _splits(record: dict, arg: str, rows: int, n: int, r: int) -> list[int]:
    """Rank ``r``'s recorded split sizes ``arg`` (rows to or from each member), equal chunks where none are given."""
    raw = recorded_input(record, *_PLACES[arg])
    raw = raw.get("value") if isinstance(raw, dict) else raw
    if raw is None or raw == []:
        if rows % n:
            raise _bad(f"rank {r}'s {rows} rows split evenly among {n} ranks")
        return [rows // n] * n
    sizes = [s.get("value") if isinstance(s, dict) else s for s in raw] if isinstance(raw, list) else None
    if sizes is None or len(sizes) != n or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                  for s in sizes):  # fmt: skip
        raise _bad(f"rank {r}'s {arg}_sizes {clip(repr(raw), 60)} are not {n} row counts")
    if sum(sizes) != rows:
        raise _bad(f"rank {r}'s {arg}_sizes sum to {sum(sizes)} rows, its {arg.split('_')[0]} has {rows}")
    return sizes
