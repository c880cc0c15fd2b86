"""`precheck record`: its grammar and handler, a thin skin over precheck.recording.launch.

Exit codes: the recorded command's own (a training run that fails is not precheck's to hide), 2 when nothing
could be recorded (no command, a command that cannot start, no Python process that imported torch).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from api_registry.recording import LEVELS, RISK_LEVELS, TASKS
from precheck.errors import PrecheckError
from precheck.escape import escape, shell_command


class NothingRecorded(PrecheckError):
    """The command ran, and no Python process of it recorded anything."""


def add_parsers(commands: argparse._SubParsersAction) -> None:
    rec = commands.add_parser(
        "record",
        help="record a training step as msprobe's dumper does, without msprobe: precheck record -o DIR -- CMD",
        description="Run CMD (e.g. python train.py ARGS) with precheck's recorder in its Python processes: msprobe's "
        "L1 dump (the same record names, order, fields and tensor files as msprobe 26.2's PrecisionDebugger) is "
        "written under DIR/step{N}/proc{pid}/ (rank{R} in a distributed run). A step runs from one optimizer.step() "
        "to the next (step 0 starts when the program imports torch); a program without an optimizer is one step.",
    )
    rec.add_argument("-o", "--out_path", required=True, metavar="DUMP_DIR", help="folder of the dump")
    rec.add_argument("--task", choices=TASKS, default="tensor", help="tensor (with tensor files) or statistics")
    rec.add_argument("--level", choices=LEVELS, default="L1", help="msprobe's dump level (L1: APIs)")
    rec.add_argument("--steps", type=int, nargs="+", default=[0], metavar="N", help="steps to record (default: 0)")
    rec.add_argument(
        "--risk-level",
        "--risk_level",
        dest="risk_level",
        choices=RISK_LEVELS,
        default="FOCUS",
        help="msprobe's risk_level: FOCUS (its default) leaves views, casts and concatenations out; ALL records them",
    )
    rec.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD", help="the training command")


def handlers() -> dict[str, Callable[[argparse.Namespace], int]]:
    return {"record": _record}


def _record(args: argparse.Namespace) -> int:
    from precheck.recording.launch import run_recorded

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    done = run_recorded(
        args.out_path, command, task=args.task, steps=args.steps, risk_level=args.risk_level, check=None
    )
    if not done.dumps:
        raise NothingRecorded(
            f"{shell_command(*command)} exited {done.returncode} and recorded nothing: no Python process of it "
            "imported torch with precheck installed, or it ended before its first call"
        )
    lines = [f"precheck record: {len(done.dumps)} dump(s) written (command exited {done.returncode})"]
    lines += [f"  {escape(str(p))}  (check: {shell_command('precheck', 'run_ut', '-api_info', p)})" for p in done.dumps]
    print("\n".join(lines))
    return done.returncode
