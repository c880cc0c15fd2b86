"""`precheck record`: its grammar and handler, a thin skin over precheck.recording.launch.

Exit codes: the recorded command's own (a training run that fails is not precheck's to hide), 2 when nothing
could be recorded (no command, a command that cannot start, no Python process that imported torch).
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from api_registry.recording import LEVELS, RISK_LEVELS, TASKS
from precheck.errors import OptionError, PrecheckError
from precheck.escape import escape, shell_command
from precheck.report.csv_files import read_csv_rows
from precheck.schema import REPORT, RESULT_HEADER, STATUSES, details_of, run_stem


class NothingRecorded(PrecheckError):
    """The command ran, and no Python process of it recorded anything."""


def add_parsers(commands: argparse._SubParsersAction, grading: argparse.ArgumentParser) -> None:
    """``grading``: run_ut's target and grading options, which ``--check`` grades by."""
    rec = commands.add_parser(
        "record",
        parents=[grading],
        help="record a training step as msprobe's dumper does, without msprobe: precheck record -o DIR -- CMD",
        description="Run CMD (e.g. python train.py ARGS) with precheck's recorder in its Python processes: msprobe's "
        "L1 dump (the same record names, order, fields and tensor files as msprobe 26.2's PrecisionDebugger) is "
        "written under DIR/step{N}/proc{pid}/ (rank{R} in a distributed run). A step runs from one optimizer.step() "
        "to the next (step 0 starts when the program imports torch); a program without an optimizer is one step.",
    )
    rec.add_argument("-o", "--out_path", required=True, metavar="DUMP_DIR", help="folder of the dump")
    rec.add_argument("--task", choices=TASKS, default="tensor", help="tensor (with tensor files) or statistics")
    rec.add_argument("--level", choices=LEVELS, default="L1", help="msprobe's dump level (L1: APIs; mix: modules too)")
    rec.add_argument("--steps", type=int, nargs="+", default=[0], metavar="N", help="steps to record (default: 0)")
    rec.add_argument(
        "--risk-level",
        "--risk_level",
        dest="risk_level",
        choices=RISK_LEVELS,
        default="FOCUS",
        help="msprobe's risk_level: FOCUS (its default) leaves views, casts and concatenations out; ALL records them",
    )
    rec.add_argument(
        "--check",
        action="store_true",
        help="check each call while the step runs (no tensor file is written): the run_ut CSVs, reasons file and "
        "report of each recorded step go to DUMP_DIR when it ends",
    )
    rec.add_argument("--keep-failing", action="store_true", help="with --check: keep the tensor files of error calls")
    rec.add_argument("-n", "--workers", type=int, default=1, help="with --check: processes checking calls")
    rec.add_argument(
        "--backend",
        choices=("inprocess", "process", "dask"),
        default=None,
        help="with --check: where calls are checked (default: in the training process with -n 1, else a pool)",
    )
    rec.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with --check: a Dask scheduler (each call's tensors travel with its task)",
    )
    rec.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD", help="the training command")


_DEFAULTS = {"target": "device", "standard": "default"}


def handlers() -> dict[str, Callable[[argparse.Namespace], int]]:
    return {"record": _record}


def _record(args: argparse.Namespace) -> int:
    from precheck.recording.launch import run_recorded

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    done = run_recorded(
        args.out_path,
        command,
        task=args.task,
        level=args.level,
        steps=args.steps,
        risk_level=args.risk_level,
        check=_check(args),
    )
    if not done.dumps:
        raise NothingRecorded(
            f"{shell_command(*command)} exited {done.returncode} and recorded nothing: no Python process of it "
            "imported torch with precheck installed (a python run with -E or -I ignores the PYTHONPATH precheck starts "
            "through), or none of them called a recorded API in a recorded step"
        )
    lines = [f"precheck record: {len(done.dumps)} dump(s) written (command exited {done.returncode})"]
    if args.check:
        lines += [f"  {escape(str(p))}" for p in done.dumps]
        for result in done.results:
            page = result.parent / REPORT.format(run_stem(details_of(result.name)))
            lines += [_counts(result), f"  result:  {escape(str(result))}", f"  report:  {escape(str(page))}"]
    else:
        lines += [
            f"  {escape(str(p))}  (check: {shell_command('precheck', 'run_ut', '-api_info', p)})" for p in done.dumps
        ]
    print("\n".join(lines))
    return done.returncode


def _counts(result: Path) -> str:
    """A checked step's APIs per forward and backward status, as run_ut's summary gives them."""
    _, rows = read_csv_rows(result)
    per = [Counter(row.get(RESULT_HEADER[i], "").strip() for row in rows) for i in (1, 2)]
    forward, backward = (", ".join(f"{k} {c.get(k, 0)}" for k in STATUSES) for c in per)
    return f"  {len(rows)} APIs checked; forward: {forward}; backward: {backward}"


def _check(args: argparse.Namespace) -> dict | None:
    """How the recorded program checks its calls (precheck.recording.online.attach), None without --check."""
    extra = [name for name in ("keep_failing", "scheduler", "backend") if getattr(args, name)]
    extra += [name for name in ("target", "standard") if getattr(args, name) != _DEFAULTS[name]]
    if not args.check:
        if extra or args.workers != 1:
            raise OptionError(f"--{(extra or ['workers'])[0].replace('_', '-')} goes with --check")
        return None
    if args.workers < 1:
        raise OptionError("-n/--workers must be at least 1")
    backend = args.backend or ("dask" if args.scheduler else "inprocess" if args.workers == 1 else "process")
    return {
        "options": {k: getattr(args, k) for k in ("device", "target", "cosine", "max_abs", "standard", "seed")},
        "out": str(args.out_path),
        "backend": backend,
        "workers": args.workers,
        "scheduler": args.scheduler,
        "keep_failing": args.keep_failing,
    }
