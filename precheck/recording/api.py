"""The recorder as a library call: ``with precheck.record("dump/", step=0): ...`` around one training step."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from precheck.recording.session import Recorder, RecordOptions

__all__ = ["record"]


@contextmanager
def record(
    dump_path: str | os.PathLike, step: int = 0, *, task: str = "tensor", risk_level: str = "FOCUS"
) -> Iterator[Recorder]:
    """Record the block as step ``step`` of an msprobe L1 dump under ``dump_path`` (``dump_path/step{step}/
    proc{pid}/dump.json``). Put the backward inside the block: its records are the step's until it ends."""
    recorder = Recorder(Path(dump_path), RecordOptions(task=task, steps=(step,), risk_level=risk_level))
    recorder.current_step = step
    with recorder:
        yield recorder
