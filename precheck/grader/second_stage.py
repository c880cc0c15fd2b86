"""msprobe's second stage on one output: the target's details-CSV metrics judged against a reference device's
metrics of the same output (the benchmark standard's ratios), or by the single-side standard of the API's class.

Two random draws differ by design, so a first-stage verdict of a random op's law stands; an output measured on
one side only, or not a floating dtype, gets what msprobe gives it (binary comparison, or SKIP with the reason).
``precheck.precision_compare`` reads and writes the CSVs; this only judges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from precheck.core.comparison import Metrics
from precheck.core.dtypes import canonical, is_complex, is_floating
from precheck.core.older_python import zip_strict
from precheck.core.status import ERROR, PASS, SKIP, worst
from precheck.grader.limits import limits_for
from precheck.grader.standards import STANDARDS, Context, benchmark_ratios, ratio_of, resolve
from precheck.schema import (
    BENCHMARK_COLUMNS,
    BINARY_COLUMNS,
    METRIC_FIELDS,
    THOUSANDTH_COLUMNS,
    THRESHOLD_COLUMNS,
    ULP_COLUMNS,
)

__all__ = ["SecondStage", "second_stage"]


@dataclass(frozen=True)
class SecondStage:
    """The verdict on one output, the standard that gave it ("" when none was applied) and why; ``columns`` are
    the second-stage columns it fills (None: measured as not finite, a blank cell)."""

    status: str  # a Status, or a first-stage status this stage lets stand as it was written
    standard: str
    message: str
    columns: dict[str, float | str | None] = field(default_factory=dict)


def second_stage(
    stage1: str,
    message: str,
    target: Metrics,
    reference: Metrics,
    device_dtype: str,
    api_class: str | None,
    standard: str,
    random: bool = False,
) -> SecondStage:
    """One output of the target (``stage1``: its first-stage status, ``message`` its first-stage Message,
    ``device_dtype`` its DEVICE Dtype cell) against the reference's metrics of the same output. ``random``: the
    first stage judged it by a random op's law (its reason code, core/reasons.py)."""
    if stage1 == SKIP:
        return SecondStage(SKIP, "", message or "skipped in the first stage")
    if random:
        # Two devices' random draws differ by design: the first stage's check of their law is the verdict.
        return SecondStage(stage1, "", message)
    if all(v is None for v in target.columns()):
        # Nothing measured: a stage-1 verdict without metrics (shape or type mismatch) stands as it was.
        return SecondStage(ERROR if stage1 == ERROR else SKIP, "", message or "no metrics to compare")
    if not device_dtype.strip():
        return SecondStage(SKIP, "", message or "no device dtype in the first stage")
    if all(v is None for v in reference.columns()):
        return SecondStage(SKIP, "", "the GPU row has no metrics to compare with")
    dtype = canonical(device_dtype.strip())
    if dtype is None or not (is_floating(dtype) or is_complex(dtype)):
        rate = target.binary_mismatch
        status = PASS if rate == 0 else ERROR
        why = "" if status == PASS else "ERROR: 二进制一致错误率超过阈值"
        return SecondStage(status, "binary", why, dict(zip_strict(BINARY_COLUMNS, (rate, status))))
    if dtype == "torch.float64" or is_complex(dtype):
        return SecondStage(SKIP, "", "This data type does not support benchmark compare.")
    name = "benchmark" if standard == "benchmark" else resolve(standard, api_class, True)
    if name == "benchmark":
        return _benchmark(target, reference, dtype, api_class)
    judged, ref = _filled(target), _filled(reference)
    status, why = STANDARDS[name](judged, Context(dtype=dtype, reference=ref, api_class=api_class))
    return SecondStage(status, name, why, _judged_columns(name, judged, ref, dtype, status))


def _judged_columns(name: str, m: Metrics, ref: Metrics, dtype: str, status: str) -> dict[str, float | str | None]:
    """The numbers a single-side standard judged and their verdicts, in the columns msprobe fills for it
    (record_absolute_threshold_result, UlpPrecisionCompare ...), so a details row says why it passed or failed.
    ``m`` and ``ref`` are _filled: a blank column reads 0, as the standard judged it."""
    if name in ("absolute", "accumulative"):
        rel, small = m.rel_err_ratio or 0.0, m.abs_err_ratio or 0.0
        verdicts = (ERROR if rel > 0 else PASS, ERROR if small > 0 else PASS)
        return dict(zip_strict(THRESHOLD_COLUMNS, (rel, verdicts[0], small, verdicts[1])))
    if name == "ulp":
        share = m.ulp_above_ratio or 0.0
        ratio = ratio_of(share, ref.ulp_above_ratio or 0.0, limits_for(dtype).ratio_floor)
        return dict(zip_strict(ULP_COLUMNS, (m.ulp_mean, share, ratio, status)))
    if name == "thousandth":
        return dict(zip_strict(THOUSANDTH_COLUMNS, (m.rel_within_1e3, status)))
    if name == "binary":
        return dict(zip_strict(BINARY_COLUMNS, (m.binary_mismatch, status)))
    return {}  # precheck's own standards (default, msprobe) judge no column of msprobe's second stage


def _filled(m: Metrics) -> Metrics:
    """Blank columns of an otherwise measured row read as 0 for the single-side standards (the count stays)."""
    filled = {name: 0.0 if v is None else v for name, v in zip_strict(METRIC_FIELDS, m.columns())}
    return replace(m, **filled)  # type: ignore[arg-type]  # the 17 metric columns, all floats


def _benchmark(m: Metrics, ref: Metrics, dtype: str, api_class: str | None) -> SecondStage:
    messages, statuses = [], []
    columns: dict[str, float | str | None] = {}
    ratios = benchmark_ratios(_filled(m), _filled(ref), dtype, api_class)
    for (ratio_col, verdict_col), r in zip(BENCHMARK_COLUMNS, ratios):
        if not (math.isfinite(r.mine) and math.isfinite(r.theirs)):
            same = r.mine == r.theirs or math.isnan(r.mine) and math.isnan(r.theirs)
            status = PASS if same else ERROR
            columns[ratio_col] = None
            messages.append(f"{r.name}: inf/nan {'on both sides' if same else 'on one side only'}")
        else:
            status = ERROR if r.failed else PASS
            columns[ratio_col] = r.ratio
            if r.failed:
                messages.append(f"{r.name} {r.ratio:.3g}x the GPU's, above {r.limit:g}x")
        columns[verdict_col] = status
        if r.counts:
            statuses.append(status)
    return SecondStage(worst(statuses), "benchmark", "; ".join(messages), columns)
