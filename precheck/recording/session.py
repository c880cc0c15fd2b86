"""A recording: msprobe's L1 dump of chosen steps of a training run, written by precheck without msprobe.

What is recorded, under which name and in which order is msprobe 26.2's (its PyTorch dumper): the outermost
call of each API its list wraps, named ``Prefix.api.N.forward`` with N counted per name and reset at each step;
the forward record written when the call returns, in the order calls start; a backward record
``Prefix.api.N.backward`` when autograd runs the node that made the call's first output (its ``input`` the
gradients of that node's outputs, its ``output`` those of its inputs), also after the step's forward has stopped
and until the next step begins. Calls msprobe's risk level leaves out (a view, a cast: ``risk_level``) are
counted and hide the calls inside them, and are not written. At the ``mix`` level module records and the call
tree come beside them (precheck.recording.modules).

Threads: the calls of every thread of the process are recorded, the counter per name shared by them all, as
msprobe's one module_count is. A call takes its number when it starts, so two calls in flight at once never
share one (msprobe numbers a call when it returns, and names two such calls alike); one thread alone gets
msprobe's numbers. The recorder's bookkeeping (the counters, dump.json, stack.json, the tensor files' writer,
the backward and module records) is done under one lock; the user's function runs outside it, so threads still
run concurrently and a call made inside a recorded one never waits on it. A forked child (a DataLoader worker, a
helper the program starts) records nothing and never touches the parent's files: the recorder's step(), close()
and its atexit hook do nothing there.
"""

from __future__ import annotations

import atexit
import heapq
import linecache
import os
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from api_registry.recording import LEVELS, RISK_LEVELS, TASKS, kept_by_risk, unwritten
from precheck.errors import OptionError
from precheck.execution.runner import one_line
from precheck.recording.dumpfile import DumpFile
from precheck.recording.encode import Encoder, data_names
from precheck.recording.ending import uncaught
from precheck.recording.files import TensorFiles
from precheck.recording.modules import ModuleHooks
from precheck.recording.pending import Pending, works_of
from precheck.recording.wrap import installed, quiet

__all__ = ["Recorder", "RecordOptions"]

# msprobe writes no backward record for a dropout whose p is 0 (its DROPOUT_API_LIST)
_DROPOUTS = frozenset(
    f"{p}.{n}." for p, names in (("Functional", ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
    "feature_alpha_dropout")), ("Torch", ("dropout", "dropout_"))) for n in names
)  # fmt: skip
_OWN_FILES = str(Path(__file__).parent)
CHECKERS = "precheck-"  # the threads precheck checks cases on are named so: their calls are not the step's


@dataclass(frozen=True)
class RecordOptions:
    """What to record: msprobe's config keys of the same names (``steps`` empty: every step)."""

    task: str = "tensor"
    level: str = "L1"
    steps: tuple[int, ...] = (0,)
    risk_level: str = "FOCUS"
    stack: bool = True

    def __post_init__(self) -> None:
        for value, allowed, what in (
            (self.task, TASKS, "task"),
            (self.level, LEVELS, "level"),
            (self.risk_level, RISK_LEVELS, "risk level"),
        ):
            if value not in allowed:
                raise OptionError(f"{what} {value!r} is not one of {', '.join(allowed)}")
        if any(s < 0 for s in self.steps):
            raise OptionError("steps are counted from 0")


