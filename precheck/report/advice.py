"""Expert advice: rules over a run's results (a precheck.load frame) that name a likely cause and what to do, each
with the rows that triggered it as evidence.

A rule reads only what the CSVs say and, where a NaN was born and how long a sum was, what the dump recorded of the
call (precheck/report/recorded.py), so the report can be written long after the run, on any machine, without
torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from precheck.core.older_python import zip_strict
from precheck.core.reasons import BEYOND_ROUNDING, HONEST, Reason
from precheck.report.recorded import accumulates, growth_of, inputs_finite, read_records

if TYPE_CHECKING:
    import pandas

__all__ = ["Finding", "RULES", "advise"]

HALF = ("torch.float16", "torch.bfloat16")
MAX_EVIDENCE = 20  # rows shown per finding; the count says how many there are
NO_REASONS = (
    "No findings: this run has no reasons file beside its CSVs (a run from before it, or msprobe's); "
    "a newer precheck run gives them."
)
WITHIN_ULP = 1.0  # ULP error at most this: a faithful rounding of the golden (a correct one is within 0.5)


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    advice: str  # the likely cause
    action: str  # what to do about it: the card ends with it
    evidence: tuple[str, ...]  # one line per triggering row (the first MAX_EVIDENCE): its name and the figure
    count: int
    rows: tuple[str, ...] = ()  # every triggering row's name, as the details CSV names it


def _row_name(row: pandas.Series) -> str:
    return f"{row['call']}.{row['direction']}.output.{row['output']}"


def _finding(rule: str, title: str, advice: tuple[str, str], rows: pandas.DataFrame, why: Callable) -> Finding | None:
    """``advice``: (the likely cause, what to do)."""
    if rows.empty:
        return None
    evidence = tuple(f"{_row_name(r)} ({r['dtype']}): {why(r)}" for _, r in rows.head(MAX_EVIDENCE).iterrows())
    names = tuple(_row_name(r) for _, r in rows.iterrows())
    return Finding(rule, title, advice[0], advice[1], evidence, len(rows), names)


def _message(row: pandas.Series, length: int = 160) -> str:
    text = str(row["message"])
    return text if len(text) <= length else text[: length - 3] + "..."


def fp16_overflow(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    rows = frame[(frame["dtype"] == "torch.float16") & (frame["nonfinite"] > 0)]
    rows = rows[rows["status"].isin(["warning", "error"])]
    return _finding(
        "fp16_overflow",
        "fp16 overflow",
        (
            "fp16 holds nothing beyond 65504: the target has inf/nan where the float64 golden is finite.",
            "Train in bf16, scale the loss down (dynamic loss scaling), or keep this op in fp32.",
        ),
        rows,
        _message,
    )


def underflow(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    share = frame["small_value_err_ratio"].fillna(0)
    rows = frame[(frame["dtype"] == "torch.float16") & (frame["status"] == "error") & (share > 0)]
    return _finding(
        "underflow",
        "underflow and subnormals",
        (
            "values near zero lose their digits in fp16 (its smallest normal is 6.1e-5; below it subnormals keep "
            "fewer bits, then zero).",
            "Scale them up (loss scaling: the same step at loss scale 1024 shows none), or keep this op in fp32.",
        ),
        rows,
        lambda r: f"{r['small_value_err_ratio']:.2%} of its small values beyond the dtype's absolute tolerance",
    )


def _generated(frame: pandas.DataFrame) -> pandas.Series:
    """Rows whose inputs were drawn from the dump's statistics, not recorded."""
    return frame["generated"]


