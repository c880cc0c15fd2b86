"""The recorder as a library call, in either of msprobe's placements: ``with precheck.record("dump/", step=0): ...``
around one training step, or made before the model as msprobe's guide makes its PrecisionDebugger::

    recorder = precheck.record("dump/", steps=[0])  # the wrappers go on now, before the model is built
    model = build()
    for x in data:
        recorder.start()
        model(x).sum().backward()
        recorder.stop()
        recorder.step()

The second records what a model took from torch when it was built (transformers' GELUActivation keeps
``nn.functional.gelu`` itself): the wrappers are on before the model takes them. Only what runs between start()
and stop() is recorded (its backward until step()).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from precheck.execution.options import CheckOptions
from precheck.recording.session import Recorder, RecordOptions

__all__ = ["record"]


def record(
    dump_path: str | os.PathLike,
    step: int = 0,
    *,
    steps: Sequence[int] | None = None,
    task: str = "tensor",
    level: str = "L1",
    risk_level: str = "FOCUS",
    check: bool | CheckOptions = False,
    backend: str = "inprocess",
    workers: int = 1,
    scheduler: str | None = None,
    keep_failing: bool = False,
    store_size: int | None = None,
) -> Recorder:
    """A recorder of msprobe's L1 dump (``level`` L1, or mix: module records too) under ``dump_path``
    (``dump_path/step{N}/proc{pid}/dump.json``), its wrappers on from now. As a ``with`` block it records the block
    as step ``step``: put the backward inside it, its records are the step's until it ends. Made before the
    model, its start(), stop() and step() are msprobe's PrecisionDebugger's: ``steps`` are the steps recorded,
    counted by step() from 0 (default: ``[step]``, counted from ``step``); the wrappers come off at the step()
    that ends the last of them, or at close().

    ``check`` (True, or the CheckOptions to grade by) checks each call while the step runs (precheck.recording.
    online): no tensor file is written (``keep_failing``: only those of calls graded error), and the run's CSVs
    and report are in ``dump_path`` when the step ends; ``backend``, ``workers`` and ``scheduler`` say where
    the cases run, as run_ut's; ``store_size``: the most bytes of tensors waiting in shared memory for their
    check (None: half its free space), a call beyond it a SKIP row that says so."""
    chosen = (step,) if steps is None else tuple(steps)
    options = RecordOptions(task=task, level=level, steps=chosen, risk_level=risk_level)
    recorder = Recorder(Path(dump_path), options, closes_when_done=True)
    recorder.current_step = step if steps is None else 0
    if check is not False:
        from precheck.recording.online import OnlineCheck

        options = check if isinstance(check, CheckOptions) else CheckOptions()
        online = OnlineCheck(Path(dump_path), options, backend, workers, scheduler, keep_failing, store_size=store_size)
        online.attach(recorder)
        recorder.on_close = online.close
    recorder.install()
    recorder.close_at_exit()
    return recorder
