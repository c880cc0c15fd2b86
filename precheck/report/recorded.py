"""What the dump recorded of a graded row, for the advice rules that need more than the CSVs: the inputs'
statistics (was a NaN born here?) and the call's arguments and output norm (how long a sum, how large its error).

Records are found by the one index of dump.json (precheck.dump.index) and cut into items by
precheck.compare.entries (the one torch-free walk over a raw record), so the report still imports no torch. The
dump is streamed past once and only the records asked for are decoded.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from api_registry.reduced import reduced_length
from precheck.compare.entries import Item, record_items
from precheck.dump.index import RecordError, RecordIndex
from precheck.grader.limits import limits_for

if TYPE_CHECKING:
    import pandas

__all__ = ["Growth", "accumulates", "growth_of", "inputs_finite", "read_records"]

# Observed error above this many roundings (normwise): beyond fp32 accumulation and one rounding (at most 1), and
# beyond the two roundings of an honest kernel that rounds a partial result too (a broadcast matmul's gradient sums
# its per-batch products in the dtype: 1.6-1.8 on the bundled GPT steps, graded pass or warning).
BEYOND_ROUNDING = 2.0
GROWTH_SHARE = 0.5  # ... and at least this share of what adding n terms in the dtype predicts


def read_records(dump_json: Path, keys: set[str]) -> dict | None:
    """The records named ``keys``, read from their byte spans while the dump streams past (a dump of gigabytes is
    never held); None when the dump moved or cannot be read: the rules that need it stay silent."""
    try:  # a FIFO named by a sidecar: refused, never waited on
        return RecordIndex.open(dump_json, ValueError).named(keys)
    except (OSError, ValueError, RecordError):
        return None


def _items(dump: dict, key: str) -> list[Item]:
    record = dump.get(key)
    try:
        return record_items(key, record) if isinstance(record, dict) else []
    except ValueError:  # a malformed record says nothing
        return []


def inputs_finite(dump: dict, key: str) -> bool | None:
    """Whether every recorded input Max and Min of record ``key`` is finite (None: nothing recorded)."""
    stats = [
        s
        for item in _items(dump, key)
        if item.state == "input" and item.tensor
        for s in item.stats[:2]
        if isinstance(s, (int, float)) and not isinstance(s, bool)
    ]
    return all(math.isfinite(s) for s in stats) if stats else None


def _arguments(key: str, items: list[Item]) -> tuple[tuple, dict]:
    """The call's arguments as api_registry reads them: a tensor as its shape, a number as itself, a list as a
    list (one level deep: dims, kernel sizes, normalized shapes)."""
    top: dict[str, Any] = {}
    prefix = f"{key}.input."
    for item in items:
        if item.state != "input" or not item.name.startswith(prefix):
            continue
        head, _, rest = item.name[len(prefix) :].partition(".")
        value = SimpleNamespace(shape=item.dims) if item.tensor else item.stats[0]
        if rest:
            top.setdefault(head, []).append(value)
        else:
            top[head] = value
    count = next(i for i in range(len(top) + 1) if str(i) not in top)
    return tuple(top[str(i)] for i in range(count)), {k: v for k, v in top.items() if not k.isdigit()}


@dataclass(frozen=True)
class Growth:
    """One row's error against the length its sum reduces, in roundings (units of the dtype's u)."""

    n: float  # terms summed into each output element
    observed: float  # ||target - golden|| / ||output||, in u
    one_rounding: float = 1.0  # what a kernel that accumulates in fp32 and rounds once allows (normwise)

    @property
    def predicted(self) -> float:
        """What adding the n terms in the dtype makes: n partial sums each rounded, a random walk of about
        sqrt(n)/3 roundings of the result (uniform rounding errors of the growing partial sums)."""
        return math.sqrt(self.n) / 3

    def evidence(self) -> str:
        return (
            f"reduces n = {self.n:.0f}: error {self.observed:.3g} roundings (normwise); one rounding allows "
            f"{self.one_rounding:g}, accumulating in the dtype predicts ~{self.predicted:.2g} (sqrt(n)/3)"
        )


def growth_of(row: pandas.Series, dump: dict) -> Growth | None:
    """The row's reduced length and observed error, from the call's recorded arguments and output norm; None when
    the API sums nothing or the dump does not say."""
    forward, output = f"{row['call']}.forward", str(row["output"])
    if row["direction"] != "forward" and not output.isdigit():
        return None
    grad_of = None if row["direction"] == "forward" else int(output)
    n = reduced_length(row["api"], *_arguments(forward, _items(dump, forward)), grad_of)
    own = f"{row['call']}.{row['direction']}"
    name = f"{own}.output.{row['output']}"
    norms = [i.stats[3] for i in _items(dump, own) if i.state == "output" and i.name == name and i.tensor]
    norm, rmse = (norms[0] if norms else None), row["rmse"]
    if n is None or not isinstance(norm, (int, float)) or not norm > 0 or not math.isfinite(rmse):
        return None
    elements = math.prod(int(d) for d in re.findall(r"\d+", str(row["shape"])))
    return Growth(n, rmse * math.sqrt(elements) / norm / limits_for(row["dtype"]).unit)


def accumulates(growth: Growth | None) -> bool:
    """Beyond one rounding and of the order of what accumulating in the dtype predicts: the error grew with n."""
    if growth is None:
        return False
    beyond = growth.observed > BEYOND_ROUNDING * growth.one_rounding
    return beyond and growth.observed >= GROWTH_SHARE * growth.predicted
