"""Reading a call's arguments the way an API reads them, for the size rules (api_registry.sizes,
api_registry.sizes_nn, api_registry.reduced): tensors by duck typing (``.shape``, ``.stats``), so recorded specs
and real tensors read alike; counts as floats, so a forged 10^30 is inf, never an overflow."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

Rule = Callable[[tuple, dict], float]


def shape_of(value: Any) -> tuple | None:
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None else None


def numel_of(value: Any) -> float:
    shape = shape_of(value)
    return float(math.prod(shape)) if shape is not None else 1.0


def number_in(value: Any) -> Any:
    """A 0-dim tensor as the number it holds, as torch reads one in a size, end or step place (``x.repeat(t)``,
    ``x.new_zeros(t)``, ``torch.arange(t)``, ``torch.arange(0, 1, t)``): a tensor's value, a recorded spec's Max
    (a 0-dim tensor's one value, what the generated tensor holds). Integer and floating tensors alike: a float
    end of 1e9 or a float step of 1e-9 makes as many elements as the integer would; any other value as it is."""
    dtype = getattr(value, "dtype", None)
    if shape_of(value) != () or dtype is None or dtype.is_complex:
        return value
    item = getattr(value, "item", None)
    found = item() if callable(item) else stat_of(value, "max")
    if found is None or isinstance(found, bool):
        return value
    return float(found) if dtype.is_floating_point else int(found)


def count_of(value: Any) -> float:
    """A count as the API reads it (a 0-dim integer tensor as its number); anything else (None, a tensor, text)
    counts as 1."""
    value = number_in(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 1.0
    return abs(float(value)) if math.isfinite(value) else math.inf


def stat_of(value: Any, name: str) -> float | None:
    """A recorded statistic of a tensor spec (``max``, ``mean``), where it is a finite number."""
    found = getattr(getattr(value, "stats", None), name, None)
    return float(found) if isinstance(found, (int, float)) and math.isfinite(found) else None


def arg_at(args: tuple, kwargs: dict, place: int, name: str, default: Any = None) -> Any:
    return args[place] if len(args) > place else kwargs.get(name, default)


def tensors_in(values: Any) -> list:
    """The tensors of an argument list, in order, looking into lists and tuples (``cat([a, b])``)."""
    if shape_of(values) is not None:
        return [values]
    if isinstance(values, (list, tuple)):
        return [t for v in values for t in tensors_in(v)]
    return []


def size_product(args: tuple) -> float:
    """A size given as varargs (``zeros(2, 3)``) or as one list (``zeros((2, 3))``); -1 keeps a dimension."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return math.prod(max(count_of(a), 1.0) for a in args)


def broadcast_shape(*shapes: tuple) -> tuple:
    """The shape ``shapes`` broadcast to; ValueError where they do not broadcast (the API refuses them too)."""
    out = []
    for dims in itertools.zip_longest(*(reversed(s) for s in shapes), fillvalue=1):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(reversed(out))
