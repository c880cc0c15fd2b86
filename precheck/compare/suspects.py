"""``precheck compare --precheck``: the suspect records of a compare replayed on the spot against the float64
golden, so that "this API is wrong" and "this API is fine, its input was already off" are told apart.

The suspects' calls (forward and backward records) are copied with their tensor files into a dump of their own
beside the compare CSV, and run_ut checks that dump: a tensor dump grades what the target recorded (``--target
recorded``: the target device need not be here), a statistics dump re-runs each call on this machine from inputs
generated from its statistics. Module records (L0) are not APIs and are left out with that reason.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from precheck.compare.entries import DumpIndex, open_dump
from precheck.compare.summary import DumpComparison
from precheck.dump import safe_files
from precheck.dump.record_names import call_of, is_module
from precheck.execution.options import CheckOptions

MAX_PRECHECKED = 50  # calls replayed by one compare


def suspect_calls(comparison: DumpComparison) -> list[str]:
    """The calls (``Functional.gelu.0``) of the suspects and of the first divergent record, first seen first; not a
    record whose divergence a peer rank handed over (precheck.compare.steps): its call is not in question."""
    findings = list(comparison.divergence.suspects)
    if comparison.divergence.first is not None:
        findings.insert(0, comparison.divergence.first)
    calls: list[str] = []
    for finding in findings:
        call = call_of(finding.name)
        if call not in calls and finding.direction != "parameters_grad" and finding.from_rank is None:
            calls.append(call)
    return calls[:MAX_PRECHECKED]


def write_sub_dump(target: DumpIndex, calls: list[str], folder: Path) -> Path:
    """A dump.json holding only the records of ``calls``, its tensor files copied beside it."""
    wanted = set(calls)
    data, files = {}, set()
    with target.file() as f:
        for i, key in enumerate(target.keys):
            if call_of(key) in wanted:
                data[key] = target.read(i, f)
                files |= set(_data_names(data[key]))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dump_tensor_data").mkdir(exist_ok=True)
    for name in files:
        if "/" not in name and "\\" not in name and name not in (".", ".."):  # a name of its own in the copy
            _copy(target.data_dir, name, folder / "dump_tensor_data" / name)
    doc = {"task": target.task, "level": target.level, "framework": target.framework, "dump_data_dir": None}
    path = folder / "dump.json"
    path.write_text(json.dumps(doc | {"data": data}), encoding="utf-8")
    return path


def _copy(data_dir: Path, name: str, destination: Path) -> None:
    """``name``'s file copied from the one descriptor precheck.dump.safe_files checked, as run_ut would read it:
    a file run_ut refuses (a link out of the dump, not a regular file) is not copied, and run_ut then says the
    record's file is missing rather than grading another file."""
    try:
        source = safe_files.open_file(data_dir, name)
    except safe_files.Refused:
        return
    with source, open(destination, "wb") as copy:
        shutil.copyfileobj(source.file, copy)


def _data_names(value) -> list[str]:
    if isinstance(value, dict):
        own = [value["data_name"]] if isinstance(value.get("data_name"), str) else []
        return own + [n for v in value.values() for n in _data_names(v)]
    if isinstance(value, list):
        return [n for v in value for n in _data_names(v)]
    return []


def precheck_suspects(
    comparison: DumpComparison, out_dir: Path, run_ut: Callable[..., Any], limits: CheckOptions | None = None
) -> dict[str, dict[str, str]]:
    """Replay the suspects with ``run_ut`` (precheck.run_ut.run_ut, passed in by the command: run_ut sits above
    compare); the verdict of each suspect record's call, by record name. ``limits``: the device a statistics
    dump's calls re-run on, ``max_memory`` and ``timeout`` (default: the CPU, run_ut's defaults)."""

    target = open_dump(comparison.target)
    calls = suspect_calls(comparison)
    verdicts: dict[str, dict[str, str]] = {}
    api_calls = [c for c in calls if not is_module(c)]
    for call in set(calls) - set(api_calls):
        verdicts[call] = {"forward": "SKIP", "message": "a module, not an API: precheck checks APIs (dump at L1)"}
    if api_calls:
        sub = write_sub_dump(target, api_calls, out_dir / "precheck_dump")
        recorded = target.task == "tensor"
        options = replace(limits or CheckOptions(), target="recorded" if recorded else "device")
        summary = run_ut(sub, out_dir, options=options)
        comparison.precheck_csv = summary.result_path
        for result in summary.results:
            verdicts[result.name] = {
                "forward": result.forward.value,
                "backward": result.backward.value if result.backward else "",
                "message": result.message,
            }
    by_record = {}
    for finding in [comparison.divergence.first, *comparison.divergence.suspects]:
        if finding is not None and call_of(finding.name) in verdicts:
            by_record[finding.name] = verdicts[call_of(finding.name)]
    comparison.prechecked = by_record
    return by_record
