"""Why a run's APIs are SKIP, in a few lines of its console summary: the commonest reasons with their counts and
what to do about each. A run whose every API is SKIP (a dump.json copied without its dump_tensor_data/, a
MindSpore dump without MindSpore) exits 0 by design (``--fail-on`` gates it), so the summary has to say it.

Read from the result CSV and the run's reasons file (precheck/frames/reasons.py), so the lines count what the files
hold (a resumed run's rows too). A SKIP row is grouped by its reason code, never by its Message's words: a Message
is only shown, as the first row's example where the code alone does not say enough. The summary is written for the
run this precheck just made, so the reasons file is there; an API without a code (the part of a resumed run that an
older precheck wrote) is counted apart. Torch-free."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from precheck.core.reasons import Reason
from precheck.core.status import SKIP
from precheck.escape import unformula
from precheck.frames import reasons as reasons_file
from precheck.run_files.csv_files import RESULT_HEADER, read_csv_rows
from precheck.schema import Direction, details_of, split_row_name

_NAME, _FORWARD, _MESSAGE = RESULT_HEADER[0], RESULT_HEADER[1], RESULT_HEADER[3]
_SHOWN = 160  # characters of a Message quoted as an example
_ADD_DATA = (
    "copy the dump's dump_tensor_data/ beside its dump.json, or add --random to generate inputs from the recorded "
    "statistics"
)

# Each SKIP code: what its APIs have in common, whether the first row's Message is quoted as an example (where the
# code does not say which file, record or error), and what to do where that is known.
_SAID: dict[Reason | None, tuple[str, bool, str]] = {
    Reason.SKIP_MISSING_FILE: ("tensor files not found", True, _ADD_DATA),
    Reason.SKIP_MISSING_RANK: (
        "collectives missing a rank's inputs",
        True,
        "run_ut the whole step folder, with every rank's dump in it",
    ),
    Reason.SKIP_OTHER_FRAMEWORK: (
        "MindSpore APIs read as PyTorch's",
        False,
        "add --framework mindspore (or precheck -f mindspore run_ut ...)",
    ),
    Reason.SKIP_UNSUPPORTED: ("not supported", True, "precheck apis lists the APIs precheck checks"),
    Reason.SKIP_INPUTS: ("inputs that cannot be rebuilt", True, ""),
    Reason.SKIP_NO_DATA: ("calls on fake tensors (shape propagation): no data, nothing to check", False, ""),
    Reason.SKIP_BAD_RECORD: ("records precheck cannot decode", True, ""),
    Reason.SKIP_LISTED_OUT: ("left out by the white or black list", False, ""),
    Reason.SKIP_DEVICE_OP: ("another device's fused ops", False, "--target recorded grades their recorded outputs"),
    Reason.SKIP_RANDOM: ("random calls that no law checks", True, ""),
    Reason.SKIP_MEMORY: ("above --max-memory", False, "raise it to check them"),
    Reason.SKIP_GOLDEN_FAILED: ("the CPU float64 golden failed", True, ""),
    Reason.SKIP_COMPILE_FAILED: ("torch.compile failed", True, ""),
    Reason.SKIP_NO_MINDSPORE: ("no MindSpore to run them", True, ""),
    Reason.SKIP_MINDSPORE_KERNEL: ("MindSpore cannot run them on this device", True, ""),
    Reason.SKIP_RECORDED_OUTPUT: ("recorded outputs that cannot be graded", True, ""),
    Reason.SKIP_PRECHECK_FAULT: ("precheck's own fault on the record", True, "worth a bug report"),
    Reason.TIMED_OUT: ("timed out", False, "raise --timeout to grade them"),
    None: ("no reason code recorded (rows of an older precheck)", False, "the result CSV's Message says why"),
}


def skip_reasons(result_csv: str | os.PathLike) -> tuple[Counter, int]:
    """Reason (with its fix where one is known) -> APIs whose forward is SKIP, and the number of APIs, from a
    run's result CSV and its reasons file."""
    result_csv = Path(result_csv)
    _, rows = read_csv_rows(result_csv)
    codes = _forward_codes(result_csv.with_name(details_of(result_csv.name)))
    skipped = [row for row in rows if row.get(_FORWARD, "").strip() == SKIP]
    first: dict[Reason | None, str] = {}
    for row in skipped:
        first.setdefault(codes.get(row.get(_NAME, "")), unformula(row.get(_MESSAGE, "")).strip())
    reasons: Counter = Counter(_said(codes.get(row.get(_NAME, "")), first) for row in skipped)
    return reasons, len(rows)


def _forward_codes(details: Path) -> dict[str, Reason | None]:
    """API -> the code of its first forward row in the reasons file (a SKIP API's one row says why)."""
    found = reasons_file.read(details) or {}
    codes: dict[str, tuple[int, Reason | None]] = {}
    for name, row in found.items():
        parts = split_row_name(name)
        if parts is None or parts[1] != Direction.FORWARD:
            continue
        api, index = parts[0], parts[2]
        if api not in codes or index < codes[api][0]:
            codes[api] = (index, row.reason)
    return {api: code for api, (_, code) in codes.items()}


def _said(code: Reason | None, first: dict[Reason | None, str]) -> str:
    """A group's line: its code's words, the first row's Message where quoted, the fix where known."""
    what, quoted, fix = _SAID.get(code, (str(code), True, ""))
    example = first.get(code, "")
    if quoted and example:
        what += f" (the first: {example if len(example) <= _SHOWN else example[: _SHOWN - 3] + '...'})"
    return f"{what}: {fix}" if fix else what


def describe_skips(reasons: Counter, total: int, shown: int = 3) -> list[str]:
    """The summary's lines: the ``shown`` commonest reasons, each with its count of APIs; ``total`` is the run's
    number of APIs (all SKIP: nothing was graded, and the lines say so)."""
    if not reasons:
        return []
    skipped = sum(reasons.values())
    head = "nothing was graded: every API is SKIP" if skipped == total else f"{_apis(skipped)} SKIP"
    lines = [f"  {head}; why (the result CSV's Message has each):"]
    lines += [f"    {_apis(n)}: {reason}" for reason, n in reasons.most_common(shown)]
    if len(reasons) > shown:
        rest = sum(n for _, n in reasons.most_common()[shown:])
        lines.append(f"    {_apis(rest)}: {len(reasons) - shown} other reasons")
    return lines


def _apis(n: int) -> str:
    return f"{n} API" if n == 1 else f"{n} APIs"
