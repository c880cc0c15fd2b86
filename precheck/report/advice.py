"""Expert advice: rules over a run's results (a results.load frame) that name a likely cause and what to do, each
with the rows that triggered it as evidence.

A rule reads only what the CSVs (and, for where a NaN was born, the dump's recorded input statistics) say, so
the report can be written long after the run, on any machine, without torch.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from api_registry.classes import api_class
from precheck.dump.jsonstream import JsonStream, StreamError

if TYPE_CHECKING:
    import pandas

__all__ = ["Finding", "RULES", "advise"]

HALF = ("torch.float16", "torch.bfloat16")
MAX_EVIDENCE = 20  # rows shown per finding; the count says how many there are
_NONFINITE = re.compile(r"inf/nan (?:mismatch|at) ")
_ACCUMULATING = ("reduction", "matmul", "conv")


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    advice: str
    evidence: tuple[str, ...]  # one line per triggering row: its name and the figure that triggered it
    count: int


def _row_name(row: pandas.Series) -> str:
    return f"{row['call']}.{row['direction']}.output.{row['output']}"


def _finding(rule: str, title: str, advice: str, rows: pandas.DataFrame, why: Callable) -> Finding | None:
    if rows.empty:
        return None
    evidence = tuple(f"{_row_name(r)} ({r['dtype']}): {why(r)}" for _, r in rows.head(MAX_EVIDENCE).iterrows())
    return Finding(rule, title, advice, evidence, len(rows))


def _message(row: pandas.Series, length: int = 160) -> str:
    text = str(row["message"])
    return text if len(text) <= length else text[: length - 3] + "..."


def fp16_overflow(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    rows = frame[(frame["dtype"] == "torch.float16") & frame["message"].str.contains(_NONFINITE)]
    rows = rows[rows["status"].isin(["warning", "error"])]
    return _finding(
        "fp16_overflow",
        "fp16 overflow",
        "fp16 holds nothing beyond 65504: the target has inf/nan where the float64 golden is finite. Train in "
        "bf16, scale the loss down (dynamic loss scaling), or keep this op in fp32.",
        rows,
        _message,
    )


def underflow(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    share = frame["small_value_err_ratio"].fillna(0)
    rows = frame[(frame["dtype"] == "torch.float16") & (frame["status"] == "error") & (share > 0)]
    return _finding(
        "underflow",
        "underflow and subnormals",
        "values near zero lose their digits in fp16 (its smallest normal is 6.1e-5; below it subnormals keep "
        "fewer bits, then zero): scale them up (loss scaling: the same step at loss scale 1024 shows none), or "
        "keep this op in fp32.",
        rows,
        lambda r: f"{r['small_value_err_ratio']:.2%} of its small values beyond the dtype's absolute tolerance",
    )


def low_precision_accumulation(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    kinds = {api: api_class(api) in _ACCUMULATING or "avg_pool" in api for api in frame["api"].unique()}
    accumulating = frame["api"].map(kinds)
    worse = frame["message"].str.contains("worse than an honest", regex=False)
    rows = frame[accumulating & frame["dtype"].isin(HALF) & (frame["status"] == "error") & worse]
    return _finding(
        "low_precision_accumulation",
        "accumulation in low precision",
        "a sum, a matmul or a convolution is worse than an honest kernel of its dtype, one that accumulates in "
        "fp32 and rounds once: the kernel likely adds in fp16/bf16. Accumulate in fp32.",
        rows,
        _message,
    )


def _inputs_finite(record: dict | None) -> bool | None:
    """Whether every recorded input statistic of a forward record is finite (None: nothing recorded)."""
    if not isinstance(record, dict):
        return None
    stats = []

    def walk(value: object) -> None:
        if isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, dict):
            if "Max" in value or "Min" in value:
                stats.extend(v for v in (value.get("Max"), value.get("Min")) if isinstance(v, (int, float)))
            else:
                for v in value.values():
                    walk(v)

    walk([record.get("input_args"), record.get("input_kwargs")])
    return all(math.isfinite(v) for v in stats) if stats else None


def nan_origin(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    rows = frame[frame["message"].str.contains(_NONFINITE) & (frame["direction"] == "forward")]
    if dump is None or rows.empty:
        return None
    finite = rows["call"].map(lambda call: _inputs_finite(dump.get(f"{call}.forward")))
    born = rows[finite.eq(True)]
    return _finding(
        "nan_born_here",
        "inf/nan born here",
        "every input of this call is finite, yet its output holds inf/nan the golden does not: the overflow or "
        "invalid operation happens in this API (its dtype's range, or its kernel), not upstream.",
        born,
        _message,
    )


def generated_inputs(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    said = frame.get("api_message", frame["message"]).fillna("") + frame["message"]
    rows = frame[said.str.contains("inputs generated from statistics", regex=False)]
    rows = rows[rows["status"].isin(["warning", "error"])]
    return _finding(
        "generated_inputs",
        "verdicts resting on generated inputs",
        "these inputs were drawn from the dump's Max/Min/Mean/Norm, not recorded: a failure may come from values "
        "the model never saw. Re-dump with task: tensor to check the recorded values.",
        rows,
        lambda r: r["status"],
    )


def random_law(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    checked = frame["message"].str.contains("random op, checked statistically", regex=False)
    rows = frame[checked & frame["status"].isin(["warning", "error"])]
    return _finding(
        "random_law",
        "random ops that break their law",
        "a random call cannot match a golden value by value; its outputs were checked against the law they must "
        "follow (dropout's share of zeros and its 1/(1-p) scale, a sampler's distribution), and these break it: "
        "the kernel draws or scales wrongly, whatever the seed.",
        rows,
        lambda r: f"{r['status']}: {_message(r, 160)}",
    )


def beyond_rounding(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    rows = frame[(frame["status"] == "error") & frame["message"].str.contains("worse than an honest", regex=False)]
    return _finding(
        "beyond_rounding",
        "errors beyond what the dtype explains",
        "these outputs are materially worse than an honest kernel of their dtype (accurate accumulation, one "
        "rounding): real kernel precision bugs, unlike the warnings, which their dtype's rounding explains.",
        rows,
        _message,
    )


RULES = (fp16_overflow, underflow, low_precision_accumulation, nan_origin, beyond_rounding, generated_inputs,
         random_law)  # fmt: skip


def advise(frame: pandas.DataFrame, dump_json: str | Path | None = None) -> list[Finding]:
    """Every rule that fires on ``frame``; ``dump_json`` (the run's dump) lets a rule read recorded inputs."""
    dump = None
    flagged = frame[frame["message"].str.contains(_NONFINITE)]["call"]
    if dump_json is not None and not flagged.empty:
        dump = _forward_records(Path(dump_json), set(flagged))
    return [f for f in (rule(frame, dump) for rule in RULES) if f is not None]


def _forward_records(dump_json: Path, calls: set[str]) -> dict | None:
    """The forward records of ``calls``, read from their byte spans while the dump streams past (a dump of
    gigabytes is never held); None when the dump moved or cannot be read: the rules that need it stay silent."""
    wanted, spans, records = {f"{call}.forward" for call in calls}, {}, {}
    try:
        with open(dump_json, "rb") as f:
            js = JsonStream(f)
            if js.sniff() != "{":
                return None
            for key in js.keys("a top-level field name"):
                if key != "data" or js.peek() != "{":
                    js.skip()
                    continue
                for name in js.keys("a record name"):
                    span = js.skip()
                    if name in wanted:
                        spans[name] = span
            for name, (start, end) in spans.items():
                f.seek(start)
                records[name] = json.loads(f.read(end - start))
    except (OSError, ValueError, StreamError, RecursionError):
        return None
    return records