@dataclass
class Recorder:
    """msprobe's PrecisionDebugger without msprobe: :meth:`start`, :meth:`stop` and :meth:`step` as its, the
    dump written under ``dump_path/step{N}/proc{pid}`` (``rank{R}`` in a distributed run)."""

    dump_path: Path
    options: RecordOptions = field(default_factory=RecordOptions)
    # told of each record once written, and whether a backward record of the call is awaited
    on_record: Callable[[str, dict, bool, DumpFile], None] | None = None
    on_step_end: Callable[[DumpFile], None] | None = None  # told when a step's records are all written
    store: Path | None = None  # where tensor files go instead of the dump's folder (an online check's)
    store_save: Callable[[torch.Tensor, Path], None] | None = None  # how they are saved there (never raising)
    store_release: Callable[[list[str]], None] | None = None  # how they are removed from there
    files: str = "all"  # which tensor files the dump's folder keeps (recording.dumpfile.DumpFile's ``files``)
    log: Callable[..., None] | None = None  # told what is written (precheck.recording.runlog.note's tail)
    # False: no dump before this process records its first call (precheck record --: a launcher, a worker)
    empty_dumps: bool = True
    ranks_only: bool = False  # True: calls count once torch.distributed is initialised (an mp.spawn rank's)
    closes_when_done: bool = False  # the step() that ends the last chosen step also closes (the library's)
    on_close: Callable[[], None] | None = None  # told when the recorder closes (an online check's store released)
    # told of a recorded API (prefix, name) called before the first start(), which it may make (first_forward)
    waiting: Callable[[str, str], None] | None = None
    current_step: int = 0
    written: list[Path] = field(default_factory=list)  # the dump.json of each finished step
    results: list[Path] = field(default_factory=list)  # the result CSV of each step an online check graded
    _running: bool = False
    _chosen: bool = False  # this step was started as one to record: it has a dump, even with no record
    _dump: DumpFile | None = None
    _files: TensorFiles | None = None  # the tensor task's writer, off the step's path
    _counts: defaultdict = field(default_factory=lambda: defaultdict(int))
    _free: dict[str, list[int]] = field(default_factory=dict)  # numbers of calls that raised: the next call's
    _lost: list[str] = field(default_factory=list)  # this step's calls the recorder failed to record, and why
    _wrappers: installed | None = None
    _modules: ModuleHooks | None = None  # the mix level's module hooks
    _pending: Pending = field(default_factory=Pending)  # async collectives' records, completed with their work
    _pid: int = field(default_factory=os.getpid)
    _exit_hook: Callable[[], None] | None = None  # registered with atexit (close_at_exit), until close()
    # held for the recorder's own work, never while the user's function runs (re-entrant: a record's listeners)
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def install(self) -> None:
        """Put the wrappers on, recording nothing yet: a function the program takes from torch after this (a model
        that keeps ``F.gelu``) is the wrapper, recorded once the recording starts; so are the mix level's module
        hooks, which see a module only while recording."""
        if self._wrappers is None:
            self._wrappers = installed(self)
            self._wrappers.__enter__()
            self._pending.install()
        if self.options.level == "mix" and self._modules is None:
            self._modules = ModuleHooks(self)

    def start(self) -> None:
        """Record from now on, if this step is one of the chosen ones."""
        self.install()
        self._running = not self.options.steps or self.current_step in self.options.steps
        self._chosen = self._chosen or self._running

    def stop(self) -> None:
        """No forward call is recorded after this; backward records of this step still are, until step()."""
        self._running = False

    def step(self) -> None:
        """End this step: its dump is complete on disk, and counting starts again (in a forked child: nothing,
        the dump is the parent's)."""
        if not self.in_own_process():
            return
        self._pending.finish(lambda e: self._lose("Distributed.wait", e))
        with self.lock:
            self._running = False
            self._finish()
            self._counts.clear()
            self._free.clear()
            if self._modules is not None:
                self._modules.reset()
            self.current_step += 1
        if self.closes_when_done and self.done:
            self.close()

    def close(self, partial: str | None = None) -> None:
        """Finish the open step (``partial``: why it stops short, said in its dump.json) and take the wrappers
        off. A forked child that exits through atexit does nothing: the open dump, its tensor files' writer and
        the wrappers are the parent's (closing them there wrote the closing brackets into the parent's dump.json,
        or waited for ever for a writer thread the child has not)."""
        if not self.in_own_process():
            return
        if self._exit_hook is not None:
            atexit.unregister(self._exit_hook)
            self._exit_hook = None
        try:
            self._pending.finish(lambda e: self._lose("Distributed.wait", e))
            with self.lock:
                self._running = False
                self._finish(partial)
        finally:  # a step's end that raised (an online check's failure) still takes the wrappers off
            self._pending.uninstall()
            if self._wrappers is not None:
                self._wrappers.__exit__(None, None, None)
                self._wrappers = None
            if self._modules is not None:
                self._modules.remove()
                self._modules = None
            if self.on_close is not None:
                self.on_close()

    def close_at_exit(self) -> None:
        """Close at the process's exit if the program has not (a library's recorder, as ``record -- CMD`` closes
        its own): left open, its dump.json was torn or empty, its tensor files' writer was killed mid-file, and an
        online check's thread aborted the exit (134) and left its store in /dev/shm."""
        if self._exit_hook is None:
            self._exit_hook = self._closed_at_exit
            atexit.register(self._exit_hook)

    def _closed_at_exit(self) -> None:
        self._exit_hook = None  # running: nothing to unregister
        try:
            self.close(uncaught())
        except Exception as e:  # the program's exit code is its own: one line, not a traceback
            print(f"precheck: warning: closing the recording at exit: {one_line(e)}", file=sys.stderr)

    def __enter__(self) -> Recorder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def done(self) -> bool:
        """Every chosen step is behind: nothing more will be recorded."""
        return bool(self.options.steps) and self.current_step > max(self.options.steps)

    def in_own_process(self) -> bool:
        """Whether this is the process that made the recorder, not a child forked from it."""
        return os.getpid() == self._pid

    def recording(self) -> bool:
        """Whether a call made now is the step's: not in a forked child (a DataLoader worker) nor in precheck's
        own checking, and, with ``ranks_only``, in a rank of torch.distributed."""
        return (
            self._running
            and self.in_own_process()
            and not threading.current_thread().name.startswith(CHECKERS)
            and (not self.ranks_only or _distributed())
        )

    def call(self, prefix: str, api: str, func: Callable, args: tuple, kwargs: dict) -> Any:
        """One outermost call of a wrapped API (precheck.recording.wrap): run, and recorded if it is kept."""
        if self.waiting is not None and not self._running:
            self.waiting(prefix, api)
        if not self.recording():
            return func(*args, **kwargs)
        key = f"{prefix}.{api}."
        kept = kept_by_risk(api, self.options.risk_level)
        try:
            with self.lock:
                dump, count = self.dump(), self._number(key)
                name = f"{key}{count}.forward"
                record = self._inputs(dump, name, *_shown(prefix, api, args, kwargs)) if kept else {}
            stack = self.stack() if kept else None
        except Exception as e:  # the recorder's own work (an odd tensor, a full disk) never fails the user's call
            self._lose(key, e)
            return func(*args, **kwargs)
        grad = torch.is_grad_enabled()
        try:
            out = func(*args, **kwargs)
        except BaseException:
            with self.lock:
                if dump is self._dump:  # msprobe counts a call when it returns: the next call has its number
                    heapq.heappush(self._free.setdefault(key, []), count)
                    if kept:
                        self._discard(dump, data_names(record))
            raise
        try:
            self._returned(key, count, dump, (args, kwargs, out), record if kept else None, stack, grad)
        except Exception as e:
            self._lose(key, e)
        return out

    def _inputs(self, dump: DumpFile, name: str, args: tuple, kwargs: dict) -> dict:
        encoder = self.encoder(dump)
        with quiet():
            return {
                "input_args": encoder.values(args, f"{name}.input"),
                "input_kwargs": encoder.values(kwargs, f"{name}.kwargs"),
            }

    def _returned(
        self, key: str, count: int, dump: DumpFile, call: tuple, record: dict | None, stack: Any, grad: bool
    ) -> None:
        """A call that returned: its record written (``record`` None: a call the risk level leaves out)."""
        args, kwargs, out = call
        prefix = key.split(".", 1)[0]
        name, back = f"{key}{count}.forward", f"{key}{count}.backward"
        hooked = grad and not (key in _DROPOUTS and _dropout_p(args, kwargs) == 0)
        with self.lock, quiet():
            if dump is not self._dump:
                return  # another thread ended the step while the call ran: msprobe's records end at step()
            if self._modules is not None:  # a call left out is not written, but in construct.json
                self._modules.api(name)
            if record is None:
                if hooked and self._modules is not None:
                    _hook_backward(out, self.guard(back, lambda gi, go: self._backward(dump, back, None, None)))
                return
            works = works_of(out) if prefix == "Distributed" else []
            if works:  # its tensors are read once its work completes, the record held in its place till then
                dump.hold(name, record, stack)
                self._pending.add(works, lambda: self._completed(dump, name, record, [*args, *kwargs.values()]))
                return
            done = (
                _shown(prefix, key[len(prefix) + 1 : -1], [*args, *kwargs.values()])[0]
                if prefix == "Distributed"
                else _as_list(out)
            )
            record["output"] = self.encoder(dump).values(done, f"{name}.output")
            hooked = hooked and _hook_backward(out, self.guard(back, lambda gi, go: self._backward(dump, back, gi, go)))
            self._write(dump, name, record, stack, hooked)

    def _completed(self, dump: DumpFile, name: str, record: dict, done: list) -> None:
        """An async torch.distributed call's work has completed: its record gets its output (its arguments now, as
        msprobe's) and is written in its place (on whichever thread saw the work complete)."""
        with self.lock, quiet():
            if dump is not self._dump:
                return  # the step ended without it: its dump is closed, the record written without an output
            try:
                record["output"] = self.encoder(dump).values(done, f"{name}.output")
            except Exception as e:  # the recorder's own failure: the record stays, without its output
                self._lose(name.rsplit(".", 2)[0] + ".", e)
            dump.release(name)
            if self.on_record is not None:
                self.on_record(name, record, False, dump)

    def _lose(self, key: str, error: Exception) -> None:
        """A call the recorder failed to record: its step's dump.json says it is partial, and why."""
        with self.lock:
            self._lost.append(f"{key.rstrip('.')}: {one_line(error)}")

    def guard(self, where: str, hook: Callable[..., Any]) -> Callable[..., Any]:
        """``hook`` as torch calls it (an autograd node's, a module's), its failures kept out of the user's call as
        the forward wrapper's are: raised in a backward under torch.func.jacrev (a vmap's tensor has no value to
        take), they ended the training. The step's dump.json names ``where`` and why instead."""

        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return hook(*args, **kwargs)
            except Exception as e:
                self._lose(where, e)
                return None

        return guarded

    def _discard(self, dump: DumpFile, names: list[str]) -> None:
        """A call that raised has no record, so none of its files stays: its inputs' files are removed (its
        number is the next call's, whose files have its names)."""
        if not names:
            return
        if self.store is not None and dump.data_dir is not None and self.store_release is not None:
            self.store_release(names)
        elif self._files is not None and dump.data_dir is not None:
            self._files.discard([dump.data_dir / name for name in names])

    def _number(self, key: str) -> int:
        """The next number of ``key``'s calls, taken when the call starts."""
        free = self._free.get(key)
        if free:
            return heapq.heappop(free)
        self._counts[key] += 1
        return self._counts[key] - 1

    def _backward(self, dump: DumpFile, name: str, grad_inputs: Iterable | None, grad_outputs: Iterable | None) -> None:
        """A recorded call's backward record (``grad_inputs`` None: a call left out, only in construct.json); on
        whichever thread autograd runs the hook."""
        if not self.in_own_process():
            return  # a forked child running the parent's graph: the dump is the parent's
        with self.lock:
            if dump is not self._dump:
                return  # a backward of a step already written (msprobe's records end at step())
            if self._modules is not None:
                self._modules.api(name)
            if grad_inputs is None or grad_outputs is None:
                return
            with quiet():
                encoder = self.encoder(dump)
                record = {
                    "input": encoder.values(list(grad_outputs), f"{name}.input"),
                    "output": encoder.values(list(grad_inputs), f"{name}.output"),
                }
                self._write(dump, name, record, None, False)

    def encoder(self, dump: DumpFile, files: bool = True) -> Encoder:
        """How the values of a record of ``dump`` are written (their tensors saved where this recording keeps
        them; ``files`` False: named in the record, saved nowhere)."""
        if self.store is not None and dump.data_dir is not None:
            return Encoder(self.store, self.store_save if files else lambda tensor, path: None)
        if not files:
            return Encoder(dump.data_dir, save=lambda tensor, path: None)
        if self._files is None:
            self._files = TensorFiles()
        return Encoder(dump.data_dir, save=self._files.save)  # an online check reads its files at once: not here

    def _write(self, dump: DumpFile, name: str, record: dict, stack: tuple[str, ...] | None, awaits: bool) -> None:
        dump.add(name, record, stack)
        if self.on_record is not None:
            self.on_record(name, record, awaits, dump)

    def stack(self) -> tuple[str, ...] | None:
        """The calling frames for stack.json, None when it is not written."""
        return _stack(3) if self.options.stack else None

    def dump(self) -> DumpFile:
        """This step's dump, opened at its first record."""
        if self._dump is None:
            self._dump = DumpFile(self._folder(), self.options.task, self.options.level, self.files)
            self.note("dump-open", self._dump.path)
        return self._dump

    def note(self, kind: str, path: object = None, why: str | None = None) -> None:
        """Tell ``precheck record`` of a file written (its run's log, precheck.recording.runlog)."""
        if self.log is not None:
            self.log(kind, path, why)

    def _folder(self) -> Path:
        where = f"rank{torch.distributed.get_rank()}" if _distributed() else f"proc{os.getpid()}"
        return Path(self.dump_path) / f"step{self.current_step}" / where

    def _finish(self, partial: str | None = None) -> None:
        lost, self._lost = self._lost, []
        if self._chosen and self._dump is None and (self.empty_dumps or self.written):
            self.dump()  # msprobe writes a step's dump.json at start(): one that recorded nothing has data {}
        self._chosen = False
        files, self._files = self._files, None
        dump, self._dump = self._dump, None
        try:
            if files is not None:
                files.close()  # the step's tensor files are on disk before its dump.json is whole
            if dump is not None and self.on_step_end is not None:
                self.on_step_end(dump)  # an online check's failure is raised here
        finally:  # whatever failed, the step's dump.json is closed and readable
            if dump is not None:
                unsaved = {} if files is None else files.failed
                partial = _partial(partial, lost, unsaved)
                dump.close(None if self._modules is None else self._modules.construct, partial, set(unsaved))
                self.written.append(dump.path)
                self.note("dump", dump.path, partial)


