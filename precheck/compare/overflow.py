"""Where an overflow is born: the records whose outputs hold inf or nan while all their inputs are finite, read
from the recorded statistics (tensor dumps record them too), in execution order. Later records that only pass
an inf along are not listed: their inputs are not finite.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from precheck.compare.entries import Item, open_dump
from precheck.compare.session import one_dump


@dataclass(frozen=True)
class Overflow:
    record: str
    output: str
    what: str  # "inf", "-inf", "nan" or several of them


def non_finite(item: Item) -> set[str]:
    """Which of inf, -inf, nan a tensor's recorded Max/Min/Mean/Norm show, or a float argument is (the -inf a
    causal mask is filled with is an input, so masked_fill does not give birth to it)."""
    found = set()
    for value in item.stats:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float, str))
            or (not item.tensor and isinstance(value, str))
        ):
            continue
        try:
            x = float(value)
        except ValueError:
            continue
        if math.isnan(x):
            found.add("nan")
        elif math.isinf(x):
            found.add("inf" if x > 0 else "-inf")
    return found


def first_overflows(dump: str | os.PathLike, limit: int = 20) -> list[Overflow]:
    """Up to ``limit`` records, in execution order, whose outputs are the first to hold inf or nan; ``dump`` is a
    dump.json, its folder, or the dump's own folder above ``step*/rank*`` (see :func:`one_dump`)."""
    index = open_dump(one_dump(dump))
    found: list[Overflow] = []
    for record in index.records():
        if len(found) >= limit:
            break
        if record.problem or any(non_finite(i) for i in record.inputs):
            continue
        for item in record.outputs:
            bad = non_finite(item)
            if bad:
                found.append(Overflow(record.key, item.name, ", ".join(sorted(bad))))
                break
    return found
