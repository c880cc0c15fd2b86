"""`precheck record`: its grammar and handler, a thin skin over precheck.recording.launch.

Exit codes: the recorded command's own (a training run that fails is not precheck's to hide; 128 + N when signal
N killed it, as a shell says; a console that cannot be written loses precheck's lines, not that code), 2 when
nothing could be recorded (no command, a command that cannot start, no Python process that imported torch, an -o
holding a recording of a chosen step already) or when the command exited 0 and the recording failed (a check that
failed at the program's end: one line each on stderr, and the CSVs and report it left say they are partial).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from api_registry.recording import LEVELS, RISK_LEVELS, TASKS
from precheck.commands.cluster_options import add_tls_options, tls_of
from precheck.commands.command import Command, add_grading
from precheck.commands.console import closing, say
from precheck.commands.values import count_from_zero, positive_int, size
from precheck.dump.steps import rank_number
from precheck.errors import USAGE_EXIT_CODE, OptionError, PrecheckError
from precheck.escape import escape, shell_command
from precheck.run_files.csv_files import read_csv_rows
from precheck.run_files.run_state import RunFileError, read_sidecar
from precheck.schema import REPORT, RESULT_HEADER, RESULT_NAME, SIDECAR, STATUSES, details_of, run_stem

if TYPE_CHECKING:
    from precheck.recording.launch import Recorded
    from precheck.recording.runlog import Written


class NothingRecorded(PrecheckError):
    """The command ran, and no Python process of it recorded anything."""


def _arguments(rec: argparse.ArgumentParser) -> None:
    """run_ut's target and grading options first: ``--check`` grades by them."""
    add_grading(rec)
    rec.add_argument("-o", "--out_path", required=True, metavar="DUMP_DIR", help="folder of the dump")
    rec.add_argument("--task", choices=TASKS, default="tensor", help="tensor (with tensor files) or statistics")
    rec.add_argument("--level", choices=LEVELS, default="L1", help="msprobe's dump level (L1: APIs; mix: modules too)")
    rec.add_argument(
        "--steps", type=count_from_zero, nargs="+", default=[0], metavar="N", help="steps to record (default: 0)"
    )
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
    rec.add_argument(
        "--store-size",
        type=size,
        default=None,
        metavar="SIZE",
        help="with --check: the most tensor data (e.g. 512M) waiting in /dev/shm for its check; a call beyond it is "
        "a SKIP row (default: half of /dev/shm's free space)",
    )
    rec.add_argument("-n", "--workers", type=positive_int, default=1, help="with --check: processes checking calls")
    rec.add_argument(
        "--backend",
        choices=("inprocess", "process", "dask"),
        default=None,
        help="with --check: where calls are checked (default: in the training process with -n 1, else a pool)",
    )
    rec.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with --check: a Dask scheduler (each call's tensors travel with its task: see docs/guide/record.md "
        "for what the cluster must be trusted with)",
    )
    add_tls_options(rec)
    rec.add_argument("program", nargs=argparse.REMAINDER, metavar="-- CMD", help="the training command")


_DEFAULTS = {"target": "device", "standard": "default"}
# only with --check
_WITH_CHECK = ("keep_failing", "store_size", "scheduler", "backend", "tls_ca_file", "tls_cert", "tls_key")


def _record(args: argparse.Namespace) -> int:
    from precheck.recording.launch import run_recorded

    command = args.program[1:] if args.program[:1] == ["--"] else args.program
    _refuse_a_second_recording(Path(args.out_path), args.steps)
    done = run_recorded(
        args.out_path,
        command,
        task=args.task,
        level=args.level,
        steps=args.steps,
        risk_level=args.risk_level,
        check=_check(args),
    )
    ended = _ended(done)
    written = done.written
    if not done.dumps and not written.unclosed and not written.failures:
        raise NothingRecorded(f"{shell_command(*command)} {ended} {_why_nothing(done)}")
    lines = [f"precheck record: {len(done.dumps)} dump(s) written (command {ended})"]
    if args.check:
        lines += [f"  {escape(str(p))}" for p in done.dumps]
    else:
        lines += [
            f"  {escape(str(p))}  (check: {shell_command('precheck', 'run_ut', '-api_info', p)})" for p in done.dumps
        ]
    lines += [f"  not closed, its process died mid-step: {escape(str(p))}" for p in written.unclosed]
    lines += [f"  partial, {escape(why)}: {escape(str(p))}" for p, why in written.cut.items()]
    for results in _by_step(done.results):  # each step as run_ut's console says a run: one process, or its ranks
        lines += _checked(results, written)
    say("\n".join(lines), sys.stdout)
    for failure in written.failures:  # the program may have exited 0 all the same: precheck record does not
        say(f"precheck: error: the recording failed in {escape(failure)}", sys.stderr)
    return done.returncode or (USAGE_EXIT_CODE if written.failures else 0)


def _refuse_a_second_recording(out: Path, steps: list[int]) -> None:
    """A step of ``out`` that holds a recording already is refused before the command runs: a second one would be
    another proc folder beside it, which compare and run_ut cannot tell from a second process of one run."""
    for step in steps:
        folder = out / f"step{step}"
        held = (
            sorted(p.name for p in folder.glob("*") if p.name.startswith(("proc", "rank"))) if folder.is_dir() else []
        )
        if held:
            raise OptionError(
                f"{escape(str(folder))} already holds a recording ({held[0]}): record into another -o, or remove "
                "that one first"
            )


