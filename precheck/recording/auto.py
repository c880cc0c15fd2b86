"""Recording a program that knows nothing of precheck (``precheck record -- python train.py``): the wrappers go on
when the program imports torch, and steps are told by the optimizer.

A step is what runs from one ``optimizer.step()`` to the next: step 0 from the model's first forward (where
msprobe's users call start(): precheck.recording.first_forward; in a program without a model, its first recorded
call) to the first optimizer step, which is not itself recorded (msprobe's make_dump stops before it too), or to
a GradScaler's ``step`` that skipped it (precheck.recording.skipped). A program without an optimizer is one step,
ended at exit. Once the chosen steps are behind, the wrappers come off
and the rest of the program runs as it would without precheck.

PRECHECK_RECORD stays in the environment, so every Python process of the command can record: each rank a launcher
starts (torchrun's, ``torch.multiprocessing.spawn``'s), under ``rank<R>``. A process writes a dump only once it
records a call, so a launcher that only starts ranks (torchrun's agent, a parent that spawns) writes none. An
interpreter multiprocessing spawns records only once it is a rank of torch.distributed: a DataLoader's worker
never is. torch's own programs (torchrun's agent, inductor's compile workers) and a fork server (precheck's
checking pool's) are not recorded at all; a forked child records nothing (precheck.recording.session).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.abc
import importlib.util
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from precheck.core.older_python import orig_argv
from precheck.recording.ending import uncaught
from precheck.recording.runlog import note

__all__ = ["ENV", "options_env", "when_torch_loads"]

ENV = "PRECHECK_RECORD"


def options_env(
    out: Path,
    task: str,
    steps: Sequence[int],
    risk_level: str,
    check: dict | None = None,
    level: str = "L1",
    log: str | None = None,
) -> str:
    """PRECHECK_RECORD's value: what the recorded program is to record, how it checks it (``check``), and the
    run's log it tells what it wrote (``log``: precheck.recording.runlog)."""
    options = {"out": str(out), "task": task, "level": level, "steps": list(steps), "risk_level": risk_level}
    return json.dumps({**options, "check": check, "log": log})


def when_torch_loads() -> None:
    """Start recording as soon as torch is imported (now, if it already is)."""
    if "torch" in sys.modules:
        _start()
    else:
        sys.meta_path.insert(0, _TorchWatch())


