"""How many elements a call makes when plain numbers, not its tensors, set the size of its output.

``Tensor.repeat(x, 10**9)``, ``x.new_full((10**6, 10**6), 0)``, ``torch.zeros(10**6, 10**6)`` or
``torch.arange(10**12)`` turn a few integers into terabytes, whatever output shape a dump records. These rules read
the numbers the way the API does, without running anything (a meta-device run would be exact but imports torch's
Python decompositions: seconds per process). Every other API's outputs are bounded by its tensors.

Tensors are read by duck typing (``.shape``), so the rules work on recorded specs as well as on tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["output_elements"]

Rule = Callable[[tuple, dict], float]


def _shape(value: Any) -> tuple | None:
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None else None


def _numel(value: Any) -> float:
    shape = _shape(value)
    return float(math.prod(shape)) if shape is not None else 1.0


def _number(value: Any) -> float:
    """A count as the API reads it; anything else (None, a tensor, text) counts as 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 1.0
    return abs(float(value)) if math.isfinite(value) else math.inf


def _sizes(args: tuple) -> float:
    """A size given as varargs (``zeros(2, 3)``) or as one list (``zeros((2, 3))``); -1 keeps a dimension."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return math.prod(max(_number(a), 1.0) for a in args)


def _factory(args: tuple, kwargs: dict) -> float:
    return _sizes(args or (kwargs.get("size", ()),))


def _full(args: tuple, kwargs: dict) -> float:
    return _sizes((args[0] if args else kwargs.get("size", ()),))


def _new(args: tuple, kwargs: dict) -> float:
    return _sizes(args[1:] or (kwargs.get("size", ()),))


def _new_full(args: tuple, kwargs: dict) -> float:
    return _sizes((args[1] if len(args) > 1 else kwargs.get("size", ()),))


def _expand(args: tuple, kwargs: dict) -> float:
    return _sizes(args[1:] or (kwargs.get("size", ()),))


def _repeat(args: tuple, kwargs: dict) -> float:
    counts = args[1:] or (kwargs.get("repeats", kwargs.get("dims", ())),)
    return _numel(args[0] if args else kwargs.get("input")) * _sizes(counts)


def _arange(args: tuple, kwargs: dict) -> float:
    numbers = [a for a in args if not hasattr(a, "shape")]
    start, end, step = 0.0, 0.0, 1.0
    if len(numbers) == 1:
        end = _number(numbers[0])
    elif len(numbers) >= 2:
        start, end = _number(numbers[0]), _number(numbers[1])
        step = _number(numbers[2]) if len(numbers) > 2 else _number(kwargs.get("step", 1))
    else:
        end = _number(kwargs.get("end", 0))
    return abs(end - start) / max(step, 1e-300) + 1


def _steps(args: tuple, kwargs: dict) -> float:
    return _number(args[2] if len(args) > 2 else kwargs.get("steps", 1))


def _eye(args: tuple, kwargs: dict) -> float:
    n = _number(args[0] if args else kwargs.get("n", 1))
    return n * _number(args[1] if len(args) > 1 and args[1] is not None else kwargs.get("m", n))


def _first(args: tuple, kwargs: dict) -> float:
    return _number(args[0] if args else kwargs.get("n", 1))


def _size_arg(args: tuple, kwargs: dict) -> float:
    """randint(high, size) / randint(low, high, size): the list argument."""
    lists = [a for a in args if isinstance(a, (tuple, list))]
    return _sizes((lists[0] if lists else kwargs.get("size", ()),))


def _pad(args: tuple, kwargs: dict) -> float:
    shape = list(_shape(args[0] if args else kwargs.get("input")) or ())
    pad = args[1] if len(args) > 1 else kwargs.get("pad", ())
    pad = tuple(pad) if isinstance(pad, (tuple, list)) else ()
    for i in range(min(len(pad) // 2, len(shape))):
        shape[-1 - i] = max(shape[-1 - i] + _number(pad[2 * i]) + _number(pad[2 * i + 1]), 0)
    return float(math.prod(shape))


def _times_count(name: str, place: int) -> Rule:
    def rule(args: tuple, kwargs: dict) -> float:
        count = args[place] if len(args) > place else kwargs.get(name, 1)
        return _numel(args[0] if args else None) * max(_number(count), 1.0)

    return rule


def _indices(args: tuple, kwargs: dict) -> float:
    return 2 * _number(args[0] if args else kwargs.get("row", 1)) * _number(args[1] if len(args) > 1 else 1)


_RULES: dict[str, Rule] = {
    **{f"Torch.{n}": _factory for n in ("zeros", "ones", "empty", "rand", "randn")},
    "Torch.full": _full,
    **{f"Tensor.new_{n}": _new for n in ("zeros", "ones", "empty")},
    "Tensor.new_full": _new_full,
    "Tensor.expand": _expand,
    "Torch.broadcast_to": _expand,
    "Tensor.broadcast_to": _expand,
    "Tensor.repeat": _repeat,
    "Torch.tile": _repeat,
    "Tensor.tile": _repeat,
    "Torch.arange": _arange,
    "Torch.range": _arange,
    "Torch.linspace": _steps,
    "Torch.logspace": _steps,
    "Torch.eye": _eye,
    "Torch.randperm": _first,
    "Torch.randint": _size_arg,
    "Functional.pad": _pad,
    "Torch.repeat_interleave": _times_count("repeats", 1),
    "Tensor.repeat_interleave": _times_count("repeats", 1),
    "Functional.one_hot": _times_count("num_classes", 1),
    "Torch.tril_indices": _indices,
    "Torch.triu_indices": _indices,
}


def output_elements(api: str, args: tuple, kwargs: dict) -> float | None:
    """The elements a call of ``api`` makes from its number arguments (an upper estimate, may be inf); None for
    APIs whose outputs their tensors bound."""
    rule = _RULES.get(api)
    if rule is None:
        return None
    try:
        return rule(args, kwargs)
    except (TypeError, ValueError, OverflowError):  # arguments the API itself would refuse
        return None
