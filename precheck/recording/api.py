"""The recorder as a library call: ``with precheck.record("dump/", step=0): ...`` around one training step."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from precheck.execution.options import CheckOptions
from precheck.recording.session import Recorder, RecordOptions

__all__ = ["record"]


@contextmanager
def record(
    dump_path: str | os.PathLike,
    step: int = 0,
    *,
    task: str = "tensor",
    level: str = "L1",
    risk_level: str = "FOCUS",
    check: bool | CheckOptions = False,
    backend: str = "inprocess",
    workers: int = 1,
    scheduler: str | None = None,
    keep_failing: bool = False,
    store_size: int | None = None,
) -> Iterator[Recorder]:
    """Record the block as step ``step`` of an msprobe dump (``level`` L1, or mix: module records too) under
    ``dump_path`` (``dump_path/step{step}/proc{pid}/dump.json``). Put the backward inside the block: its
    records are the step's until it ends.

    ``check`` (True, or the CheckOptions to grade by) checks each call while the block runs (precheck.recording.
    online): no tensor file is written (``keep_failing``: only those of calls graded error), and the run's CSVs
    and report are in ``dump_path`` when the block ends; ``backend``, ``workers`` and ``scheduler`` say where
    the cases run, as run_ut's; ``store_size``: the most bytes of tensors waiting in shared memory for their
    check (None: half its free space), a call beyond it a SKIP row that says so."""
    recorder = Recorder(Path(dump_path), RecordOptions(task=task, level=level, steps=(step,), risk_level=risk_level))
    recorder.current_step = step
    online = None
    if check is not False:
        from precheck.recording.online import OnlineCheck

        options = check if isinstance(check, CheckOptions) else CheckOptions()
        online = OnlineCheck(Path(dump_path), options, backend, workers, scheduler, keep_failing, store_size=store_size)
        online.attach(recorder)
    try:
        with recorder:
            yield recorder
    finally:
        if online is not None:
            online.close()
