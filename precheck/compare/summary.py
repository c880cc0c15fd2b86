"""What one compare found, as a value: the summary that ``compare_dumps`` fills as it goes and writes as
``compare_summary_{ts}.json``. Its own module so that localize and suspects, which compare_dumps calls, read and
fill it without importing compare_dumps back.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from precheck.compare.divergence import Divergence
from precheck.compare.modes import CompareMode

MAX_NOT_COMPARABLE = 200  # records named in the summary whose values neither run defined (all are counted)

if TYPE_CHECKING:
    import pandas


@dataclass
class DumpComparison:
    """What one compare found; :meth:`as_dict` is compare_summary_{ts}.json."""

    target: str
    bench: str
    mode: CompareMode
    csv_path: Path
    summary_path: Path
    records_path: Path
    rows: int = 0
    results: Counter = field(default_factory=Counter)
    divergence: Divergence = field(default_factory=Divergence)
    unmatched: list[dict[str, Any]] = field(default_factory=list)
    first_overflow: str | None = None
    wall_seconds: float = 0.0
    prechecked: dict[str, dict[str, str]] = field(default_factory=dict)  # record -> its run_ut verdict
    precheck_csv: Path | None = None  # run_ut's result CSV of the suspects
    stack_problem: str | None = None  # why the target's stack.json was not used (precheck.compare.stacks)
    records_total: int = 0  # the aligned records to compare
    complete: bool = False  # every record compared: until then the summary says how far it got
    undefined: list[str] = field(default_factory=list)  # records not comparable: neither run defined their tensors
    step: dict[str, Any] | None = None  # a rank's compare in a step of ranks: the step's verdict (compare.steps)

    def not_comparable(self, record: str) -> None:
        """A record whose tensors neither run defined: counted as UNDEFINED, never named, listed (bounded)."""
        if len(self.undefined) < MAX_NOT_COMPARABLE:
            self.undefined.append(record)

    def frame(self) -> pandas.DataFrame:
        """The compare's rows as data, with each record's verdict: precheck.load of its CSV."""
        from precheck.frames import load

        return load(self.csv_path)

    def as_dict(self) -> dict[str, Any]:
        d = self.divergence
        return {
            "target": self.target,
            "bench": self.bench,
            "mode": self.mode.name,
            "compare_csv": str(self.csv_path),
            "records_csv": str(self.records_path),
            "rows": self.rows,
            "complete": self.complete,
            "records_total": self.records_total,
            "results": dict(self.results),
            "records": dict(d.verdicts),
            "first_divergent": d.first.as_dict() | self._verdict(d.first.name) if d.first else None,
            "rounding": None if d.first else d.rounding(),
            "explained": d.explained,  # across precisions: the runs agree within what it explains (divergence)
            "suspects": [f.as_dict() | self._verdict(f.name) for f in d.suspects],
            "localization": d.localization,
            "unmatched": self.unmatched,
            "first_overflow": self.first_overflow,
            "not_comparable": self.undefined,
            "precheck_csv": str(self.precheck_csv) if self.precheck_csv else None,
            "seconds": round(self.wall_seconds, 3),
            "step": self.step,
        }

    def _verdict(self, name: str) -> dict[str, Any]:
        return {"precheck": self.prechecked[name]} if name in self.prechecked else {}