def low_precision_accumulation(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    candidates = frame[_accumulation_candidates(frame)]
    if dump is None or candidates.empty:
        return None
    growth = {i: growth_of(r, dump) for i, r in candidates.iterrows()}
    rows = candidates[[accumulates(growth[i]) for i in candidates.index]]
    return _finding(
        "low_precision_accumulation",
        "accumulation in low precision",
        (
            "the error of this sum, matmul, convolution or pooling grows with the length it reduces: beyond the "
            "one rounding of a kernel that accumulates in fp32, of the order of the sqrt(n) roundings a kernel "
            "that adds in fp16/bf16 makes.",
            "Accumulate in fp32 (the kernel's accumulator, or upcast the op).",
        ),
        rows,
        lambda r: growth[r.name].evidence(),
    )


def _accumulation_candidates(frame: pandas.DataFrame) -> pandas.Series:
    """Half-precision error rows whose recorded inputs the run replayed (the dump's output norm is theirs)."""
    return frame["dtype"].isin(HALF) & (frame["status"] == "error") & ~_generated(frame)


def nan_origin(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    rows = frame[(frame["nonfinite"] > 0) & (frame["direction"] == "forward")]
    if dump is None or rows.empty:
        return None
    finite = rows["call"].map(lambda call: inputs_finite(dump, f"{call}.forward"))
    born = rows[finite.eq(True)]
    return _finding(
        "nan_born_here",
        "inf/nan born here",
        (
            "every input of this call is finite, yet its output holds inf/nan the golden does not: the overflow or "
            "invalid operation happens in this API (its dtype's range, or its kernel), not upstream.",
            "Start at this API, not before it: reproduce it with its precheck repro command (the API table), "
            "then keep it in fp32 or bound its inputs to its dtype's range.",
        ),
        born,
        _message,
    )


def generated_inputs(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    rows = frame[_generated(frame) & (frame["status"] == "error")]
    return _finding(
        "generated_inputs",
        "verdicts resting on generated inputs",
        (
            "these inputs were drawn from the dump's Max/Min/Mean/Norm, not recorded: a failure may come from "
            "values the model never saw.",
            "Re-dump these APIs with task: tensor and run again to grade them on the recorded values.",
        ),
        rows,
        lambda r: r["status"],
    )


def random_law(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    checked = frame["reason"] == Reason.RANDOM_LAW
    rows = frame[checked & frame["status"].isin(["warning", "error"])]
    return _finding(
        "random_law",
        "random ops that break their law",
        (
            "a random call cannot match a golden value by value; its outputs were checked against the law they "
            "must follow (dropout's share of zeros and its 1/(1-p) scale, a sampler's distribution), and these "
            "break it: the kernel draws or scales wrongly, whatever the seed.",
            "Report the kernel to its owner with this evidence; until it is fixed, train with the framework's "
            "reference implementation of the op.",
        ),
        rows,
        lambda r: f"{r['status']}: {_message(r, 160)}",
    )


def beyond_rounding(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    rows = frame[(frame["status"] == "error") & frame["reason"].isin(BEYOND_ROUNDING) & ~_recorded(frame)]
    return _finding(
        "beyond_rounding",
        "errors beyond what the dtype explains",
        (
            "these outputs are materially worse than an honest kernel of their dtype (accurate accumulation, one "
            "rounding): real kernel precision bugs, unlike the warnings, which their dtype's rounding explains.",
            "Reproduce each with its precheck repro command (the API table) and report it to the kernel's owner; "
            "until it is fixed, run the op in fp32 or with a kernel that accumulates in fp32.",
        ),
        rows,
        _message,
    )


def _recorded(frame: pandas.DataFrame) -> pandas.Series:
    """Rows graded on the outputs the dump recorded (a frame from before that column: none)."""
    return frame["recorded"] if "recorded" in frame else frame["status"] != frame["status"]


def recorded_beyond_rounding(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    """The same, on the outputs the dump recorded (``--target recorded``, or a replay's recorded values): the
    repro command re-runs the call on this machine's kernel, which is not the one that computed them."""
    rows = frame[(frame["status"] == "error") & frame["reason"].isin(BEYOND_ROUNDING) & _recorded(frame)]
    return _finding(
        "recorded_beyond_rounding",
        "recorded outputs beyond what the dtype explains",
        (
            "the outputs the training run recorded are materially worse than an honest kernel of their dtype: the "
            "kernel that ran in training (or the program around it) computed them; a replay of the call on this "
            "machine runs another kernel and may show an ordinary result.",
            "Reproduce what was graded: precheck run_ut --target recorded on the dump grades the same recorded "
            "outputs; report the call's record (its inputs and outputs in the dump) to the owner of the training "
            "device's kernel, and until it is fixed run the op in fp32 there.",
        ),
        rows,
        _message,
    )


def within_rounding(frame: pandas.DataFrame, dump: dict | None) -> Finding | None:
    """The other side: a failure of a standard stricter than the dtype (msprobe's, thousandth, absolute ...) on
    an output no element of which is off by more than one unit in the last place."""
    judged_by_rule = ~frame["reason"].isin(HONEST)
    failed = frame["status"].isin(["warning", "error"]) & (frame["nonfinite"] == 0)
    rows = frame[failed & judged_by_rule & (frame["ulp_max"] <= WITHIN_ULP)]
    return _finding(
        "within_rounding",
        "failures the dtype's rounding explains",
        (
            "this error is the dtype's rounding, not a kernel bug: the standard is stricter than the dtype. No "
            "element is off by more than one unit in the last place (what a kernel that accumulates in fp32 and "
            "rounds once gives).",
            "Grade it by the default standard (an honest kernel of its dtype), or compute in a wider dtype if the "
            "model needs more digits.",
        ),
        rows,
        lambda r: f"{r['status']} ({_message(r, 120)}); every element within {r['ulp_max']:.2g} ULP of the golden",
    )


RULES = (fp16_overflow, underflow, low_precision_accumulation, nan_origin, beyond_rounding, recorded_beyond_rounding,
         within_rounding, generated_inputs, random_law)  # fmt: skip


def advise(frame: pandas.DataFrame, dump_json: str | Path | None = None) -> list[Finding]:
    """Every rule that fires on ``frame``; ``dump_json`` (the run's dump) lets a rule read recorded inputs. The
    rules read the rows' reasons (precheck/frames/reasons.py), never their Messages: a run without a reasons file
    (from before it, or msprobe's) gets no findings, and the report says so (NO_REASONS)."""
    if not frame.attrs.get("reasons"):
        return []
    dump = None
    born = frame[frame["nonfinite"] > 0]
    grown = frame[_accumulation_candidates(frame)]
    keys = {f"{c}.forward" for c in [*born["call"], *grown["call"]]}
    keys |= {f"{c}.{d}" for c, d in zip_strict(grown["call"], grown["direction"])}
    if dump_json is not None and keys:
        dump = read_records(Path(dump_json), keys)
    return [f for f in (rule(frame, dump) for rule in RULES) if f is not None]
