"""The APIs msprobe wraps, wrapped the way msprobe wraps them: each name msprobe's list holds is replaced on its
object (torch.nn.functional, torch.Tensor, torch, torch.distributed) by a function that tells the recorder of
the call, for as long as a recording is on.

Why attribute patching rather than a TorchFunctionMode: a mode sees the function object, not the name it was
called by, and torch shares objects between names msprobe records apart (``torch.nn.functional.conv2d is
torch.conv2d``: Functional.conv2d or Torch.conv2d). Patching the names gives msprobe's record names by
construction. Only the outermost call of a thread is recorded (a call inside a wrapped one, or inside the
recorder's own work, runs as it is), as msprobe records it.

The wrappers are the program's guests. Taking them off puts back what each name held when its wrapper went on,
and only where the wrapper is still there: a library imported after torch that replaced ``F.gelu`` keeps its
replacement. A wrapper the program kept inside its own (``old = F.gelu; F.gelu = lambda x: old(x) * 2``) stays
there, and once off it only calls what it wrapped. Under ``torch.compile`` a wrapper is the function it wraps:
dynamo traces through it into the original, so the compiled graph is the one the program compiles without
precheck (the recorder's own work would break it at every call and change its numbers), and a call that runs
inside a compiled graph is not recorded.

TorchScript, too, compiles what the program would compile without precheck: a function scripted while the wrappers
are on (``@torch.jit.script`` at import: torch.distributed.optim's functional optimizers, which
ZeroRedundancyOptimizer imports) sees torch's own operators. A wrapper of one of them is in TorchScript's table of
builtins as the operator it wraps (for as long as the wrapper lives), one of a dispatched function (F.max_pool2d)
is that function's dispatch, and one of a Python function (F.relu, torch.norm) is in TorchScript's table of
dispatched functions as a dispatch to that function whatever the arguments, so a call of it compiles as one of the
function, overloads and all (torch.norm's, compiled with torch's globals and kept on torch's function), and a
``script_if_tracing`` wrapper, so ``torch.jit.script`` of it compiles the function it holds. (Before, TorchScript
compiled the wrapper itself: a TypeError at the program's import; then an overloaded function's overloads with the
wrapper's globals: "undefined value has_torch_function_unary".)
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch

from api_registry.recording import ALSO_PATCHED, PATCHED, wrapped_names
from precheck.compat import is_compiling

__all__ = ["Listener", "depth", "installed", "quiet"]

_local = threading.local()
_INHERITED = object()  # an attribute found on a base class, not on the patched class itself
_ON: list[installed] = []  # the installations on now, oldest first (two recorders' may overlap in any order)
# torch's tables of its own functions, read from their names once, at first use (dynamo's first compile): one read
# while the wrappers were on holds them, not torch's functions; emptied when the wrappers come off, it is read
# again when next used (torch.Tensor.add(x, 1) in a graph compiled after a recording broke it, unknown to dynamo)
_NAME_TABLES = (
    ("torch._dynamo.trace_rules", "get_tensor_method"),
    ("torch._dynamo.variables.torch", "get_overridable_functions"),
    ("torch.overrides", "_get_overridable_functions"),
    ("torch.overrides", "get_ignored_functions"),
    ("torch.overrides", "get_testing_overrides"),
)


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
        self.listener: Listener | None = listener  # None once off: a wrapper left in the program's hands is inert
        self._saved: list[tuple[Any, str, Any, Callable]] = []

    def __enter__(self) -> installed:
        builtins = _script_builtins()  # read before any wrapper is on: it holds torch's own functions
        made: dict[tuple[int, str, str], Callable] = {}  # one wrapper of a function msprobe patches in two modules
        for owner, attr, original, prefix, api in _targets():
            own = vars(owner).get(attr, _INHERITED) if isinstance(owner, type) else original
            wrapper = made.get((id(original), prefix, api))
            if wrapper is None:
                wrapper = made[(id(original), prefix, api)] = _wrapper(original, prefix, api, self)
                _script_as_original(wrapper, original, builtins)
            setattr(owner, attr, wrapper)
            self._saved.append((owner, attr, own, wrapper))
        _ON.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener = None
        for owner, attr, own, wrapper in reversed(self._saved):
            if vars(owner).get(attr) is wrapper:
                if own is _INHERITED:
                    delattr(owner, attr)  # a method torch.Tensor inherits from its C base: the base's again
                else:
                    setattr(owner, attr, own)
            else:  # wrapped since by a later recorder (it gets what this one found), or the program's choice
                self._hand_over(owner, attr, own, wrapper)
        self._saved.clear()
        if self in _ON:
            _ON.remove(self)
        for module, table in _NAME_TABLES:
            getattr(getattr(sys.modules.get(module), table, None), "cache_clear", lambda: None)()

    def _hand_over(self, owner: Any, attr: str, own: Any, wrapper: Callable) -> None:
        """A later installation that found this one's wrapper puts back what this one found, not a wrapper that
        would then stay in torch for good (recorders that overlap, not nested: the first one ends first)."""
        for later in _ON[_ON.index(self) + 1 :] if self in _ON else ():
            for i, (o, a, found, w) in enumerate(later._saved):
                if o is owner and a == attr and found is wrapper:
                    later._saved[i] = (o, a, own, w)
                    return


def _script_builtins() -> dict[int, str]:
    """TorchScript's table of builtin operators (id of a function -> its operator), built now if it is not yet."""
    from torch.jit import _builtins

    return _builtins._get_builtin_table()


