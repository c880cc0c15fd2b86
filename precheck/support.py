"""``precheck apis``: what precheck can run, and which APIs of a dump would be SKIP rows before running it.

The check needs no tensors and runs nothing: it reads the dump and asks the registry, so a user learns in a
second which part of a large dump a run would leave unchecked, and why.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path

from api_registry import aten_names, catalogue, registry
from precheck.dump.records import Case, Dump, load_dump, not_replayed
from precheck.escape import escape
from precheck.execution.check import preflight
from precheck.execution.mindspore_target import MindSporeUnavailable, mindspore_python
from precheck.execution.options import CheckOptions
from precheck.execution.targets import for_framework, target_for
from precheck.grader import stochastic
from precheck.inputs.builder import InputError, iter_specs, resolve
from precheck.results import ApiResult
from precheck.run_ut import resolved


def supported() -> dict[str, Counter]:
    """Supported API names per prefix, counted per precision-standard class (ATen overloads are counted by their
    names, without resolving thousands of operators)."""
    table: dict[str, Counter] = defaultdict(Counter)
    for name, entry in registry().items():
        table[name.split(".", 1)[0]][entry.standard] += 1
    for name in aten_names():
        op = name.partition(".")[0]
        if not catalogue.denied("Aten", op):
            table["Aten"][catalogue.class_of("Aten", op)] += 1
    return dict(table)


def would_skip(api_info: str | os.PathLike) -> tuple[int, dict[str, list[str]]]:
    """The number of forward records, and each reason to skip with the calls it applies to, in dump order."""
    dump = load_dump(api_info)
    return len(dump.cases), skips_of(dump)


def skips_of(dump: Dump) -> dict[str, list[str]]:
    """Each reason a run of ``dump`` would skip, with the calls it applies to, in dump order (the dump indexed
    once, so the check's other lines read the same index). A plain run's own preflight decides, on the recorded
    calls: what a call's records, API, device and randomness say before anything is built; then a random call's
    law on the recorded shapes, the tensor files, and whether its target can be found."""
    options = resolved(for_framework(CheckOptions(), dump), "auto")
    target = target_for(options)
    no_target = _missing_mindspore(options)
    reasons: dict[str, list[str]] = defaultdict(list)
    for case in dump.cases:
        checked = preflight(case, options, target)
        if isinstance(checked, ApiResult):
            reasons[checked.message].append(case.name)
            continue
        entry, random = checked
        why = random and stochastic.unfit(entry, case.args, case.kwargs, case.outputs)
        why = why or _unreadable_file(case, dump.data_dir) or no_target
        if why:
            reasons[why].append(case.name)
    return dict(reasons)


def _missing_mindspore(options: CheckOptions) -> str | None:
    """Why a run cannot find MindSpore, where its target needs it (a MindSpore statistics dump is re-run in
    MindSpore), asked of the function the run asks: without it every call is that SKIP row."""
    if options.target != "mindspore":
        return None
    try:
        mindspore_python()
    except MindSporeUnavailable as e:
        return str(e)
    return None


def _unreadable_file(case: Case, data_dir: Path) -> str | None:
    """Why a tensor file that the run would read is not there (missing, or a name that leaves the dump), else
    None: a dump copied without its dump_tensor_data/ is all SKIP rows, and the check says so."""
    for spec in iter_specs((case.args, case.kwargs, case.grad_outputs)):
        if spec.data_name is None:
            continue
        try:
            if not resolve(data_dir, spec.data_name).is_file():
                return f"tensor file not found in {data_dir} (--random generates it from the statistics)"
        except InputError as e:
            return f"tensor file refused: {str(e).partition(': refused, ')[2] or e}"
        except OSError as e:
            return f"tensor file cannot be accessed: {e.strerror or type(e).__name__}"
    return None


def describe_supported() -> str:
    table = supported()
    classes = sorted({c for counts in table.values() for c in counts})
    lines = [f"{'prefix':12}" + "".join(f"{c:>11}" for c in classes) + f"{'total':>8}"]
    for prefix in sorted(table):
        counts = table[prefix]
        lines.append(
            f"{prefix:12}" + "".join(f"{counts.get(c, 0):11d}" for c in classes) + f"{sum(counts.values()):8d}"
        )
    return "\n".join(lines)


def describe_skips(api_info: str | os.PathLike) -> str:
    dump = load_dump(api_info)
    total, reasons = len(dump.cases), skips_of(dump)
    skipped = sum(len(v) for v in reasons.values())
    lines = [f"{api_info}: {total} forward records, {skipped} would be SKIP rows, {total - skipped} checked"]
    if dump.cases.module_records:
        lines.append(f"  {not_replayed(dump.cases.module_records)}")
    for reason, names in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(names[:5]) + (f", ... ({len(names) - 5} more)" if len(names) > 5 else "")
        lines.append(f"  {len(names):5d}  {escape(reason)}: {escape(shown)}")  # names and reasons from the dump
    return "\n".join(lines)
