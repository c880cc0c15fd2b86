"""Where the two runs first part, and for each record whether it parted them or only passed on what it got.

Records are read in execution order (forward in call order, backward as the gradients flowed, which is the
dump's own order). For every matched tensor the deviation of the target from the bench is one number: the
larger of the relative L2 error and the max abs error over the bench's largest magnitude (tensor dumps), or the
statistics' differences over the bench's magnitude (statistics dumps), or 0 / inf for equal / different CRC-32s.
A tensor *agrees* when its deviation is within what rounding in the coarser of the two dtypes explains. Then a
record whose outputs disagree is

- **suspect** when all its inputs agree (the record itself parted the runs),
- **amplified** when its inputs already differ but its outputs differ more than ten times as much,
- **inherited** otherwise; the record that produced the differing input is named when the dump shows it (the
  earlier record whose output has exactly that input's statistics).

A backward record's inputs are its incoming gradients and the inputs of its forward call.

A tolerance cannot see a kernel that loses a few roundings (a bf16 softmax that sums in bf16 reads "agree" against a
bf16 bench), so a tensor dump's records before the tolerance's first divergent record whose outputs deviate within
rounding are kept as *candidates*: precheck.compare.localize grades each side of them against the float64 golden
of its own inputs, and the first where the target is worse than an honest kernel and the bench is not becomes the
first divergent record (rule HONEST_RULE); failing that the tolerance's record stands (rule TOLERANCE_RULE).
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from precheck.compare.entries import Item, Record
from precheck.dump.record_names import call_of

AGREE, SUSPECT, AMPLIFIED, INHERITED, UNMATCHED, UNREADABLE = (
    "agree", "suspect", "amplified", "inherited", "unmatched", "unreadable",
)  # fmt: skip
AMPLIFY = 10.0
# What rounding explains: four unit roundoffs in bf16 and fp16 (an honest op rounds its result once, after inputs
# rounded once more), and in fp32 / fp64 the reordered sums of another device's kernels.
TOLERANCE = {"bfloat16": 2.0**-6, "float16": 2.0**-9, "float32": 2.0**-16, "float64": 2.0**-40}
MAX_PRODUCERS = 200_000  # output fingerprints remembered to name the producer of a differing input
MAX_SUSPECTS = 200
MAX_CANDIDATES = 2_000  # records kept for the honest-kernel rule (precheck.compare.localize replays fewer)
TOLERANCE_RULE, HONEST_RULE = "tolerance", "honest kernel"  # which rule named the first divergent record


def _canonical(dtype: str | None) -> str:
    text = (dtype or "").lower().removeprefix("torch.").removeprefix("mindspore.")
    return {"half": "float16", "float": "float32", "double": "float64"}.get(text, text)


def tolerance(npu: Item, bench: Item) -> float:
    """What rounding explains for this pair: the coarser float dtype's; nothing for integers and values."""
    known = [TOLERANCE[d] for d in (_canonical(npu.dtype), _canonical(bench.dtype)) if d in TOLERANCE]
    return max(known) if known else 0.0


def _fingerprint(item: Item) -> tuple | None:
    if not item.tensor or any(s is None for s in item.stats):
        return None
    return (item.shape, *(str(s) for s in item.stats))


@dataclass
class Finding:
    """One record's verdict, as the summary reports it."""

    name: str
    direction: str
    verdict: str
    inputs_agree: bool
    input_deviation: float
    output_deviation: float
    worst_input: str | None = None
    worst_output: str | None = None
    producer: str | None = None
    rule: str = TOLERANCE_RULE
    honest: str | None = None  # HONEST_RULE: how the target is worse than an honest kernel and the bench is not

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "direction": self.direction,
            "verdict": self.verdict,
            "inputs_agree": self.inputs_agree,
            "input_deviation": _number(self.input_deviation),
            "output_deviation": _number(self.output_deviation),
            "worst_input": self.worst_input,
            "worst_output": self.worst_output,
            "produced_by": self.producer,
            "rule": self.rule,
            "honest_kernel": self.honest,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        """The finding a summary JSON holds (its deviations may be "inf" or "nan")."""

        def number(v: object) -> float:
            try:
                return float(v)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                return math.nan

        return cls(str(d.get("name", "")), str(d.get("direction", "")), str(d.get("verdict", "")),
                   bool(d.get("inputs_agree")), number(d.get("input_deviation")), number(d.get("output_deviation")),
                   d.get("worst_input"), d.get("worst_output"), d.get("produced_by"),
                   str(d.get("rule") or TOLERANCE_RULE), d.get("honest_kernel"))  # fmt: skip

    def why(self) -> str:
        """Why the runs part at this record, in one sentence: the console and the report say the same."""
        if self.rule == HONEST_RULE:
            return (
                f"{self.name}: each side graded against the float64 golden of its own inputs, {self.honest} "
                f"(rule: {HONEST_RULE}; its output deviation {self.output_deviation:.3g} is within what the "
                "tolerance takes for rounding): the API is suspect"
            )
        if self.verdict == SUSPECT:
            return (
                f"{self.name}: its inputs agree (deviation {self.input_deviation:.3g}, within rounding) and its "
                f"outputs do not ({self.output_deviation:.3g}): the API is suspect"
            )
        if self.verdict == AMPLIFIED:
            return (
                f"{self.name}: its inputs already differ ({self.input_deviation:.3g}, {self.worst_input}) and its "
                f"outputs differ {self.output_deviation / max(self.input_deviation, 1e-300):.3g} times more: amplified"
            )
        source = (
            f"produced by {self.producer}"
            if self.producer
            else "which no earlier record of the dump produced (the step's inputs, the parameters, or an op not "
            "recorded at this level)"
        )
        return (
            f"{self.name}: inherited: its input {self.worst_input} already differs ({self.input_deviation:.3g}), "
            f"{source}"
        )


