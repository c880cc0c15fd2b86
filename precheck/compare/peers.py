"""A step's peer ranks asked whether a record reads memory not yet written: uninitialised values say nothing of a
kernel, whichever run they are read in.

FSDP2 narrows its all-gather buffer before the collective fills it, so msprobe records uninitialised memory.
Where it holds NaN in both runs the record is not comparable (precheck.compare.overflow.incomparable). Where it
holds NaN in one run and a freed tensor's stale numbers in the other (the caching allocator handed that run a
block it had used before), no statistic tells those numbers from data: one dump alone cannot tell such a record
from a NaN that entered one run. The step can: its ranks make the same calls in the same order, and where the same
record reads values neither run defined on a peer rank, the call reads a buffer before it is written, and what
either run's memory held there is no divergence. Such a record is listed as not comparable, saying which rank
told; without a peer that tells, a NaN where the other run holds numbers stays a divergence.

Peers' dumps are indexed only when a record needs them (a NaN on one side in every input), and read a record at a
time; torch is not imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from precheck.compare.entries import CompareInputError, DumpIndex, Item, Record, open_dump
from precheck.compare.overflow import incomparable, undefined
from precheck.dump.index import RecordError

MAX_ASKED = 1_000  # records a compare asks the peers about (each reads one record of each peer's two dumps)


class Peers:
    """The other ranks' dumps of a step (rank, target dump, bench dump), opened when first asked."""

    def __init__(self, ranks: Sequence[tuple[int, Path, Path]]) -> None:
        self.ranks = list(ranks)
        self._open: dict[int, tuple[DumpIndex, DumpIndex, dict[str, int], dict[str, int]] | None] = {}
        self.asked = 0

    def undefined_at(self, record: str) -> int | None:
        """The first peer rank whose same record reads values neither run defined in every tensor input; None
        where no peer does (or holds the record, or can be read)."""
        if self.asked >= MAX_ASKED:
            return None
        self.asked += 1
        for rank, target, bench in self.ranks:
            pair = self._records(rank, target, bench, record)
            if pair is not None and _neither_defined(*pair):
                return rank
        return None

    def _records(self, rank: int, target: Path, bench: Path, record: str) -> tuple[Record, Record] | None:
        if rank not in self._open:
            try:
                t, b = open_dump(target), open_dump(bench)
            except (CompareInputError, OSError):
                self._open[rank] = None
            else:
                self._open[rank] = (t, b, {k: i for i, k in enumerate(t.keys)}, {k: i for i, k in enumerate(b.keys)})
        opened = self._open[rank]
        if opened is None or record not in opened[2] or record not in opened[3]:
            return None
        t, b, t_at, b_at = opened
        try:
            with t.file() as f, b.file() as g:
                found = t.record(t_at[record], f), b.record(b_at[record], g)
        except (OSError, RecordError):
            return None
        return None if any(r.problem for r in found) else found


def one_sided(target: Record, bench: Record) -> bool:
    """Every tensor input of the record is undefined (NaN, or nothing recorded) in one run at least, and one in
    one run only: what precheck.compare.dumps would otherwise read as a divergence of infinite size."""
    pairs = _inputs(target, bench)
    return (
        bool(pairs)
        and all(undefined(t) or undefined(b) for t, b in pairs)
        and any(undefined(t) != undefined(b) for t, b in pairs)
    )


def _neither_defined(target: Record, bench: Record) -> bool:
    pairs = _inputs(target, bench)
    return bool(pairs) and all(incomparable(t, b) for t, b in pairs)


def _inputs(target: Record, bench: Record) -> list[tuple[Item, Item]]:
    """The record's tensor inputs paired by their place (``.input.0``) with the bench's."""
    theirs = {item.name[len(bench.key) :]: item for item in bench.inputs}
    pairs = [(item, theirs.get(item.name[len(target.key) :])) for item in target.inputs if item.tensor]
    return [(t, b) for t, b in pairs if b is not None and b.tensor]