def _partial(partial: str | None, lost: list[str], unsaved: dict[str, str]) -> str | None:
    """Why a step's dump.json stops short: the program's end (``partial``), the calls the recorder failed to
    record, the tensor files it could not save (their records name no file, as msprobe writes a tensor it
    cannot save)."""
    parts = [partial]
    if lost:
        parts.append(f"{len(lost)} call(s) the recorder failed to record, the first {lost[0]}")
    if unsaved:
        name, why = next(iter(unsaved.items()))
        parts.append(f"{len(unsaved)} tensor file(s) not saved (their records name none), the first {name}: {why}")
    return "; ".join(p for p in parts if p) or None


def _distributed() -> bool:
    """Whether this process is a rank of an initialised torch.distributed group."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _as_list(out: Any) -> Any:
    """msprobe's output field: a tuple's items, a namedtuple by field, anything else as a list of one. A
    collective's (``Distributed.*``) is its arguments once it has run, as msprobe writes it: it works in place."""
    if isinstance(out, list) or (isinstance(out, tuple) and not hasattr(out, "_fields")):
        return list(out)
    return out if isinstance(out, tuple) else [out]


def _shown(prefix: str, api: str, args: Any, kwargs: dict | None = None) -> tuple[Any, dict | None]:
    """A call's arguments as its record shows them: msprobe writes a collective's buffer that the call fills as
    null (api_registry.recording.unwritten), in its inputs (``kwargs`` given) or in its output (``kwargs`` None:
    ``args`` is the arguments after the call)."""
    hidden = unwritten(prefix, api)
    positions = hidden.output if kwargs is None else hidden.args
    if positions:
        args = type(args)(None if i in positions else v for i, v in enumerate(args))
    if kwargs and hidden.kwargs:
        kwargs = {k: None if k in hidden.kwargs else v for k, v in kwargs.items()}
    return args, kwargs


def _first_tensor(value: Any) -> Any:
    while isinstance(value, (list, tuple, dict)) and value:
        value = next(iter(value.values())) if isinstance(value, dict) else value[0]
    return value


def _hook_backward(out: Any, hook: Callable[[Any, Any], None]) -> bool:
    """msprobe's backward record hangs on the autograd node that made the first output tensor; whether there is
    one."""
    var = _first_tensor(out)
    if isinstance(var, torch.Tensor) and var.requires_grad and var.grad_fn is not None:
        var.grad_fn.register_hook(hook)
        return True
    return False


def _dropout_p(args: tuple, kwargs: dict) -> Any:
    return args[1] if len(args) >= 2 else kwargs.get("p", 0.5)


def _stack(skip: int) -> tuple[str, ...]:
    """The caller's frames, innermost first, without the recorder's own: stack.json's entry, as msprobe writes
    it."""
    frames = []
    frame = sys._getframe(skip)
    while frame is not None:
        path, line = frame.f_code.co_filename, frame.f_lineno
        text = linecache.getline(path, line).strip()
        if text and not path.startswith(_OWN_FILES):
            frames.append(f"File {path}, line {line}, in {frame.f_code.co_name}, \n {text}")
        frame = frame.f_back
    return tuple(frames)
