"""``precheck record -- COMMAND``: run a training command with the recorder started inside its Python processes.

The command runs as it is, in its own process, with precheck's boot folder first on PYTHONPATH (its
sitecustomize starts the recorder when the program imports torch: precheck.recording.auto). Nothing of the
program is rewritten. Torch-free: this process only starts the command and says what it left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from precheck.errors import OptionError, PrecheckError
from precheck.recording.auto import ENV, options_env
from precheck.recording.runlog import Written, clean_up, read_log

__all__ = ["Recorded", "run_recorded"]

BOOT = Path(__file__).parent / "boot"


class CommandError(PrecheckError):
    """The command to record cannot be started."""


@dataclass(frozen=True)
class Recorded:
    returncode: int  # the command's, or 128 + N when a signal N killed it (as a shell says)
    signal: int | None  # the signal that killed the command, if one did
    written: Written  # what its processes wrote, as they told it (precheck.recording.runlog)

    @property
    def dumps(self) -> list[Path]:
        """dump.json of each recorded step and process, closed whole, oldest first."""
        return self.written.dumps

    @property
    def results(self) -> list[Path]:
        """Result CSVs an online check wrote (partial ones included: ``written.partial`` says which)."""
        return self.written.results


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
    """Run ``command`` recording ``steps`` into ``out``; its exit code and what its processes wrote (told through
    the run's log, a file of this run only: a concurrent run into ``out`` is not this one's)."""
    if not command:
        raise OptionError("record needs the command to run after --, e.g. precheck record -o dump -- python train.py")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    fd, log = tempfile.mkstemp(prefix="precheck-record-", suffix=".log")
    os.close(fd)
    try:
        env = dict(os.environ)
        env[ENV] = options_env(out, task, steps, risk_level, check, level, log)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT), env.get("PYTHONPATH")) if p)
        try:
            child = subprocess.Popen(list(command), env=env)
        except OSError as e:
            raise CommandError(f"cannot run {command[0]!r}: {e.strerror or e}") from None
        code = _wait(child)
        written = read_log(Path(log))
    finally:
        os.unlink(log)
    clean_up(written)
    killed = -code if code < 0 else None
    return Recorded(128 + killed if killed else code, killed, written)


_SI_KERNEL = 0x80  # siginfo's si_code of a signal the kernel sent: Ctrl-C at a terminal, to its whole group


def _wait(child: subprocess.Popen) -> int:
    """The command's exit status (negative: the signal that killed it). A SIGTERM to precheck, or a SIGINT sent
    to it alone, is passed on to the command, and precheck waits for it to close its dumps; Ctrl-C at a
    terminal reached the command already. (subprocess's own wait kills the command 0.25 s after a Ctrl-C, before
    its dump is closed, and a SIGTERM would leave it running, recording, with no parent.)"""
    if not hasattr(signal, "sigtimedwait") or threading.current_thread() is not threading.main_thread():
        return child.wait()
    watched = {signal.SIGINT, signal.SIGTERM, signal.SIGCHLD}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    try:
        while child.poll() is None:
            got = signal.sigtimedwait(watched, 1.0)  # a SIGCHLD wakes it; the timeout only guards a lost one
            if got is not None and got.si_signo != signal.SIGCHLD and got.si_code != _SI_KERNEL:
                child.send_signal(got.si_signo)
        return child.returncode
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
