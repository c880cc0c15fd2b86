"""The verdict on one output as values: its metrics (every details-CSV column) and what the details CSV, a failing
test and a report need to say.

Torch-free on purpose: the result model (precheck/results.py) holds these, and the commands that only read or
compare results never load torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from precheck.schema import METRIC_FIELDS, Status

if TYPE_CHECKING:
    from precheck.core.reasons import Reason


@dataclass(frozen=True)
class Metrics:
    cosine: float | None = None
    max_abs_err: float | None = None
    rel_within_1e2: float | None = None  # 双百指标: share with relative error < 1e-2 (small values: see below)
    rel_within_1e3: float | None = None  # 双千指标
    rel_within_1e4: float | None = None  # 双万指标
    binary_mismatch: float | None = None  # share not equal to the golden rounded to the target dtype
    error_balance: float | None = None
    rmse: float | None = None
    small_value_err_ratio: float | None = None
    max_rel_err: float | None = None
    mean_rel_err: float | None = None
    inf_nan_err_ratio: float | None = None
    rel_err_ratio: float | None = None
    abs_err_ratio: float | None = None
    ulp_max: float | None = None
    ulp_mean: float | None = None
    ulp_above_ratio: float | None = None
    # Where the largest absolute error lies (flat index into the compared tensor), for messages.
    worst_index: int | None = None
    nonfinite_mismatches: int = 0
    first_nonfinite_mismatch: int | None = None
    # Of those, the target's inf where the golden rounded to the target dtype is that inf: beyond the dtype's range
    # on both sides (a GradScaler's scaled fp16 gradients), an overflow of the dtype, not of the kernel.
    overflows: int = 0
    golden_max_abs: float | None = None  # largest finite |golden|: is the output zero at the dtype's scale?
    count: int | None = None  # elements the shares count (finite on both sides); None: not known (a CSV row)
    # The default standard's measure from the same pass, where every position is finite (grader/honest.py):
    error_norm: float | None = None  # ||t - g||
    golden_norm: float | None = None  # ||g||
    error_sum: float | None = None  # the sum of t - g
    scaled_worst: float | None = None  # max |t_i - g_i| / max(|g_i|, ||g|| / sqrt(n))

    def columns(self) -> list[float | None]:
        """The 17 metric columns of the details CSV, in its order."""
        return [getattr(self, name) for name in METRIC_FIELDS]


@dataclass(frozen=True)
class Comparison:
    """The verdict on one output, with everything the details CSV and a failing test need to say: ``message``
    for people, ``reason`` (what decided it) and ``ratio`` (its normwise error as a multiple of an honest
    kernel's, where the default standard's verdict states one) for programs (core/reasons.py). ``clause`` and
    ``place`` are parts of the message kept apart, so no reader cuts the message to find them: the words of what
    decided a tensor's verdict (not a rule the default standard overruled), and where its worst element is."""

    status: Status
    message: str
    metrics: Metrics | None
    golden_dtype: str
    target_dtype: str
    shape: tuple[int, ...] | None
    standard: str = ""
    reason: Reason | None = None
    ratio: float | None = None
    clause: str = ""  # "worse than an honest bf16 kernel: error 3x ..."; "" where the message is all of it
    place: str = ""  # " (worst at index (0, 1): target 1.0, golden 1.01)", as the message ends
    recorded: bool = False  # graded on the value the dump recorded (training's kernel), not on a replay of the call

    @classmethod
    def failed(cls, why: str, reason: Reason, status: Status = Status.ERROR) -> Comparison:
        """The verdict on an output that was never compared (no metrics, dtypes or shape): a structure that does
        not match, a call that raised or was skipped. One spelling, so no caller lines up six positional blanks."""
        return cls(status, why, None, "", "", None, reason=reason)