def _script_as_original(wrapper: Callable, original: Callable, builtins: dict[int, str]) -> None:
    """TorchScript compiles a call of ``wrapper`` as one of ``original``: TorchScript knows a function by its
    identity (its table of builtins, its dispatched functions) or compiles its source, and the wrapper's would be
    precheck's. Each entry lasts as long as the wrapper: a wrapper the program kept after the recording, inert,
    still compiles."""
    operator = builtins.get(id(original))
    if operator is not None:
        builtins[id(wrapper)] = operator
        weakref.finalize(wrapper, builtins.pop, id(wrapper), None)
        return
    dispatched = torch._jit_internal.boolean_dispatched
    if original in dispatched:
        dispatched[wrapper] = dispatched[original]
    elif inspect.isfunction(original):
        # a call of it in scripted code is one of ``original``: TorchScript reads this table before it compiles a
        # Python function, and the entry leads to ``original`` whatever the arguments (no position or keyword
        # holds its flag: the default), which TorchScript then compiles as without precheck: its overloads
        # (torch.norm) with its own globals, cached on it; not with the wrapper's ("undefined value
        # has_torch_function_unary"), cached on the wrapper and taken from the original for good
        dispatched[wrapper] = {"if_true": original, "if_false": original, "index": sys.maxsize, "arg_name": "",
                               "default": True}  # fmt: skip
        # torch.jit.script of the wrapper itself compiles the function it holds, under that function's own name
        setattr(wrapper, "__script_if_tracing_wrapper", True)  # noqa: B010 - TorchScript's own attribute names
        setattr(wrapper, "__original_fn", original)  # noqa: B010
        wrapper.__module__ = original.__module__


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
        for also in map(_resolve, ALSO_PATCHED.get(section, ())):  # the same function under the same name there
            found += [(also, n, prefix) for n in names if also is not None and getattr(also, n, None) is not None
                      and getattr(also, n) is getattr(root, n, None)]  # fmt: skip
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


def _wrapper(original: Callable, prefix: str, api: str, on: installed) -> Callable:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if is_compiling():  # first: dynamo traces the original only
            return original(*args, **kwargs)
        listener = on.listener
        if listener is None or getattr(_local, "depth", 0):
            return original(*args, **kwargs)
        _local.depth = 1
        try:
            return listener.call(prefix, api, original, args, kwargs)
        finally:
            _local.depth = 0

    # what functools.wraps copies that a caller may read (its __dict__ copy cost 0.5 ms a name, 0.55 s in all)
    wrapped.__name__ = wrapped.__qualname__ = api
    wrapped.__doc__, wrapped.__wrapped__ = getattr(original, "__doc__", None), original  # type: ignore[attr-defined]
    # the attribute torch.compile's own wrappers name their function by: dynamo's table of torch's functions, read
    # from their names at its first compile, holds the original, not the wrapper, if that compile is in a recording
    wrapped._torchdynamo_inline = original  # type: ignore[attr-defined]
    return wrapped