def _number(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


@dataclass
class Divergence:
    """Reads matched records in execution order and keeps what the summary needs, in bounded memory."""

    first: Finding | None = None
    suspects: list[Finding] = field(default_factory=list)
    verdicts: Counter = field(default_factory=Counter)
    candidates: list[Finding] = field(default_factory=list)  # for the honest-kernel rule, in execution order
    candidates_seen: int = 0  # how many there were (at most MAX_CANDIDATES are kept)
    localization: dict[str, Any] = field(default_factory=dict)  # which rule named the first record, at what cost
    _forward_inputs: dict[str, float] = field(default_factory=dict)
    _producers: OrderedDict = field(default_factory=OrderedDict)

    def observe(self, record: Record, deviations: dict[str, tuple[float, float]]) -> Finding:
        """``deviations``: item name -> (deviation, tolerance) for the items matched with the bench."""
        ins = [(i.name, *deviations[i.name]) for i in record.inputs if i.name in deviations]
        outs = [(i.name, *deviations[i.name]) for i in record.outputs if i.name in deviations]
        in_dev, worst_in, in_ok = _worst(ins)
        if record.direction == "backward":
            forward = self._forward_inputs.get(call_of(record.key))
            if forward is not None and forward > in_dev:
                in_dev, worst_in = forward, f"{call_of(record.key)}.forward inputs"
            in_ok = in_ok and (forward is None or forward <= 0.0)
        elif record.direction == "forward":
            self._forward_inputs[call_of(record.key)] = _excess(ins)
        out_dev, worst_out, out_ok = _worst(outs)
        if out_ok:
            verdict = AGREE
        elif record.direction == "parameters_grad":  # made by the module's backward, which is judged itself
            verdict, in_ok, worst_in = INHERITED, False, None
        elif in_ok:
            verdict = SUSPECT
        elif out_dev > AMPLIFY * in_dev:
            verdict = AMPLIFIED
        else:
            verdict = INHERITED
        finding = Finding(record.key, record.direction, verdict, in_ok, in_dev, out_dev, worst_in, worst_out)
        if record.direction == "parameters_grad":
            finding.producer = record.key.replace(".parameters_grad", ".backward")
        elif verdict == INHERITED and worst_in:
            finding.producer = self._producer(record, worst_in)
        self._remember(record, deviations)
        self.verdicts[verdict] += 1
        if verdict == AGREE and out_dev > 0.0 and self.first is None and record.direction in ("forward", "backward"):
            self.candidates_seen += 1
            if len(self.candidates) < MAX_CANDIDATES:
                self.candidates.append(finding)
        if verdict != AGREE and self.first is None:
            self.first = finding
        if verdict in (SUSPECT, AMPLIFIED) and len(self.suspects) < MAX_SUSPECTS:
            self.suspects.append(finding)
        return finding

    def count(self, verdict: str) -> None:
        self.verdicts[verdict] += 1

    def _remember(self, record: Record, deviations: dict) -> None:
        for item in record.outputs:
            dev = deviations.get(item.name)
            mark = _fingerprint(item)
            if mark is not None and dev is not None and dev[0] > dev[1]:
                self._producers[mark] = record.key
                self._producers.move_to_end(mark)
                if len(self._producers) > MAX_PRODUCERS:
                    self._producers.popitem(last=False)

    def _producer(self, record: Record, worst: str) -> str | None:
        item = next((i for i in record.inputs if i.name == worst), None)
        mark = _fingerprint(item) if item else None
        return self._producers.get(mark) if mark else None


def _excess(items: list[tuple[str, float, float]]) -> float:
    """How far the worst item is beyond its tolerance (0 when all agree)."""
    return max((dev for _, dev, tol in items if dev > tol), default=0.0)


def _worst(items: list[tuple[str, float, float]]) -> tuple[float, str | None, bool]:
    """(largest deviation, its item, whether every item agrees)."""
    if not items:
        return 0.0, None, True
    name, dev, _ = max(items, key=lambda x: (x[1], x[0]))
    return dev, name, all(d <= t for _, d, t in items)
