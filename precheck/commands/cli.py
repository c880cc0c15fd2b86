"""``precheck`` command line: a thin layer over :func:`precheck.run_ut.run_ut`.

Exit codes: 0 the run completed (whatever the statuses), 1 ``--fail-on`` tripped, 2 unusable input (one line on
stderr, no traceback), 130 interrupted by Ctrl-C, 143 by SIGTERM (every finished row is already on disk, and the
message names the command that continues the run, as it does for a run stopped by a full disk, exit code 2), 70 a
bug in precheck (its traceback, and a line asking for a report). Unusable input is a PrecheckError, or an OSError
of a file the command reads or writes; both are caught in one place, :func:`main`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import traceback
import warnings
from collections import Counter
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from precheck.commands.cluster_options import tls_of
from precheck.commands.compare_cli import handlers as compare_handlers
from precheck.commands.console import closing
from precheck.commands.parser import build_parser
from precheck.commands.record_cli import handlers as record_handlers
from precheck.errors import BUG_EXIT_CODE, USAGE_EXIT_CODE, OptionError, PrecheckError
from precheck.escape import escape, shell_command
from precheck.execution.options import CheckOptions
from precheck.paths import output_folder, write_problem
from precheck.schema import STATUSES

if TYPE_CHECKING:
    from precheck.run_ut import RunSummary

# Each handler imports what it runs: `precheck --help`, an argument error and the commands that only read CSVs
# (regress, api_precision_compare) never load torch.


def _error(reason: object) -> None:
    """The one line an unusable input gets on stderr; text from a dump in it is escaped (no terminal control)."""
    print(f"precheck: error: {escape(str(reason))}", file=sys.stderr)


def _precision_compare(args: argparse.Namespace) -> int:
    from precheck.precision_compare import api_precision_compare

    summary = api_precision_compare(args.npu_csv_path, args.gpu_csv_path, args.out_path, args.standard)
    counts = Counter(f for f, _ in summary.apis.values())
    print(
        f"precheck api_precision_compare: {len(summary.apis)} APIs; forward: "
        + ", ".join(f"{k} {counts.get(k, 0)}" for k in STATUSES)
        + f"\n  result:  {summary.result_path}\n  details: {summary.details_path}"
    )
    return 0


def _regress(args: argparse.Namespace) -> int:
    from precheck.regress import FAIL, IMPROVED, MISSING, regress, write_report

    report = regress(args.baseline, args.current)
    md_path, json_path = write_report(report, args.out_path)
    print(f"precheck regress: {report.summary()}\n  markdown: {md_path}\n  json:     {json_path}")
    code = report.exit_code(args.strict)
    if code:
        counts = report.counts
        why = [
            f"{counts[FAIL]} got worse (FAIL)" if counts[FAIL] else "",
            f"{counts[MISSING]} went MISSING" if counts[MISSING] else "",
            f"{counts[IMPROVED]} IMPROVED (--strict: refresh the baseline)" if args.strict and counts[IMPROVED] else "",
        ]
        print("precheck: regress: " + "; ".join(w for w in why if w), file=sys.stderr)
    return code


def _generate(args: argparse.Namespace) -> int:
    from precheck.testgen import generate

    options = CheckOptions(device=args.device, **_grading(args))
    test = generate(args.api_info, args.out_path, options=options, copy_data=args.copy_data)
    run = shell_command("pytest", test.parent)
    print(f"precheck generate: suite written to {escape(str(test.parent))} (run: {run})")
    return 0


def _apis(args: argparse.Namespace) -> int:
    from api_registry import registry
    from precheck.support import describe_skips, describe_supported

    if args.check:
        print(describe_skips(args.check))
        return 0
    print(describe_supported())
    if args.names:
        print("\n".join(sorted(registry())))
    return 0


def _repro(args: argparse.Namespace) -> int:
    from precheck.repro import write_repro

    script = write_repro(args.api_name, args.api_info, args.out_path, seed=args.seed)
    print(f"precheck repro: {escape(str(script))} (run: {shell_command('python', script)} [DEVICE])")
    return 0


def _scheduler(args: argparse.Namespace) -> str | None:
    if args.backend == "dask" and not args.scheduler:
        raise OptionError("--backend dask needs --scheduler ADDRESS")
    if args.scheduler and args.backend not in ("dask", "auto"):
        raise OptionError(f"--scheduler goes with --backend dask, not {args.backend}")
    return args.scheduler


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
        _error(e.line(lambda result_path: _resume_command(typed, result_path)))
        code = e.exit_code
    except OSError as e:  # a file the command reads or writes: the system's reason
        _error(write_problem(e))
        code = USAGE_EXIT_CODE
    except Exception:
        traceback.print_exc()
        print(BUG_HINT, file=sys.stderr)
        code = BUG_EXIT_CODE
    if argv is None:
        _leave_if_a_case_runs(code)
    return code


def _leave_if_a_case_runs(code: int) -> None:
    """The program's end when a case is still running on an in-process helper (a Ctrl-C or SIGTERM mid-case, or
    a case past its timeout): the exit handlers run, then the process ends at once with ``code``. The
    interpreter's own shutdown would meet that thread in torch's C++ and end in std::terminate (exit -6)."""
    inprocess = sys.modules.get("precheck.scheduling.inprocess")  # not imported: no helper was ever started
    if inprocess is None or not inprocess.in_flight():
        return
    import atexit
    import os

    atexit._run_exitfuncs()  # what the shutdown would have run first (a MindSpore worker's close ...)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a reader that left
            pass
    os._exit(code)


def _main(argv: list[str]) -> int:
    handlers = {
        "run_ut": lambda args: _run(args, argv),
        "generate": _generate,
        "apis": _apis,
        "repro": _repro,
        "api_precision_compare": _precision_compare,
        "regress": _regress,
        "report": _report,
        **compare_handlers(),
        **record_handlers(),
    }
    args = build_parser(handlers).parse_args(argv)
    return args.func(args)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, stopped like Ctrl-C (exit code 143)."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    _framework(args)  # before the dump is read: a run that cannot write its rows must not start
    if args.csv_path is None:
        output_folder(args.out_path)
    if args.backend in ("auto", "process") and args.workers != 1 and not args.scheduler:
        from precheck.scheduling.forkserver import likely_pool, start_early

        if args.backend == "process" or likely_pool(args.api_info):
            start_early()  # a pool's workers come from it: its import of torch overlaps the run's own
    stop_on_term = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if stop_on_term else None
    try:
        summary = _run_ut(args, argv)
    except KeyboardInterrupt as e:
        return _stopped(e, argv)
    finally:
        if stop_on_term:
            signal.signal(signal.SIGTERM, previous)
    print(summary.describe())
    try:
        print(_closing(summary, args.report))
    except (OSError, ValueError) as e:  # the run's rows are on disk: a report it cannot write costs only the report
        _warning_line(f"no report: {escape(str(e))}")
    why = summary.gate(args.fail_on) if args.fail_on else None
    if why:
        print(f"precheck: {why}", file=sys.stderr)
        return 1
    return 0


def _run_ut(args: argparse.Namespace, argv: list[str]) -> RunSummary:
    """The run the command line asks for; its warnings are one line each, and a run of the same dump that did
    not finish is named with the command that continues it."""
    from precheck.dump.selection import load_api_lists
    from precheck.execution.runner import quiet_replayed
    from precheck.run_ut import UnfinishedRun, run_ut

    def show(message: Warning | str, *rest: object, **kwargs: object) -> None:
        if isinstance(message, UnfinishedRun):
            message = f"{message.what}; continue it with: {_resume_command(argv, message.result_path)}"
        _warning_line(message)

    from precheck.dump.steps import find_dumps
    from precheck.ranks import run_step

    found = find_dumps(args.api_info)
    with warnings.catch_warnings():
        warnings.showwarning = quiet_replayed(show)
        if found.note:
            show(found.note)
        run = partial(run_step, found) if found.ranks else partial(run_ut, found.path)
        return run(
            out_path=args.out_path,
            device=args.device,
            workers=args.workers,
            keep_results=False,
            options=_check_options(args),
            csv_path=args.csv_path,
            filter_api=args.filter_api,
            backend=args.backend,
            scheduler=_scheduler(args),
            tls=tls_of(args),
            api_lists=load_api_lists(args.config) if args.config else None,
            progress=not args.quiet,
            framework=_framework(args),
        )


def _framework(args: argparse.Namespace) -> str | None:
    """run_ut's --framework, or msprobe's top-level -f (``precheck -f mindspore run_ut ...``)."""
    if args.framework and args.dump_framework and args.framework != args.dump_framework:
        raise OptionError(f"-f {args.dump_framework} before run_ut contradicts its --framework {args.framework}")
    return args.framework or args.dump_framework


def _stopped(e: KeyboardInterrupt, argv: list[str]) -> int:
    """Ctrl-C (130) or SIGTERM (143): one line, with the command that continues the run once it has files."""
    from precheck.run_ut import Interrupted

    terminated = isinstance(e, _Terminated) or isinstance(e.__cause__, _Terminated)
    how = "terminated (SIGTERM)" if terminated else "interrupted"
    if isinstance(e, Interrupted):
        again = _resume_command(argv, e.result_path)
        print(f"precheck: {how}; {e.finished} finished APIs are in {e.result_path}; continue with: {again}",
              file=sys.stderr)  # fmt: skip
    else:
        print(f"precheck: {how} before the run started", file=sys.stderr)
    return 143 if terminated else 130


def _resume_command(argv: list[str], result_path: Path) -> str:
    """The command line as typed, continuing the run whose result CSV is ``result_path`` (shell-quoted)."""
    return shell_command("precheck", *_without_csv_path(argv), "-csv_path", result_path)


def _report(args: argparse.Namespace) -> int:
    from precheck.report.pages import write_page

    with warnings.catch_warnings():
        warnings.showwarning = _warning_line
        page = write_page(args.path, args.out_path)
    print(f"precheck report: {page}")
    return 0


def _closing(summary: RunSummary, report: bool) -> str:
    """The console's end (commands/console.py), with the report written here or the command that writes it; a
    step's ranks (precheck.ranks) are counted together, each rank's worst APIs are named by its folder, and their
    one report is over every rank (precheck/report/ranks_html.py)."""
    runs = getattr(summary, "ranks", None) or {"": summary}
    if report:
        from precheck.report.pages import write_page

        page = str(write_page(summary.details_path))  # a step's: its output folder, every rank
    else:
        page = shell_command("precheck", "report", summary.details_path)
    return "\n".join(closing({name: (run.result_path, run.details_path) for name, run in runs.items()}, page))


def _grading(args: argparse.Namespace) -> dict[str, object]:
    """The options run_ut and generate share (parser._grading_options), as CheckOptions fields."""
    return {k: getattr(args, k) for k in ("cosine", "max_abs", "seed", "standard", "target")}


def _check_options(args: argparse.Namespace) -> CheckOptions:
    return CheckOptions(
        force_random=args.random,
        max_memory=args.max_memory,
        bench_device=args.bench_device,
        save_error_data=str(Path(args.out_path) / "ut_error_data") if args.save_error_data else None,
        timeout=args.timeout,
        **_grading(args),
    )


def _warning_line(message: Warning | str, *args: object, **kwargs: object) -> None:
    print(f"precheck: warning: {message}", file=sys.stderr)


def _without_csv_path(argv: list[str]) -> list[str]:
    """The command line as typed, less its -csv_path (the resume command adds the one to continue)."""
    kept, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token in ("-csv_path", "--csv_path"):
            skip = True
        elif not token.startswith(("-csv_path=", "--csv_path=")):
            kept.append(token)
    return kept


if __name__ == "__main__":
    sys.exit(main())
