"""What the fork server (scheduling/forkserver.py) loads before it forks workers: the worker's module, with torch,
and the API table, so a forked worker starts with both in memory instead of building them for a second.

The server ends when the run that started it does, and then leaves at once: the interpreter's teardown of every
module torch loaded took 0.4-0.5 s, during which the server still held the run's stdout and stderr, so whoever
read them through a pipe (a CI log, ``precheck run_ut ... | tee``, ``subprocess.run(capture_output=True)``)
waited that long after the run's last line (``-n 2`` on the heavy bf16 step: 7.67 s through a pipe against 7.15 s
to a file). Its workers, forks of it, end by ``os._exit`` and never run this."""

import atexit
import os
import sys

from api_registry import lookup
from precheck.scheduling import process  # noqa: F401  (imported for what it imports: torch, the checks)

lookup("Torch.add")

_leaving = []


def _leave() -> None:
    """Every other exit handler (multiprocessing's own first among them), the streams flushed, then the end."""
    if _leaving:  # called again by the handlers' run below
        return
    _leaving.append(True)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


atexit.register(_leave)  # registered last, so run first: it runs the others itself