def _why_nothing(done: Recorded) -> str:
    """Why a command left no dump: it failed before its first recorded call (its own error is above), or called
    none, or precheck never got into it."""
    n = done.written.installed
    if n and done.returncode:
        return (
            f"before its first recorded call, with precheck recording in {n} Python process(es) of it: the "
            "program's own error is above"
        )
    if n:
        return f"and recorded nothing: none of its {n} Python process(es) that precheck records called a recorded API"
    return (
        "and recorded nothing: no Python process of it imported torch with precheck installed (a python run "
        "with -E or -I ignores the PYTHONPATH precheck starts through)"
    )


def _ended(done: Recorded) -> str:
    """How the command ended, as a shell would say it."""
    if done.signal is None:
        return f"exited {done.returncode}"
    return f"was killed by signal {done.signal} ({signal.Signals(done.signal).name}), exit {done.returncode}"


def _by_step(results: list[Path]) -> list[list[Path]]:
    """The result CSVs by checked step: a process's alone, a distributed step's ranks together (each rank's CSVs
    are in its dump's folder, ``step0/rank1/``, as run_ut of the step folder writes them into ``rank1/``)."""
    steps: dict[Path, list[Path]] = {}
    for result in results:
        steps.setdefault(result.parent.parent if _ranked(result) else result, []).append(result)
    return list(steps.values())


def _ranked(result: Path) -> bool:
    return rank_number(result.parent.name) is not None


def _checked(results: list[Path], written: Written) -> list[str]:
    """A checked step's block: its counts, its result CSVs (a rank's named by its folder), why APIs are SKIP, the
    worst APIs and its report (a distributed step's one page over every rank, written here once all are done)."""
    ranked = _ranked(results[0])
    if ranked:
        results = sorted(results, key=lambda r: rank_number(r.parent.name) or 0)
    runs = {(r.parent.name if ranked else ""): (r, r.with_name(details_of(r.name))) for r in results}
    partial = next((written.partial[r] for r in results if r in written.partial), None)
    lines = _counts(results, partial)
    lines += [f"  {name + ': ' if name else ''}result:  {escape(str(result))}" for name, (result, _) in runs.items()]
    if ranked:
        page = _step_page(results[0].parent.parent)
    else:
        own = results[0].parent / REPORT.format(run_stem(runs[""][1].name))
        page = str(own) if own in written.reports else None
    return lines + closing(runs, page)


def _step_page(step: Path) -> str | None:
    """The one report over a distributed step's ranks, as ``precheck report STEP`` writes it (None: not written,
    said in one line; the CSVs are there)."""
    from precheck.report.pages import write_page

    try:
        return str(write_page(step))
    except (OSError, ValueError) as e:
        print(f"precheck: warning: no report of {escape(str(step))}: {escape(str(e))}", file=sys.stderr)
        return None


def _counts(results: list[Path], partial: str | None) -> list[str]:
    """A checked step's heading (its step and process, or ranks) and its APIs per forward and backward status,
    over all its CSVs, as run_ut's summary gives them; a partial CSV (``partial``: why) says it is one."""
    rows = [row for result in results for row in read_csv_rows(result)[1]]
    per = [Counter(row.get(RESULT_HEADER[i], "").strip() for row in rows) for i in (1, 2)]
    forward, backward = (", ".join(f"{k} {c.get(k, 0)}" for k in STATUSES) for c in per)
    checked = f"{len(rows)} APIs checked" if partial is None else f"PARTIAL: {len(rows)} APIs checked ({partial})"
    if len(results) > 1:
        heading = f"{results[0].parent.parent.name} ({', '.join(r.parent.name for r in results)})"
    else:
        heading = _step_of(results[0])
    return [f"{escape(heading)}: {checked}", f"  forward:  {forward}", f"  backward: {backward}"]


def _step_of(result: Path) -> str:
    """``step0 (proc1234)``: the step and process whose dump a check's result CSV grades, from its run record."""
    m = RESULT_NAME.match(result.name)
    try:
        dump = Path(read_sidecar(result.with_name(SIDECAR.format(m.group(1) if m else ""))).get("dump", ""))
    except (FileNotFoundError, RunFileError):
        return result.name
    return f"{dump.parent.parent.name} ({dump.parent.name})" if dump.name else result.name


def _check(args: argparse.Namespace) -> dict | None:
    """How the recorded program checks its calls (precheck.recording.online.attach), None without --check."""
    extra = [name for name in _WITH_CHECK if getattr(args, name)]
    extra += [name for name in ("target", "standard") if getattr(args, name) != _DEFAULTS[name]]
    if not args.check:
        if extra or args.workers != 1:
            raise OptionError(f"--{(extra or ['workers'])[0].replace('_', '-')} goes with --check")
        return None
    backend = args.backend or ("dask" if args.scheduler else "inprocess" if args.workers == 1 else "process")
    tls = tls_of(args)
    return {
        "options": {k: getattr(args, k) for k in ("device", "target", "cosine", "max_abs", "standard", "seed")},
        "out": str(args.out_path),
        "backend": backend,
        "workers": args.workers,
        "scheduler": args.scheduler,
        "tls": None if tls is None else [tls.ca_file, tls.cert, tls.key],
        "keep_failing": args.keep_failing,
        "store_size": args.store_size,
    }


COMMAND = Command(
    "record",
    help="record a training step as msprobe's dumper does, without msprobe: precheck record -o DIR -- CMD",
    description="Run CMD (e.g. python train.py ARGS) with precheck's recorder in its Python processes: msprobe's "
    "L1 dump (the same record names, order, fields and tensor files as msprobe 26.2's PrecisionDebugger) is "
    "written under DIR/step{N}/proc{pid}/ (rank{R} in a distributed run). A step runs from one optimizer.step() "
    "to the next (step 0 starts at the model's first forward); a program without an optimizer is one step.",
    add_arguments=_arguments,
    handler=_record,
    torch=True,
)
