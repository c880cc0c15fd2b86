"""What Python 3.9 and 3.10 spell otherwise: the few newer builtins precheck uses, in one module.

precheck runs where its users' training runs and where msprobe and torch_npu install, Python 3.9 to 3.14: the
recorder inside the training interpreter, run_ut inside the NPU's environment. Each name here is the builtin
itself where the running Python has it and an equivalent where it does not, so the rest of the code reads as it
would on the newest Python and loses nothing on the oldest.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["StrEnum", "int_max_str_digits", "orig_argv", "zip_strict"]

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, enum.Enum):
        """enum.StrEnum before Python 3.11: members are their values as strings (``str()`` and ``format()``)."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)


def zip_strict(*iterables: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """``zip(*iterables, strict=True)``: ValueError when one ends before the others (Python 3.10's ``strict``),
    where a silent shorter zip would pair the wrong values."""
    if sys.version_info >= (3, 10):
        return zip(*iterables, strict=True)
    return _zip_strict(iterables)


def _zip_strict(iterables: tuple[Iterable[Any], ...]) -> Iterator[tuple[Any, ...]]:
    its = [iter(i) for i in iterables]
    if not its:
        return
    while True:
        row = []
        for k, it in enumerate(its):
            try:
                row.append(next(it))
            except StopIteration:
                if k:
                    raise ValueError(f"zip_strict: argument {k + 1} is shorter than argument 1") from None
                for j, rest in enumerate(its[1:], 2):
                    if next(rest, _END) is not _END:
                        raise ValueError(f"zip_strict: argument {j} is longer than argument 1") from None
                return
        yield tuple(row)


_END = object()


def orig_argv() -> list[str]:
    """The interpreter's own command line (``sys.orig_argv``, Python 3.10): what started this process, readable
    at start-up before ``sys.argv`` is set. Before 3.10, Linux's ``/proc/self/cmdline``; elsewhere ``sys.argv``."""
    found = getattr(sys, "orig_argv", None)
    if found is not None:
        return list(found)
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return list(getattr(sys, "argv", []))


def int_max_str_digits() -> int:
    """The most digits Python reads into an int (``sys.get_int_max_str_digits``, in 3.9.14, 3.10.7 and later);
    0 (no limit) on an older patch release."""
    get = getattr(sys, "get_int_max_str_digits", None)
    return get() if get is not None else 0
