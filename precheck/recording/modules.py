"""msprobe's ``mix`` level: a record per module call beside the API records, and construct.json, the call tree.

What is written, under which name and in which order is msprobe 26.2's (its ModuleProcessor and hook manager):
``Module.{path}.{Class}.forward.{N}`` (N counted per module, reset at each step) holding the call's
``input_args``, ``input_kwargs``, ``output`` and the module's own ``parameters``, written when the call returns
(after the API records of its body); ``Module.{path}.{Class}.backward.{N}`` (``input`` the gradients of its
outputs, ``output`` those of its inputs that need one), through torch's own full-backward-hook machinery
(``BackwardHook``) as msprobe uses it, so that the autograd graph and the order hooks fire in are msprobe's;
``Module.{path}.{Class}.parameters_grad.{N}`` with each parameter's ``.grad`` once autograd has accumulated it,
moved to the end of dump.json each time a parameter adds to it, as msprobe's cache moves it.

Naming without a model: msprobe's ``start(model)`` hooks the model's submodules, named by their path from it,
and not the model itself. ``precheck record`` is told no model; a global forward pre-hook sees every module
call, and a module called while no other module is running (the model the training script calls) is taken as
such a model: its submodules are hooked under their ``named_modules()`` paths, it is not. For the usual step
(``loss = model(x)``) the names are msprobe's; a second top-level module (a loss module, a second model) is a
model of its own, its submodules named from it (msprobe would record them only if given a list of models).

Threads: the hooks' bookkeeping is done under the recorder's lock (never while the module runs), and a module
call's record is found again at its end on the thread that started it, so modules called by several threads at
once are each recorded once (precheck.recording.session).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch.utils.hooks import BackwardHook, RemovableHandle

from precheck.dump.record_names import MODULE_PREFIXES, split_key
from precheck.recording.wrap import depth, quiet

if TYPE_CHECKING:
    from precheck.recording.dumpfile import DumpFile
    from precheck.recording.encode import Encoder

__all__ = ["ModuleHooks"]


class Recorder(Protocol):
    """What the module hooks need of the session's recorder (precheck.recording.session.Recorder), named here so
    that the session, which makes the hooks, is the only one of the two to import the other."""

    lock: Any
    store: Any

    def recording(self) -> bool: ...
    def in_own_process(self) -> bool: ...
    def dump(self) -> DumpFile: ...
    def stack(self) -> tuple[str, ...] | None: ...
    def encoder(self, dump: DumpFile, files: bool = True) -> Encoder: ...
    def guard(self, where: str, hook: Callable[..., Any]) -> Callable[..., Any]: ...


class ModuleHooks:
    """The module half of a mix-level recording: hooks on the modules of each top-level module called, and the
    tree msprobe writes to construct.json (each call's parent module call, null at the top)."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.construct: dict[str, str | None] = {}
        self._local = threading.local()
        self._hooked: weakref.WeakSet = weakref.WeakSet()
        self._handles: list[RemovableHandle] = []
        self._param_handles: dict[str, RemovableHandle] = {}
        self.reset()
        guard = recorder.guard  # every hook: the recorder's failure is never the user's call's
        self._handles += [
            torch.nn.modules.module.register_module_forward_pre_hook(guard("module hooks", self._enter)),
            torch.nn.modules.module.register_module_forward_hook(guard("module hooks", self._leave), always_call=True),
        ]

    def reset(self) -> None:
        """A new step: counters, the call tree and the pending calls start again (msprobe's reset_module_stats)."""
        self.construct = {}
        self._counts: dict[str, int] = {}
        self._node: dict[str, str | None] = {}  # module call -> its parent call (msprobe's module_node)
        self._unsynced: list[str] = []  # module calls not yet in construct.json (written at the next update)
        self._queue: OrderedDict[str, bool] = OrderedDict()
        self._stacks: dict[int, list[str]] = {}
        self._parents: dict[int, str | None] = {}
        # (thread, module) -> its open calls on that thread: name, input record and backward hook
        self._calls: dict[tuple[int, str], list[tuple[str, dict, Any]]] = {}
        self._grad_calls: dict[str, list] = {}

    def remove(self) -> None:
        for handle in [*self._handles, *self._param_handles.values()]:
            handle.remove()
        self._handles.clear()
        self._param_handles.clear()

    def api(self, name: str) -> None:
        """An API call's forward or backward was collected: construct.json has it under the module call running."""
        self.construct[name] = self._parents.get(threading.get_ident())
        self._sync()

    def _sync(self) -> None:
        for name in self._unsynced:
            self.construct[name] = self._node[name]
        self._unsynced.clear()

    def _enter(self, module: torch.nn.Module, args: Any) -> None:
        level = getattr(self._local, "level", 0)
        self._local.level = level + 1
        if not level and module not in self._hooked and self.recorder.recording():
            with self.recorder.lock:
                self._adopt(module)

    def _leave(self, *_: Any) -> None:
        self._local.level = max(getattr(self._local, "level", 1) - 1, 0)

    def _adopt(self, root: torch.nn.Module) -> None:
        """Hook ``root``'s submodules as msprobe's register_module_hook hooks a model's (the model itself not)."""
        if root in self._hooked:
            return  # another thread's first call of it hooked it while this one waited
        self._hooked.add(root)
        for path, module in root.named_modules():
            if module is root or module in self._hooked or isinstance(module, torch.jit.ScriptModule):
                continue
            if type(module).__name__ == "FullyShardedDataParallel":
                continue
            self._hooked.add(module)
            prefix = f"Module.{path}.{type(module).__name__}."
            legacy = bool(module._backward_hooks) and module._is_full_backward_hook is False
            guard = self.recorder.guard
            pre, post = functools.partial(self._pre, prefix, legacy), functools.partial(self._post, prefix)
            self._handles += [
                module.register_forward_pre_hook(guard(f"{prefix}forward", pre), with_kwargs=True),
                module.register_forward_hook(guard(f"{prefix}forward", post), with_kwargs=True, prepend=True),
            ]

    def _pre(self, prefix: str, legacy: bool, module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        if not self.recorder.recording() or depth():
            return None
        with self.recorder.lock:
            return self._open_call(prefix, legacy, module, args, kwargs)

    def _open_call(self, prefix: str, legacy: bool, module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        index = self._counts[prefix] = self._counts.get(prefix, -1) + 1
        name = f"{prefix}forward.{index}"
        self._push(name)
        dump = self.recorder.dump()
        encoder = self._encoder(dump)
        with quiet():
            record = {
                "input_args": encoder.values(args, f"{name}.input"),
                "input_kwargs": encoder.values(kwargs, f"{name}.kwargs"),
            }
            dump.note_stack(name, self.recorder.stack())
            hook = None
            if not legacy:  # msprobe leaves the backward of a module with a deprecated backward hook out
                back = f"{prefix}backward.{index}"
                guard = self.recorder.guard
                hook = BackwardHook(
                    module,
                    [guard(back, functools.partial(self._backward, back))],
                    [guard(back, lambda _module, _grads: self._push_backward(back))],
                )
                args = _hooked(hook.setup_input_hook, args)
        self._calls.setdefault((threading.get_ident(), prefix), []).append((name, record, hook))
        return args, kwargs

    def _post(self, prefix: str, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        calls = self._calls.get((threading.get_ident(), prefix))
        if not calls:
            return None
        with self.recorder.lock:
            return self._close_call(calls.pop(), module, output)

    def _close_call(self, call: tuple[str, dict, Any], module: torch.nn.Module, output: Any) -> Any:
        name, record, hook = call
        if self.recorder.recording():
            dump = self.recorder.dump()
            encoder = self._encoder(dump)
            with quiet():
                params = {key.split(".")[-1]: p for key, p in module.named_parameters(recurse=False)}
                self._hook_params(split_key(name)[0], params)  # type: ignore[index]  # a name it made
                record["output"] = encoder.values(_tuple(output), f"{name}.output")
                record["parameters"] = encoder.values(params, f"{name}.parameters")
            dump.add(name, record)
            self._sync()
        self._pop(name)
        if hook is None:
            return None
        with quiet():
            return _hooked(hook.setup_output_hook, output)

    def _backward(self, name: str, module: torch.nn.Module, grad_input: Any, grad_output: Any) -> None:
        if not self.recorder.in_own_process():
            return  # a forked child running the parent's graph
        with self.recorder.lock:
            self._backward_record(name, grad_input, grad_output)

    def _backward_record(self, name: str, grad_input: Any, grad_output: Any) -> None:
        if self.recorder.recording():  # msprobe records a module's backward only before stop(), unlike an API's
            dump = self.recorder.dump()
            encoder = self._encoder(dump)
            with quiet():
                record = {
                    "input": encoder.values(_tuple(grad_output), f"{name}.input"),
                    "output": encoder.values(_tuple(grad_input), f"{name}.output"),
                }
            dump.add(name, record)
            self._sync()
        self._pop(name)

    def _hook_params(self, owner: str, params: dict[str, torch.nn.Parameter]) -> None:
        """msprobe's parameter hooks: on each parameter's gradient accumulator, replaced at each call."""
        for param_name, param in params.items():
            if not param.requires_grad:
                continue
            key = f"{owner}.{param_name}"
            old = self._param_handles.pop(key, None)
            if old is not None:
                old.remove()
            expanded = param.expand_as(param)
            if expanded.grad_fn is not None:
                accumulator = expanded.grad_fn.next_functions[0][0]
                hook = functools.partial(self._param_grad, owner, param_name, weakref.ref(param), frozenset(params))
                self._param_handles[key] = accumulator.register_hook(self.recorder.guard(f"{owner}.{param_name}", hook))

    def _param_grad(self, owner: str, param_name: str, param: weakref.ref, names: frozenset, *_: Any) -> None:
        if not self.recorder.recording() or param() is None:
            return
        with self.recorder.lock:
            self._param_grad_record(owner, param_name, param, names)

    def _param_grad_record(self, owner: str, param_name: str, param: weakref.ref, names: frozenset) -> None:
        calls = self._grad_calls.setdefault(owner, [-1, param_name])
        if calls[0] < 0 or calls[1] == param_name:
            calls[0] += 1
        name = f"{owner}.parameters_grad.{calls[0]}"
        dump = self.recorder.dump()
        with quiet():
            value = self._encoder(dump).values(param().grad, f"{name}.{param_name}")
        hooked = {n for n in names if f"{owner}.{n}" in self._param_handles}
        dump.merge(name, {param_name: [value]}, hooked)

    def _encoder(self, dump: DumpFile) -> Encoder:
        """An online check (a store for its tensors) grades no module record: their tensors are not kept, as the
        check keeps none of the calls it has graded."""
        return self.recorder.encoder(dump, files=self.recorder.store is None)

    def _push_backward(self, name: str) -> None:
        """A module's backward starts (on autograd's thread)."""
        if self.recorder.in_own_process():
            with self.recorder.lock:
                self._push(name)

    def _push(self, name: str) -> None:
        """msprobe's set_construct_info_in_pre_hook: ``name`` is now the running call of this thread."""
        tid = threading.get_ident()
        stack = self._stacks.setdefault(tid, [])
        self._node[name] = stack[-1] if stack else _queued_parent(self._queue, name)
        self._unsynced.append(name)
        self._queue[name] = True
        stack.append(name)
        self._parents[tid] = name

    def _pop(self, name: str) -> None:
        tid = threading.get_ident()
        self._queue.pop(name, None)
        stack = self._stacks.get(tid)
        if stack:
            stack.pop()
        self._parents[tid] = stack[-1] if stack else None


def _tuple(value: Any) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _queued_parent(queue: OrderedDict[str, bool], name: str) -> str | None:
    """msprobe's ModuleQueue.find_last: with no call running on this thread, the latest open call whose path is
    ``name``'s parent path."""
    parts = name.split(".")
    prefix = ".".join(parts[:-4])
    if len(parts) < 5 or f"{prefix}." in MODULE_PREFIXES:  # a top-level module has no parent
        return None
    for parent in reversed(queue):
        parent_parts = parent.split(".")
        if len(parent_parts) < 5:
            return None
        if ".".join(parent_parts[:-3]) == prefix:
            return parent
    return None


def _needs_hook(item: Any, leaf_too: bool = True) -> bool:
    return (
        isinstance(item, torch.Tensor)
        and torch.is_grad_enabled()
        and item.requires_grad
        and (leaf_too or item.grad_fn is not None)
    )


def _hooked(setup: Any, value: Any) -> Any:
    """msprobe's wrap_setup_backward_hook: every tensor in ``value`` that needs a gradient, however nested, goes
    through the BackwardHook's identity node; the structure is rebuilt around the new tensors."""
    found: list[torch.Tensor] = []

    def collect(item: Any) -> None:
        if _needs_hook(item):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            for v in item:
                collect(v)
        elif isinstance(item, dict):
            for v in item.values():
                collect(v)

    collect(value)
    tensors = iter(setup(tuple(found)))
    try:
        return _rebuild(value, tensors, True)
    except Exception:  # noqa: BLE001 - msprobe keeps the call's own values when the rebuild fails
        return value


def _rebuild(item: Any, tensors: Any, leaf_too: bool) -> Any:
    if _needs_hook(item, leaf_too):
        result = next(tensors)
        if getattr(result, "_base", None) is not None:
            meta = torch._C._autograd
            if meta._get_creation_meta(result) != meta.CreationMeta(0):
                meta._set_creation_meta(result, meta.CreationMeta(0))
        return result
    if isinstance(item, list):
        for i, v in enumerate(item):
            item[i] = _rebuild(v, tensors, False)
        return item
    if isinstance(item, dict):
        for k, v in item.items():
            item[k] = _rebuild(v, tensors, False)
        return item
    if isinstance(item, tuple):
        if hasattr(item, "_fields"):
            return type(item)(*[_rebuild(v, tensors, True) for v in item])
        return type(item)([_rebuild(v, tensors, True) for v in item])
    return item
