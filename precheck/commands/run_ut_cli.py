"""``precheck run_ut``: its arguments and its handler, a thin skin over :func:`precheck.run_ut.run_ut` (a step
folder of several ranks: precheck.ranks.run_step). A run stopped by Ctrl-C or SIGTERM, or by a full disk, names the
command that continues it (:func:`resume_command`)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import warnings
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from precheck.commands.cluster_options import add_tls_options, tls_of
from precheck.commands.command import FRAMEWORKS, Command, add_dump_grading, grading_of
from precheck.commands.console import closing, warning_line
from precheck.commands.values import positive_float, positive_int, size
from precheck.errors import NOTHING_GRADED_EXIT_CODE, OptionError
from precheck.escape import escape, shell_command
from precheck.execution.options import BACKENDS, CheckOptions
from precheck.paths import output_folder

if TYPE_CHECKING:
    from precheck.dump.selection import ApiLists
    from precheck.dump.steps import Found
    from precheck.run_ut import RunSummary


def _arguments(run: argparse.ArgumentParser) -> None:
    """``run_ut``: what is checked and how it is graded; how the run goes is in :func:`_add_run_ut_execution`."""
    add_dump_grading(run)
    run.add_argument("-o", "--out_path", default=".", help="folder for the CSVs (default: current folder)")
    run.add_argument(
        "-n",
        "--workers",
        type=positive_int,
        default=None,
        help="worker processes (default: the machine's cores; small dumps run in-process)",
    )
    run.add_argument(
        "--bench-device",
        default=None,
        metavar="DEVICE",
        help="run each API also on this device in the target dtypes and grade the target's error "
        "relative to it (benchmark standard; default cpu when --standard benchmark)",
    )
    run.add_argument(
        "--random",
        action="store_true",
        help="generate inputs from the recorded statistics even where the dump saved the data",
    )
    _add_run_ut_execution(run)


def _add_run_ut_execution(run: argparse.ArgumentParser) -> None:
    """``run_ut``'s options on how the run goes: memory, resuming, workers' time, backend, selection, gates."""
    run.add_argument(
        "--max-memory",
        type=size,
        default=None,
        metavar="SIZE",
        help="a record needing more memory than this (e.g. 8G) is a SKIP row (default: half the "
        "machine's memory shared among the workers)",
    )
    run.add_argument(
        "-csv_path",
        "--csv_path",
        default=None,
        metavar="RESULT_CSV",
        help="continue an interrupted run: its accuracy_checking_result_<ts>.csv (the details CSV "
        "beside it is continued too); only the APIs it lacks are checked",
    )
    run.add_argument(
        "--timeout",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="seconds one API may take before it is a SKIP row, 'timed out; not graded' (default: 60 s plus "
        "20 times its predicted cost from its FLOPs and inputs, plus 300 s with --target compile)",
    )
    run.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="where APIs run: auto (in this process for a small dump, else worker processes; a Dask cluster "
        "with --scheduler), inprocess, process (supervised worker processes), or dask (needs --scheduler and "
        "the dask extra; its workers must see the dump's path)",
    )
    run.add_argument(
        "--scheduler", default=None, metavar="ADDRESS", help="Dask scheduler, e.g. tcp://host:8786 or tls://host:8786"
    )
    add_tls_options(run)
    run.add_argument(
        "--framework",
        choices=FRAMEWORKS,
        default=None,
        help="the dump's framework (default: its 'framework' field). A MindSpore dump's mint and Tensor calls "
        "are graded against their PyTorch equivalents in float64 (msprobe's -f is --filter_api here)",
    )
    run.add_argument(
        "-f",
        "--filter_api",
        "-filter_api",
        action="store_true",
        help="check one call per signature (API, shapes, dtypes, non-tensor arguments); the others "
        "are left out and counted in the summary",
    )
    run.add_argument(
        "-config",
        "--config",
        default=None,
        metavar="CONFIG_JSON",
        help="msprobe-style white_list / black_list of API names (at the top level or under run_ut)",
    )
    run.add_argument(
        "-save_error_data",
        "--save_error_data",
        action="store_true",
        help="save the inputs, target and golden outputs of every API that is not pass under "
        "OUT_PATH/ut_error_data/<API>/",
    )
    _add_gates(run)
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    run.add_argument(
        "--report", action="store_true", help="also write report_{ts}.html beside the CSVs (see precheck report)"
    )


def _add_gates(run: argparse.ArgumentParser) -> None:
    """``run_ut``'s exit codes for CI: --fail-on (1) and --allow-empty (0 instead of 3 when nothing was graded)."""
    run.add_argument(
        "--fail-on",
        choices=("error", "warning", "skip"),
        default=None,
        help="exit 1 when any API's forward or backward status is this or worse, or (skip) any is SKIP (for CI "
        "gates; a run that graded nothing exits 3 whatever the choice)",
    )
    run.add_argument(
        "--allow-empty",
        action="store_true",
        help="exit 0 when nothing was graded (every API SKIP), instead of 3; with --fail-on, such a run is then "
        "judged by its threshold alone",
    )


