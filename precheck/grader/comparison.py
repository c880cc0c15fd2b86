"""The verdict on one output as a value: what the details CSV, a failing test and a report need to say.

Torch-free on purpose: the result model (precheck/results.py) holds these, and the commands that only read or
compare results never load torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from precheck.grader.metrics import Metrics
    from precheck.grader.status import Status


@dataclass(frozen=True)
class Comparison:
    """The verdict on one output, with everything the details CSV and a failing test need to say."""

    status: Status
    message: str
    metrics: Metrics | None
    golden_dtype: str
    target_dtype: str
    shape: tuple[int, ...] | None
    standard: str = ""
