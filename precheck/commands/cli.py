"""``precheck`` command line: a thin layer over the library, one command per entry of registry.py.

Exit codes: 0 the run completed (whatever the statuses), 1 ``--fail-on`` tripped, 2 unusable input (one line on
stderr, no traceback), 130 interrupted by Ctrl-C, 143 by SIGTERM (every finished row is already on disk, and the
message names the command that continues the run, as it does for a run stopped by a full disk, exit code 2), 70 a
bug in precheck (its traceback, and a line asking for a report). Unusable input is a PrecheckError, or an OSError
of a file the command reads or writes; both are caught in one place, :func:`main`.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import NoReturn

from precheck.commands.parser import build_parser
from precheck.commands.run_ut_cli import resume_command
from precheck.errors import BUG_EXIT_CODE, USAGE_EXIT_CODE, PrecheckError
from precheck.escape import escape
from precheck.paths import write_problem
from precheck.torch_range import check_torch

__all__ = ["build_parser", "main", "program"]

# Each handler imports what it runs: `precheck --help`, an argument error and the commands that only read CSVs
# (regress, api_precision_compare) never load torch.


def _error(reason: object) -> None:
    """The one line an unusable input gets on stderr; text from a dump in it is escaped (no terminal control)."""
    print(f"precheck: error: {escape(str(reason))}", file=sys.stderr)


BUG_HINT = (
    "precheck: internal error: this is a bug in precheck, not a problem with your input; please report it with the "
    "traceback above and the command line"
)


def main(argv: list[str] | None = None) -> int:
    """The command line ``argv`` (None: this program's own, ``sys.argv``); returns the exit code. The one place
    where a command's errors become exit codes: unusable input is one line, anything else a bug's traceback."""
    typed = sys.argv[1:] if argv is None else argv
    try:
        code = _main(typed)
    except BrokenPipeError:  # `precheck ... | head`: the reader left, nothing more to say
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:  # during start-up (its imports), before a command handles its own Ctrl-C
        print("precheck: interrupted during start-up", file=sys.stderr)
        return 130
    except PrecheckError as e:
        _error(e.line(lambda result_path: resume_command(typed, result_path)))
        code = e.exit_code
    except OSError as e:  # a file the command reads or writes: the system's reason
        _error(write_problem(e))
        code = USAGE_EXIT_CODE
    except Exception:
        traceback.print_exc()
        print(BUG_HINT, file=sys.stderr)
        code = BUG_EXIT_CODE
    if argv is None and _in_flight():
        _leave(code)
    return code


def program() -> NoReturn:
    """The ``precheck`` program (its console script and ``python -m precheck``): :func:`main` on ``sys.argv``,
    then the process's end. Once a command that loaded torch is done, its threads finished and its exit handlers
    run, the process ends at once: the interpreter's own shutdown would take apart every module torch loaded,
    0.3-0.9 s of the heavy bf16 step's run after its last row was on disk. ``main`` itself returns its code to a
    caller in its own process (whose program goes on), but for a case still running in torch (below)."""
    code = main()
    if "torch" in sys.modules:
        _leave(code)
    sys.exit(code)


def _in_flight() -> bool:
    """A case still runs on an in-process helper (a Ctrl-C or SIGTERM mid-case, or a case past its timeout): the
    interpreter's shutdown would meet it in torch's C++ and end in std::terminate (exit -6)."""
    inprocess = sys.modules.get("precheck.scheduling.inprocess")  # not imported: no helper was ever started
    return inprocess is not None and inprocess.in_flight()


def _leave(code: int) -> NoReturn:
    """The process's end with ``code``, without the interpreter's shutdown: the threads Python would wait for
    joined (but for a case stuck in torch, which is not waited for), the exit handlers run, the streams flushed."""
    import atexit
    import os
    import threading

    if not _in_flight():
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()  # what the shutdown would have run first (a MindSpore worker's close ...)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a reader that left
            pass
    os._exit(code)


def _main(argv: list[str]) -> int:
    """The command named in ``argv``, run by its handler (registry.py); ``args.argv`` is the line as typed."""
    args = build_parser().parse_args(argv, argparse.Namespace(argv=argv))
    if args.needs_torch:
        check_torch(args.command)
    return args.func(args)


if __name__ == "__main__":
    program()
