"""Which record of the bench dump each target record is compared with.

Same names first: when both dumps hold the same records in the same order (the common case) they pair one to
one. When the sides call different numbers of an API (a fused kernel on one side, an extra cast, another
attention path) the counters in the names no longer say which call is which, so the two call sequences are
aligned instead: a diff over API types (cheap, from the names alone) finds the runs both sides share, and in
each stretch where they differ an edit-distance alignment over API types and tensor shapes decides which records
still pair and which are runs of one side only. Pairs never cross: a run the other side lacks is reported, not
made to shift every later pair.

Two records of the same name pair only where their tensors can stand for each other (``cost`` says they cannot:
an [5, 2] add is no scalar add, as msprobe's compare leaves a row whose dtypes cannot match unpaired). Within a
name the k-th call that can pair pairs the k-th call (msprobe's layer mapping pairs calls by their index in
their scope): an extra call of one side is left out where it stands, not the call after it. A record whose name
matches a record of the other side exactly, left over by the alignment, pairs with it wherever the two stand:
frameworks record a module before or after its children.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any, Optional

from precheck.core.older_python import zip_strict

Pair = tuple[Optional[int], Optional[int]]  # (target index, bench index); None for a record of one side only
Cost = Callable[[Any, Any], Optional[int]]  # two records' details: 0 alike, 1 pairable with differences, None never
MAX_CELLS = 1_000_000  # edit-distance table of one differing stretch (about a second in Python); longer stretches
# pair by type in order


def align(
    target: Sequence[str],
    bench: Sequence[str],
    detail: Callable[[str, int], Any] | None = None,
    cost: Cost | None = None,
) -> list[Pair]:
    """Pairs of record indices in target order. ``target`` and ``bench`` are the records' tokens (direction and
    API type, in the bench's spelling); ``detail(side, i)`` gives what ``cost`` weighs of a record (its tensors),
    for every pair of the same token; without them records pair by token alone."""
    fits = _fits(detail, cost)
    if list(target) == list(bench) and all(fits(i, i) for i in range(len(target))):
        return [(i, i) for i in range(len(target))]
    start = 0
    while start < min(len(target), len(bench)) and target[start] == bench[start] and fits(start, start):
        start += 1
    end_t, end_b = len(target), len(bench)
    while end_t > start and end_b > start and target[end_t - 1] == bench[end_b - 1] and fits(end_t - 1, end_b - 1):
        end_t, end_b = end_t - 1, end_b - 1
    pairs: list[Pair] = [(i, i) for i in range(start)]
    matcher = difflib.SequenceMatcher(None, target[start:end_t], bench[start:end_b], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        i1, i2, j1, j2 = i1 + start, i2 + start, j1 + start, j2 + start
        if op == "equal":
            for i, j in zip_strict(range(i1, i2), range(j1, j2)):
                pairs += [(i, j)] if fits(i, j) else [(i, None), (None, j)]
        else:
            pairs += _stretch(list(range(i1, i2)), list(range(j1, j2)), target, bench, (detail, cost))
    pairs += [(end_t + k, end_b + k) for k in range(len(target) - end_t)]
    return _in_call_order(pairs, target, bench, fits)


def _fits(detail, cost: Cost | None) -> Callable[[int, int], bool]:
    if detail is None or cost is None:
        return lambda i, j: True
    return lambda i, j: cost(detail("target", i), detail("bench", j)) is not None


def rejoin(pairs: list[Pair], t_names: Sequence[str], b_names: Sequence[str], fits) -> list[Pair]:
    """Pair each record of one side only with the record of the other side only of exactly its name (``t_names``
    in the bench's spelling), where ``fits(i, j)``; the pair takes the target record's place."""
    alone = {b_names[j]: j for i, j in pairs if i is None}
    joined = {}
    for i, j in pairs:
        if j is None and (other := alone.get(t_names[i])) is not None and other not in joined and fits(i, other):
            joined[other] = i
    if not joined:
        return pairs
    by_target = {i: j for j, i in joined.items()}
    return [(i, by_target.get(i, j)) for i, j in pairs if i is not None or j not in joined]


def _in_call_order(pairs: list[Pair], target: Sequence[str], bench: Sequence[str], fits) -> list[Pair]:
    """Where a record of one side only is followed, across records of one side only, by a pair whose record on
    that side has the same token and can pair with it, the pair takes the earlier record: the k-th call pairs
    the k-th call, and the extra one is the later."""
    out = list(pairs)
    p = 0
    while p < len(out):
        i, j = out[p]
        if i is None or j is None:
            q = next((q for q in range(p + 1, len(out)) if None not in out[q]), None)
            if q is not None:
                i2, j2 = out[q]
                if i is None and bench[j] == bench[j2] and fits(i2, j):
                    out[p : q + 1] = [*out[p + 1 : q], (i2, j), (None, j2)]
                    continue
                if j is None and target[i] == target[i2] and fits(i, j2):
                    out[p : q + 1] = [*out[p + 1 : q], (i, j2), (i2, None)]
                    continue
        p += 1
    return out


def _stretch(ts: list[int], bs: list[int], target: Sequence[str], bench: Sequence[str], weigh) -> list[Pair]:
    """Align one differing stretch: edit distance where a pair of the same type costs what ``cost`` says (0 or
    1; one that cannot pair never does), a record of one side costs 1, and records of different types never
    pair."""
    detail, cost = weigh
    if not ts or not bs:
        return [(i, None) for i in ts] + [(None, j) for j in bs]
    if len(ts) * len(bs) > MAX_CELLS or detail is None or cost is None:
        return _in_order(ts, bs, target, bench, _fits(detail, cost))
    ft = [detail("target", i) for i in ts]
    fb = [detail("bench", j) for j in bs]
    n, m = len(ts), len(bs)
    inf = n + m + 1
    step = [[inf] * m for _ in range(n)]  # what pairing the two costs; inf where they cannot pair
    for i in range(n):
        for j in range(m):
            if target[ts[i]] == bench[bs[j]] and (c := cost(ft[i], fb[j])) is not None:
                step[i][j] = c
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        table[i][0] = i
    for j in range(m + 1):
        table[0][j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            pair = table[i - 1][j - 1] + step[i - 1][j - 1]
            table[i][j] = min(pair, table[i - 1][j] + 1, table[i][j - 1] + 1)
    out: list[Pair] = []
    i, j = n, m
    while i or j:
        if i and j and step[i - 1][j - 1] < inf and table[i][j] == table[i - 1][j - 1] + step[i - 1][j - 1]:
            out.append((ts[i - 1], bs[j - 1]))
            i, j = i - 1, j - 1
        elif i and table[i][j] == table[i - 1][j] + 1:
            out.append((ts[i - 1], None))
            i -= 1
        else:
            out.append((None, bs[j - 1]))
            j -= 1
    return out[::-1]


def _in_order(ts: list[int], bs: list[int], target: Sequence[str], bench: Sequence[str], fits) -> list[Pair]:
    """Pair records of the same type that can pair, in order; what is left of either side is unmatched."""
    out: list[Pair] = []
    k = 0
    for i in ts:
        j = next((x for x in range(k, len(bs)) if bench[bs[x]] == target[i] and fits(i, bs[x])), None)
        if j is None:
            out.append((i, None))
            continue
        out += [(None, bs[x]) for x in range(k, j)] + [(i, bs[j])]
        k = j + 1
    return out + [(None, bs[x]) for x in range(k, len(bs))]
