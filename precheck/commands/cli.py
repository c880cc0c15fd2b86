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

from precheck.commands.parser import build_parser
from precheck.commands.run_ut_cli import resume_command
from precheck.errors import BUG_EXIT_CODE, USAGE_EXIT_CODE, PrecheckError
from precheck.escape import escape
from precheck.paths import write_problem
from precheck.torch_range import check_torch

__all__ = ["build_parser", "main"]

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
    if argv is None:
        _leave(code)
    return code


def _leave(code: int) -> None:
    """The program's end, once a command that loaded torch is done: its threads finished and its exit handlers
    run, then the process ends at once with ``code``. The interpreter's own shutdown would take apart every module
    torch loaded (0.3-0.9 s of the heavy bf16 step's run, after its last row was on disk), and would meet a case
    still running on an in-process helper (a Ctrl-C or SIGTERM mid-case, or a case past its timeout) in torch's
    C++ and end in std::terminate (exit -6). A command that never loaded torch ends as Python ends."""
    if "torch" not in sys.modules:
        return
    import atexit
    import os
    import threading

    inprocess = sys.modules.get("precheck.scheduling.inprocess")
    if inprocess is None or not inprocess.in_flight():  # nothing stuck in torch: wait for threads as Python does
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
    sys.exit(main())
