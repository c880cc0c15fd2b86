"""The run's log: how the processes ``precheck record`` starts tell it what they wrote.

The launcher names a file in PRECHECK_RECORD (``log``); each recorded process appends a JSON line per event: a
dump opened and closed, a check's result CSV started and finished, its report, a CSV left partial, a failure, its
shared-memory store. The launcher reports from the log alone: the dumps of its own processes, never those of a
concurrent run into the same folder (an mtime cannot tell them apart), and what a process that died mid-step
left open (a SIGKILL, the OOM killer: nothing of it runs at its end), and in how many processes the recorder was
installed (a program that failed before its first recorded call is told from one precheck never got into). A
line is one O_APPEND write, so processes writing at once never interleave. Torch-free: the launcher reads it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from precheck.run_files.run_state import mark_partial
from precheck.schema import RESULT_NAME, SIDECAR

__all__ = ["STORE_PREFIX", "Written", "note", "read_log"]

STORE_PREFIX = "precheck-record-"  # an online check's shared-memory store: /dev/shm/precheck-record-<pid>-*


def note(log: str | None, kind: str, path: object = None, why: str | None = None) -> None:
    """Append one event to the run's log ``log`` (None: not run by ``precheck record``, nothing to tell)."""
    if not log:
        return
    entry = {"kind": kind, "path": None if path is None else str(path), "pid": os.getpid(), "why": why}
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)  # never created here: a launcher that is gone reads nothing
    except OSError:
        return
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode("utf-8"))
    finally:
        os.close(fd)


@dataclass
class Written:
    """What a run's processes wrote, oldest first."""

    dumps: list[Path] = field(default_factory=list)  # each dump.json closed whole
    cut: dict[Path, str] = field(default_factory=dict)  # dump.json closed partial -> why (its program was stopped)
    unclosed: list[Path] = field(default_factory=list)  # opened and never closed: its process died mid-step
    results: list[Path] = field(default_factory=list)  # each result CSV of a check, finished or not
    partial: dict[Path, str] = field(default_factory=dict)  # result CSV -> why it lacks APIs
    reports: set[Path] = field(default_factory=set)  # the report pages written
    failures: list[str] = field(default_factory=list)  # one line each
    stores: list[Path] = field(default_factory=list)
    installed: int = 0  # processes that imported torch and had the recorder's wrappers put on


def read_log(log: Path) -> Written:
    """The events in ``log``; a CSV started and never finished is partial (its process died)."""
    written, opened, started = Written(), {}, {}
    for line in log.read_text("utf-8", "replace").splitlines():
        try:
            entry = json.loads(line)
            kind, path, pid, why = entry["kind"], Path(entry["path"] or ""), entry["pid"], entry["why"]
        except (ValueError, TypeError, KeyError):
            continue  # not a line a recorded process wrote
        if kind == "dump-open":
            opened[path] = pid
        elif kind == "dump":
            opened.pop(path, None)
            written.dumps.append(path)
            if why:
                written.cut[path] = why
        elif kind == "csv-open":
            started[path] = pid
            written.results.append(path)
        elif kind == "csv":
            started.pop(path, None)
        elif kind == "partial":
            written.partial[path] = why
        elif kind == "report":
            written.reports.add(path)
        elif kind == "failed":
            written.failures.append(f"process {pid}: {why}")
        elif kind == "store":
            written.stores.append(path)
        elif kind == "installed":
            written.installed += 1
    written.unclosed = list(opened)
    for path, pid in started.items():
        written.partial[path] = f"process {pid} ended before its check did"
    return written


def clean_up(written: Written) -> None:
    """After the run: its shared-memory stores removed (a process killed mid-step leaves its own, hundreds of MB
    of /dev/shm), the run record of each partial CSV marked partial."""
    for store in written.stores:
        if store.name.startswith(STORE_PREFIX):
            shutil.rmtree(store, ignore_errors=True)
    for result, why in written.partial.items():
        m = RESULT_NAME.match(result.name)
        if m is not None:
            mark_partial(result.with_name(SIDECAR.format(m.group(1))), why)
