"""The root of every error a user's input or machine can cause, so the command line tells them from bugs in one place.

A :class:`PrecheckError` is a dump, a CSV, an option or a folder that cannot be used: the CLI prints its message as
one line and exits with its ``exit_code``. Any other exception reaching the CLI is a bug in precheck: a traceback,
a line asking for a report, and :data:`BUG_EXIT_CODE`, never the exit code of unusable input. Errors that only
carry a case's SKIP reason between stages (a call MindSpore cannot run, a law that cannot check a call) are not
PrecheckErrors: they never reach the CLI. Torch-free: every command imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

USAGE_EXIT_CODE = 2  # unusable input, also argparse's code for a command line it cannot parse
BUG_EXIT_CODE = 70  # EX_SOFTWARE (sysexits.h): an internal error, apart from 1 (--fail-on) and 2
# A run_ut that graded nothing (every API SKIP: its tensor files missing, every call unsupported): no evidence is
# not a pass, so a CI job goes red, apart from 1 (a gate on what was graded) and 2 (unusable input).
NOTHING_GRADED_EXIT_CODE = 3


class PrecheckError(Exception):
    """Input or an environment precheck cannot use; the message names the file, record or option and what is
    wrong. Subclasses keep the built-in base a library caller may catch (ValueError, OSError, ...)."""

    exit_code: ClassVar[int] = USAGE_EXIT_CODE

    def line(self, resume: Callable[[Path], str]) -> str:
        """The CLI's one line; ``resume`` gives the command that continues the run whose result CSV it is given
        (for an error that stops a run with rows on disk)."""
        return str(self)


class OptionError(PrecheckError, ValueError):
    """An option's value, or two options together, cannot be used (``--backend dask`` without ``--scheduler``)."""
