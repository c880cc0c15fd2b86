"""One call's outputs and gradients graded into details rows, with the run's standard and thresholds.

Each side's values come in plain (lists of outputs, gradients by input place), so the grader knows nothing of
how they were produced: a device run, a compiled one, the recorded files. ``honest`` gives the honest kernel's
value of one output or gradient, asked only when the default standard needs it (grader/honest.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from precheck.core.comparison import Comparison
from precheck.core.dtypes import computed_in
from precheck.core.reasons import Reason
from precheck.grader.verdict import grade
from precheck.results import DetailRow, Direction

__all__ = ["RowGrader"]

Honest = Callable[[int, Any], Any]  # (output or input place, the target's value) -> the honest kernel's value


@dataclass(frozen=True)
class RowGrader:
    standard: str
    cosine: float
    max_abs: float
    api_class: str
    keep_tensors: bool = False  # keep the compared values in the rows (generated tests, -save_error_data)
    # the dtype torch.autocast ran the call in (precheck/dump/autocast.py): a wider output, the gradient of an fp32
    # weight, was computed in it and only cast back, so it is held to that dtype's precision and range
    ran_in: torch.dtype | None = None

    def _row(self, api: str, direction: Direction, i: int, target: Any, golden: Any, reference: Any, honest: Any):
        comparison = grade(
            target,
            golden,
            standard=self.standard,
            target_dtype=self._computed_in(target),
            reference=reference,
            cosine=self.cosine,
            max_abs=self.max_abs,
            api_class=self.api_class,
            honest=honest,
        )
        return DetailRow(api, direction, i, comparison, *((target, golden) if self.keep_tensors else ()))

    def _computed_in(self, target: Any) -> torch.dtype | None:
        return computed_in(self.ran_in, target.dtype) if isinstance(target, torch.Tensor) else None

    def outputs(
        self, api: str, targets: list, goldens: list, references: Sequence | None, honest: Honest
    ) -> list[DetailRow]:
        """A row per output; each side's list is consumed (see _release)."""
        if len(targets) != len(goldens):
            why = f"target returned {len(targets)} outputs, golden {len(goldens)}"
            return [DetailRow(api, Direction.FORWARD, 0, Comparison.failed(why, Reason.STRUCTURE_MISMATCH))]
        refs = references if references is not None and len(references) == len(targets) else [None] * len(targets)
        rows = []
        for i, r in enumerate(refs):
            t, g = targets[i], goldens[i]
            if not (t is None and g is None):
                rows.append(self._row(api, Direction.FORWARD, i, t, g, r, lambda i=i, t=t: honest(i, t)))
            del t, g
            self._release(targets, goldens, i)
        return rows

    def grads(
        self, api: str, targets: dict[int, Any] | None, goldens: dict[int, Any] | None, references: dict, honest: Honest
    ) -> list[DetailRow]:
        """A row per input place that has a gradient on either side; one side missing it is an error."""
        if targets is None or goldens is None:
            return []
        rows = []
        for i in sorted(targets):
            t, g = targets[i], goldens.get(i)
            if t is None and g is None:
                continue
            if t is None or g is None:
                why = f"no gradient on the {'target' if t is None else 'golden'} side"
                rows.append(DetailRow(api, Direction.BACKWARD, i, Comparison.failed(why, Reason.STRUCTURE_MISMATCH)))
            else:
                rows.append(
                    self._row(api, Direction.BACKWARD, i, t, g, references.get(i), lambda i=i, t=t: honest(i, t))
                )
            del t, g
            self._release(targets, goldens, i)
        return rows

    def _release(self, targets: Any, goldens: Any, key: int) -> None:
        """Drop each side's value once it is graded (unless the rows keep them): a record's grading then holds one
        output of each side beyond what its run left, not all of them, and a worker's peak follows its largest
        record rather than the sum of a record's outputs and gradients."""
        if not self.keep_tensors:
            targets[key] = None
            if isinstance(goldens, list) or key in goldens:
                goldens[key] = None
