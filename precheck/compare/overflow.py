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


def undefined(item: Item) -> bool:
    """A tensor whose recorded statistics hold NaN, or no number and no CRC-32: what it held was not defined when
    it was recorded (FSDP2 narrows its all-gather buffer before the collective fills it) or was not kept (an
    argument saved without data). Two such items pair, yet say nothing of how far the two runs are apart."""
    if not item.tensor:
        return False
    numbers = [_float(v) for v in item.stats]
    if all(x is None for x in numbers):
        return item.md5 is None
    return any(x is not None and math.isnan(x) for x in numbers)


def incomparable(item: Item, other: Item) -> bool:
    """Neither run defined this pair's values: each is undefined, or has a finite Max and Min but a Mean or Norm
    that overflowed (numbers past 1e19, whose squares no float holds: uninitialised memory reads as NaN in one run
    and as such numbers in the other). A NaN where the other run holds finite numbers, or an inf (an overflow),
    stays comparable: a divergence."""
    return item.tensor and other.tensor and _meaningless(item) and _meaningless(other)


def _meaningless(item: Item) -> bool:
    if undefined(item):
        return True
    top, bottom, *sums = (_float(v) for v in item.stats)  # an integer tensor's Mean and Norm are null
    bounded = all(x is not None and math.isfinite(x) for x in (top, bottom))
    return bounded and any(x is not None and not math.isfinite(x) for x in sums)


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


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
