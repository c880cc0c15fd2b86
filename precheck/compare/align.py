"""Which record of the bench dump each target record is compared with.

Same names first: when both dumps hold the same records in the same order (the common case) they pair one to
one. When the sides call different numbers of an API (a fused kernel on one side, an extra cast, another
attention path) the counters in the names no longer say which call is which, so the two call sequences are
aligned instead: a diff over API types (cheap, from the names alone) finds the runs both sides share, and in
each stretch where they differ an edit-distance alignment over API types and tensor shapes decides which records
still pair and which are runs of one side only. Pairs never cross: a run the other side lacks is reported, not
made to shift every later pair.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence

Pair = tuple[int | None, int | None]  # (target index, bench index); None for a record of one side only
MAX_CELLS = 1_000_000  # edit-distance table of one differing stretch (about a second in Python); longer stretches
# pair by type in order


def align(
    target: Sequence[str],
    bench: Sequence[str],
    detail: Callable[[str, int], tuple] | None = None,
) -> list[Pair]:
    """Pairs of record indices in target order. ``target`` and ``bench`` are the records' tokens (direction and
    API type, in the bench's spelling); ``detail(side, i)`` gives a record's finer token (type and shapes) for the
    stretches where the sides differ."""
    if list(target) == list(bench):
        return [(i, i) for i in range(len(target))]
    start = 0
    while start < min(len(target), len(bench)) and target[start] == bench[start]:
        start += 1
    end_t, end_b = len(target), len(bench)
    while end_t > start and end_b > start and target[end_t - 1] == bench[end_b - 1]:
        end_t, end_b = end_t - 1, end_b - 1
    pairs: list[Pair] = [(i, i) for i in range(start)]
    matcher = difflib.SequenceMatcher(None, target[start:end_t], bench[start:end_b], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        i1, i2, j1, j2 = i1 + start, i2 + start, j1 + start, j2 + start
        if op == "equal":
            pairs += [(i1 + k, j1 + k) for k in range(i2 - i1)]
        else:
            pairs += _stretch(list(range(i1, i2)), list(range(j1, j2)), target, bench, detail)
    pairs += [(end_t + k, end_b + k) for k in range(len(target) - end_t)]
    return pairs


def _stretch(ts: list[int], bs: list[int], target: Sequence[str], bench: Sequence[str], detail) -> list[Pair]:
    """Align one differing stretch: edit distance where a pair of the same type costs 0 with equal shapes and
    1 otherwise, a record of one side costs 1, and records of different types never pair."""
    if not ts or not bs:
        return [(i, None) for i in ts] + [(None, j) for j in bs]
    if len(ts) * len(bs) > MAX_CELLS or detail is None:
        return _in_order(ts, bs, target, bench)
    ft = [detail("target", i) for i in ts]
    fb = [detail("bench", j) for j in bs]
    n, m = len(ts), len(bs)
    inf = n + m + 1
    cost = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        cost[i][0] = i
    for j in range(m + 1):
        cost[0][j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            same_type = target[ts[i - 1]] == bench[bs[j - 1]]
            pair = cost[i - 1][j - 1] + (0 if ft[i - 1] == fb[j - 1] else 1) if same_type else inf
            cost[i][j] = min(pair, cost[i - 1][j] + 1, cost[i][j - 1] + 1)
    out: list[Pair] = []
    i, j = n, m
    while i or j:
        same_type = i and j and target[ts[i - 1]] == bench[bs[j - 1]]
        if same_type and cost[i][j] == cost[i - 1][j - 1] + (0 if ft[i - 1] == fb[j - 1] else 1):
            out.append((ts[i - 1], bs[j - 1]))
            i, j = i - 1, j - 1
        elif i and cost[i][j] == cost[i - 1][j] + 1:
            out.append((ts[i - 1], None))
            i -= 1
        else:
            out.append((None, bs[j - 1]))
            j -= 1
    return out[::-1]


def _in_order(ts: list[int], bs: list[int], target: Sequence[str], bench: Sequence[str]) -> list[Pair]:
    """Pair records of the same type in order; what is left of either side is unmatched."""
    out: list[Pair] = []
    k = 0
    for i in ts:
        j = next((x for x in range(k, len(bs)) if bench[bs[x]] == target[i]), None)
        if j is None:
            out.append((i, None))
            continue
        out += [(None, bs[x]) for x in range(k, j)] + [(i, bs[j])]
        k = j + 1
    return out + [(None, bs[x]) for x in range(k, len(bs))]