class _TorchWatch(importlib.abc.MetaPathFinder):
    """Finds nothing itself; lets the import of ``torch`` run its course, then starts the recorder."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _start()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _start() -> None:
    if not _may_train():
        return
    _refuse_an_unsupported_torch()
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    from precheck.recording.first_forward import FirstForward
    from precheck.recording.session import Recorder, RecordOptions
    from precheck.recording.skipped import SkippedSteps

    config = json.loads(os.environ[ENV])
    options = RecordOptions(
        task=config["task"], level=config["level"], steps=tuple(config["steps"]), risk_level=config["risk_level"]
    )
    log = config.get("log")
    # a fresh interpreter multiprocessing started (its parent is known only once its target runs, after torch
    # may be imported: spawn's prepare imports the parent's main module, with the parent's sys.argv)
    spawned = "--multiprocessing-fork" in orig_argv()
    told = functools.partial(note, log) if log else None
    recorder = Recorder(Path(config["out"]), options, log=told, empty_dumps=False, ranks_only=spawned)
    online = None
    if config.get("check"):
        from precheck.recording.online import attach

        online = attach(recorder, config["check"])
    first = FirstForward(recorder)  # before the wrappers' module hooks: the mix level's see the forward it starts
    skipped: list[SkippedSteps] = []  # the GradScaler wrapper, once on

    def before_step(*_: object) -> None:
        recorder.stop()

    def after_step(*_: object) -> None:
        for wrapper in skipped:
            wrapper.stepped()
        first.drop()  # a step ended before any forward: the next one starts here
        with _told(log, raising=True):
            recorder.step()
        if recorder.done:
            recorder.close()
            unhook()  # nothing more is recorded: SIGTERM is the program's own again
            for wrapper in skipped:
                wrapper.remove()
        else:
            recorder.start()

    def finish(partial: str | None = None) -> None:
        """The open step closed at the program's end, said partial when the program ends mid-step (``partial``,
        or an exception nobody caught: Ctrl-C's KeyboardInterrupt); what fails then reaches precheck record
        through the log (raised in an exit handler, Python would print it and exit 0 all the same)."""
        try:
            with _told(log, raising=not log):
                recorder.close(partial or uncaught())
        finally:
            if online is not None:
                online.close()

    register_optimizer_step_pre_hook(before_step)
    register_optimizer_step_post_hook(after_step)
    skipped.append(SkippedSteps(lambda: (before_step(), after_step())))  # a GradScaler's skipped step ends one too
    atexit.register(_still_interrupted)  # registered first, runs right after finish
    atexit.register(finish)
    unhook = _finish_on_sigterm(finish)
    recorder.install()
    note(log, "installed")


@contextlib.contextmanager
def _told(log: str | None, raising: bool) -> Iterator[None]:
    """A failure of the recording (an online check's, raised at its step's end) is told to precheck record in one
    line, and raised on to the program if ``raising``."""
    try:
        yield
    except Exception as e:
        from precheck.execution.runner import one_line

        note(log, "failed", None, one_line(e))
        if raising:
            raise


def _still_interrupted() -> None:
    """A program ended by a KeyboardInterrupt nobody caught (Ctrl-C) exits 130, killed by SIGINT, as it does
    without precheck. Python keeps a flag once its main module ends so and, after the exit handlers, dies by
    SIGINT; but any code it runs from a string (``exec``, ``eval``: the methods of a dataclass or a namedtuple
    made or imported then) clears that flag, and the online check's close at exit runs such code: the program
    exited 1. A KeyboardInterrupt raised from a string sets the flag again, with no ctypes. sys.last_value
    tells, as in uncaught, how the program ended (a handler of the program's own that ran before precheck's
    and cleared the flag is undone too)."""
    if isinstance(getattr(sys, "last_value", None), KeyboardInterrupt):
        with contextlib.suppress(KeyboardInterrupt):
            exec("raise KeyboardInterrupt")


def _finish_on_sigterm(finish: Callable[[str], None]) -> Callable[[], None]:
    """SIGTERM (precheck record passes its own on) ends the program as it would without precheck, killed by the
    signal, once ``finish`` has closed the open dump: Python's own SIGTERM runs no exit handler. A program
    that handles SIGTERM itself keeps its handler. Returns what puts the default back once the recording is
    over (a Python handler waits for the main thread's next bytecode: a rank stuck in a collective would ignore
    its launcher's SIGTERM)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return lambda: None

    def on_sigterm(signum: int, frame: object) -> None:
        signal.signal(signum, signal.SIG_IGN)  # a second SIGTERM must not cut the close short
        try:
            finish("the program was terminated by SIGTERM before the step ended")
        finally:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)

    def unhook() -> None:
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return unhook


def _refuse_an_unsupported_torch() -> None:
    """A torch below precheck's floor, or one lacking a hook the recorder needs, stops the program at its import of
    torch, before it runs a step: one line on stderr and in the run's log (precheck record says it), exit 2. The
    launcher checked its own torch already; this is the program's, which may be another interpreter's."""
    from precheck.compat import RECORDING_NEEDS, lacking
    from precheck.torch_range import TorchUnsupported, check_torch

    version = str(sys.modules["torch"].__version__)
    try:
        check_torch("precheck record", version, warn_newer=False)  # the launcher warned once already
        missing = lacking(RECORDING_NEEDS)
        if missing:
            raise TorchUnsupported(f"torch {version} has no {missing[0]}, which precheck record needs")
    except TorchUnsupported as e:
        why = f"{e}; the program was stopped at its import of torch, before anything ran"
        log = json.loads(os.environ[ENV]).get("log")
        if log:
            note(log, "failed", None, why)  # precheck record says it
        else:
            print(f"precheck: error: {why}", file=sys.stderr)
        raise SystemExit(2) from None


def _may_train() -> bool:
    """Whether this process may be a training's: not one of torch's own programs (``python -m
    torch.distributed.run``'s agent, an inductor compile worker) nor a multiprocessing fork server (precheck's
    checking pool forks its workers from one; a forked child cannot record anyway)."""
    program = Path(sys.argv[0] if sys.argv else "").resolve()
    if program.is_relative_to(Path(sys.modules["torch"].__file__).parent):  # type: ignore[arg-type]
        return False
    return not any("multiprocessing.forkserver" in arg for arg in orig_argv())
