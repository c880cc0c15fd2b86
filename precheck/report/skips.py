"""Why a run's APIs are SKIP, in a few lines of its console summary: the commonest reasons with their counts and
what to do about each. A run whose every API is SKIP (a dump.json copied without its dump_tensor_data/, a
MindSpore dump without MindSpore) exits 0 by design (``--fail-on`` gates it), so the summary has to say it.

Read from the result CSV, so the lines count what the file holds (a resumed run's rows too). Torch-free.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

from precheck.escape import unformula
from precheck.grader.status import SKIP
from precheck.report.csv_files import RESULT_HEADER, read_csv_rows

_NAME, _FORWARD, _MESSAGE = RESULT_HEADER[0], RESULT_HEADER[1], RESULT_HEADER[3]
_MISSING_FILE = re.compile(r"^\S+: file not found in (.+)$")
_MINDSPORE_API = re.compile(r"^not supported: (Mint|MintFunctional)\.")


def skip_reasons(result_csv: str | os.PathLike) -> tuple[Counter, int]:
    """Reason (with its fix where one is known) -> APIs whose forward is SKIP, and the number of APIs, from a
    run's result CSV."""
    _, rows = read_csv_rows(Path(result_csv))
    reasons: Counter = Counter()
    for row in rows:
        if row.get(_FORWARD, "").strip() == SKIP:
            reasons[reason_of(unformula(row.get(_MESSAGE, "")).strip(), row.get(_NAME, ""))] += 1
    return reasons, len(rows)


def reason_of(message: str, name: str = "") -> str:
    """A SKIP row's message as a reason shared by the rows it applies to (the record's own name taken out), and
    the fix where one is known."""
    missing = _MISSING_FILE.match(message)
    if missing:
        return (
            f"tensor files not found in {missing[1]}: copy the dump's dump_tensor_data/ beside its dump.json, or "
            "add --random to generate inputs from the recorded statistics"
        )
    if _MINDSPORE_API.match(message):
        return "MindSpore APIs read as PyTorch's: add --framework mindspore (or precheck -f mindspore run_ut ...)"
    file, colon, why = message.partition(": ")
    if name and file.startswith(f"{name}.") and colon:  # a record's tensor file: Mint.abs.0.forward.input.0.npy
        return f"a tensor file: {why}"
    api = name.rpartition(".")[0]
    return (message.replace(api, "{API}") if api else message) or "(no message)"


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
