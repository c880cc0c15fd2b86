"""``precheck record -- COMMAND``: run a training command with the recorder started inside its Python processes.

The command runs as it is, in its own process, with precheck's boot folder first on PYTHONPATH (its
sitecustomize starts the recorder when the program imports torch: precheck.recording.auto). Nothing of the
program is rewritten. Torch-free: this process only starts the command and says what it left behind.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from precheck.errors import OptionError, PrecheckError
from precheck.recording.auto import ENV, options_env
from precheck.schema import RESULT

__all__ = ["Recorded", "run_recorded"]

BOOT = Path(__file__).parent / "boot"


class CommandError(PrecheckError):
    """The command to record cannot be started."""


@dataclass(frozen=True)
class Recorded:
    returncode: int
    dumps: list[Path]  # dump.json of each recorded step and process, oldest first
    results: list[Path]  # result CSVs an online check wrote


def run_recorded(
    out: str | os.PathLike,
    command: Sequence[str],
    *,
    task: str = "tensor",
    level: str = "L1",
    steps: Sequence[int] = (0,),
    risk_level: str = "FOCUS",
    check: dict | None = None,
) -> Recorded:
    """Run ``command`` recording ``steps`` into ``out``; its exit code and what was written."""
    if not command:
        raise OptionError("record needs the command to run after --, e.g. precheck record -o dump -- python train.py")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env[ENV] = options_env(out, task, steps, risk_level, check, level)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT), env.get("PYTHONPATH")) if p)
    started = time.time()
    try:
        code = subprocess.call(list(command), env=env)
    except OSError as e:
        raise CommandError(f"cannot run {command[0]!r}: {e.strerror or e}") from None
    return Recorded(
        code,
        _newer(out.glob("step*/*/dump.json"), started),
        _newer(out.glob(RESULT.format("*")), started),
    )


def _newer(paths: object, since: float) -> list[Path]:
    found = [(p.stat().st_mtime, p) for p in paths if p.stat().st_mtime >= since - 1]  # type: ignore[attr-defined]
    return [p for _, p in sorted(found)]