class _Terminated(KeyboardInterrupt):
    """SIGTERM, stopped like Ctrl-C (exit code 143)."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def _run(args: argparse.Namespace) -> int:
    argv = args.argv
    found, api_lists = _checked(args)
    if args.backend in ("auto", "process") and args.workers != 1 and not args.scheduler:
        from precheck.scheduling.forkserver import likely_pool, start_early

        if args.backend == "process" or likely_pool(args.api_info):
            start_early()  # a pool's workers come from it: its import of torch overlaps the run's own
    stop_on_term = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if stop_on_term else None
    try:
        summary = _run_ut(args, argv, found, api_lists)
    except KeyboardInterrupt as e:
        return _stopped(e, argv)
    finally:
        if stop_on_term:
            signal.signal(signal.SIGTERM, previous)
    print(summary.describe())
    try:
        print(_closing(summary, args.report))
    except (OSError, ValueError) as e:  # the run's rows are on disk: a report it cannot write costs only the report
        warning_line(f"no report: {e}")
    return _exit_code(summary, args)


def _exit_code(summary: RunSummary, args: argparse.Namespace) -> int:
    """3 when nothing was graded (unless --allow-empty): a run of every API SKIP is not green in CI, whatever
    --fail-on says; else 1 when --fail-on trips, else 0. Each but 0 says why on stderr, in one line."""
    empty = summary.nothing_graded()
    if empty and not args.allow_empty:
        print(f"precheck: {empty} (exit {NOTHING_GRADED_EXIT_CODE}; --allow-empty to exit 0 all the same)",
              file=sys.stderr)  # fmt: skip
        return NOTHING_GRADED_EXIT_CODE
    why = summary.gate(args.fail_on, allow_empty=args.allow_empty) if args.fail_on else None
    if why:
        print(f"precheck: {why}", file=sys.stderr)
        return 1
    return 0


def _checked(args: argparse.Namespace) -> tuple[Found, ApiLists | None]:
    """The dump, the config, the run continued and the output folder, checked before torch is loaded (4-15 s):
    a path typed wrong is answered at once, and a run that cannot write its rows does not start."""
    from precheck.dump.selection import load_api_lists
    from precheck.dump.steps import find_dumps
    from precheck.run_files.csv_files import resumable

    _framework(args)
    found = find_dumps(args.api_info).require()
    if args.csv_path is None:
        output_folder(args.out_path)
    else:
        resumable(Path(args.csv_path))
    return found, load_api_lists(args.config) if args.config else None


def _run_ut(args: argparse.Namespace, argv: list[str], found: Found, api_lists: ApiLists | None) -> RunSummary:
    """The run the command line asks for; its warnings are one line each, and a run of the same dump that did
    not finish is named with the command that continues it."""
    from precheck.execution.runner import quiet_replayed
    from precheck.run_ut import UnfinishedRun, run_ut

    def show(message: Warning | str, *rest: object, **kwargs: object) -> None:
        if isinstance(message, UnfinishedRun):
            message = f"{message.what}; continue it with: {resume_command(argv, message.result_path)}"
        warning_line(message)

    from precheck.ranks import run_step

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
            scheduler=args.scheduler,
            tls=tls_of(args),
            api_lists=api_lists,
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
        again = resume_command(argv, e.result_path)
        print(f"precheck: {how}; {e.finished} finished APIs are in {escape(str(e.result_path))}; continue with: "
              f"{again}", file=sys.stderr)  # fmt: skip
    else:
        print(f"precheck: {how} before the run started", file=sys.stderr)
    return 143 if terminated else 130


def resume_command(argv: list[str], result_path: Path) -> str:
    """The command line as typed, continuing the run whose result CSV is ``result_path`` (shell-quoted)."""
    return shell_command("precheck", *_without_csv_path(argv), "-csv_path", result_path)


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


def _check_options(args: argparse.Namespace) -> CheckOptions:
    return CheckOptions(
        force_random=args.random,
        max_memory=args.max_memory,
        bench_device=args.bench_device,
        save_error_data=str(Path(args.out_path) / "ut_error_data") if args.save_error_data else None,
        timeout=args.timeout,
        **grading_of(args),
    )


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


COMMAND = Command(
    "run_ut",
    help="replay an msprobe L1 dump against a CPU float64 golden",
    description="Replay every API of an msprobe L1 dump on the target device and grade "
    "it against a CPU float64 golden; writes msprobe-compatible CSVs.",
    add_arguments=_arguments,
    handler=_run,
    aliases=("acc_check", "multi_acc_check"),  # msprobe 26's names of run_ut and multi_run_ut
    torch=True,
)
