"""The APIs msprobe wraps, wrapped the way msprobe wraps them: each name msprobe's list holds is replaced on its
object (torch.nn.functional, torch.Tensor, torch, torch.distributed) by a function that tells the recorder of
the call, for as long as a recording is on.

Why attribute patching rather than a TorchFunctionMode: a mode sees the function object, not the name it was
called by, and torch shares objects between names msprobe records apart (``torch.nn.functional.conv2d is
torch.conv2d``: Functional.conv2d or Torch.conv2d). Patching the names gives msprobe's record names by
construction. Only the outermost call of a thread is recorded (a call inside a wrapped one, or inside the
recorder's own work, runs as it is), as msprobe records it.
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from api_registry.recording import PATCHED, wrapped_names

__all__ = ["Listener", "depth", "installed", "quiet"]

_local = threading.local()
_INHERITED = object()  # an attribute found on a base class, not on the patched class itself


class Listener(Protocol):
    def call(self, prefix: str, api: str, func: Callable, args: tuple, kwargs: dict) -> Any: ...


def depth() -> int:
    """How deep this thread is inside wrapped calls (or the recorder's own work): only depth 0 is recorded."""
    return getattr(_local, "depth", 0)


class quiet:  # noqa: N801 - used as a context manager, named as one
    """The recorder's own work (statistics, copies, hooks): no call inside it is recorded."""

    def __enter__(self) -> None:
        _local.depth = depth() + 1

    def __exit__(self, *exc: object) -> None:
        _local.depth -= 1


class installed:  # noqa: N801
    """msprobe's wrappers on their objects while the block runs; ``listener`` hears of every outermost call."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> installed:
        for owner, attr, original, prefix, api in _targets():
            own = vars(owner).get(attr, _INHERITED) if isinstance(owner, type) else original
            setattr(owner, attr, _wrapper(original, prefix, api, self.listener))
            self._saved.append((owner, attr, own))
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, attr, own in reversed(self._saved):
            if own is _INHERITED:
                delattr(owner, attr)  # a method torch.Tensor inherits from its C base: the base's again
            else:
                setattr(owner, attr, own)
        self._saved.clear()


def _targets() -> Iterator[tuple[Any, str, Any, str, str]]:
    """(owner, attribute, original, record prefix, API name) of every name msprobe wraps that this torch has; the
    original as it is now (a program may have replaced it since the last recording)."""
    for owner, attr, prefix in _places():
        original = getattr(owner, attr)
        inherited = vars(owner).get(attr) if isinstance(owner, type) else None
        if callable(original) and not isinstance(inherited, (staticmethod, classmethod)):
            yield owner, attr, original, prefix, attr


@functools.cache
def _places() -> tuple[tuple[Any, str, str], ...]:
    """(owner, attribute, record prefix) of every name msprobe wraps that this torch has, found once per process
    (dir() of torch.Tensor once, not once per name)."""
    found = []
    for section, names in wrapped_names().items():
        module_path, prefix = PATCHED[section]
        root = _resolve(module_path)
        if root is None:
            continue
        has: dict[int, set[str]] = {}
        for name in names:
            *parents, attr = name.split(".")
            owner = root
            for part in parents:
                owner = getattr(owner, part, None)
            if owner is not None and id(owner) not in has:
                has[id(owner)] = set(dir(owner))
            if owner is not None and attr in has[id(owner)]:
                found.append((owner, attr, prefix))
    return tuple(found)


def _resolve(path: str) -> Any:
    """The module or class at a dotted path (torch.Tensor is a class of torch), None when it cannot be had."""
    try:
        return importlib.import_module(path)
    except ImportError:
        module, _, attr = path.rpartition(".")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            return None


def _wrapper(original: Callable, prefix: str, api: str, listener: Listener) -> Callable:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if getattr(_local, "depth", 0):
            return original(*args, **kwargs)
        _local.depth = 1
        try:
            return listener.call(prefix, api, original, args, kwargs)
        finally:
            _local.depth = 0

    # what functools.wraps copies that a caller may read (its __dict__ copy cost 0.5 ms a name, 0.55 s in all)
    wrapped.__name__ = wrapped.__qualname__ = api
    wrapped.__doc__, wrapped.__wrapped__ = getattr(original, "__doc__", None), original  # type: ignore[attr-defined]
    return wrapped
