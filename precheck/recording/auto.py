"""Recording a program that knows nothing of precheck (``precheck record -- python train.py``): the recorder
starts when the program imports torch, and steps are told by the optimizer.

A step is what runs from one ``optimizer.step()`` to the next: step 0 from the import of torch to the first
optimizer step, which is not itself recorded (msprobe's make_dump stops before it too). A program without an
optimizer is one step, ended at exit. Once the chosen steps are behind, the wrappers come off and the rest of
the program runs as it would without precheck.

PRECHECK_RECORD stays in the environment, so every Python process of the command can record: each rank a launcher
starts (torchrun's, ``torch.multiprocessing.spawn``'s), under ``rank<R>``. A process writes a dump only once it
records a call, so a launcher that only starts ranks (torchrun's agent, a parent that spawns) writes none. An
interpreter multiprocessing spawns records only once it is a rank of torch.distributed: a DataLoader's worker
never is. torch's own programs (torchrun's agent, inductor's compile workers) and a fork server (precheck's
checking pool's) are not recorded at all; a forked child records nothing (precheck.recording.session).
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["ENV", "options_env", "when_torch_loads"]

ENV = "PRECHECK_RECORD"


def options_env(
    out: Path, task: str, steps: Sequence[int], risk_level: str, check: dict | None = None, level: str = "L1"
) -> str:
    """PRECHECK_RECORD's value: what the recorded program is to record, and how it checks it (``check``)."""
    options = {"out": str(out), "task": task, "level": level, "steps": list(steps), "risk_level": risk_level}
    return json.dumps({**options, "check": check})


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
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    from precheck.recording.session import Recorder, RecordOptions

    config = json.loads(os.environ[ENV])
    options = RecordOptions(
        task=config["task"], level=config["level"], steps=tuple(config["steps"]), risk_level=config["risk_level"]
    )
    # a fresh interpreter multiprocessing started (its parent is known only once its target runs, after torch
    # may be imported: spawn's prepare imports the parent's main module, with the parent's sys.argv)
    spawned = "--multiprocessing-fork" in sys.orig_argv
    recorder = Recorder(Path(config["out"]), options, empty_dumps=False, ranks_only=spawned)
    if config.get("check"):
        from precheck.recording.online import attach

        atexit.register(attach(recorder, config["check"]).close)  # after recorder.close, registered below

    def before_step(*_: object) -> None:
        recorder.stop()

    def after_step(*_: object) -> None:
        recorder.step()
        if recorder.done:
            recorder.close()
        else:
            recorder.start()

    register_optimizer_step_pre_hook(before_step)
    register_optimizer_step_post_hook(after_step)
    atexit.register(recorder.close)
    recorder.start()


def _may_train() -> bool:
    """Whether this process may be a training's: not one of torch's own programs (``python -m
    torch.distributed.run``'s agent, an inductor compile worker) nor a multiprocessing fork server (precheck's
    checking pool forks its workers from one; a forked child cannot record anyway)."""
    program = Path(sys.argv[0] if sys.argv else "").resolve()
    if program.is_relative_to(Path(sys.modules["torch"].__file__).parent):  # type: ignore[arg-type]
        return False
    return not any("multiprocessing.forkserver" in arg for arg in sys.orig_argv)
