"""Where the two runs first part, and for each record whether it parted them or only passed on what it got.

Records are read in execution order (forward in call order, backward as the gradients flowed, which is the
dump's own order). For every matched tensor the deviation of the target from the bench is one number: the
larger of the relative L2 error and the max abs error over the bench's largest magnitude (tensor dumps), or the
statistics' differences over the bench's magnitude (statistics dumps), or 0 / inf for equal / different CRC-32s.
A tensor *agrees* when its deviation is within what rounding in the coarser of the two dtypes explains: the
dtype each side recorded it in, which is the dtype the call ran in (autocast's bf16, not the bench's fp32).
Across precisions what went through bf16 carries bf16 rounding, in whatever dtype it is held later, so a
record's inputs are held to the coarsest rounding the runs went through up to them, and its outputs to what
their own dtype and the inputs it received explain: an output finer than that rounding (an fp32 residual plus
an autocast bf16 branch, returning fp32) agrees while it deviates at most CARRIED times as much as its inputs
(same-precision runs are unchanged: their outputs are never finer). Then a record whose outputs disagree is

- **suspect** when all its inputs agree (the record itself parted the runs),
- **amplified** when its inputs already differ but its outputs differ more than ten times as much,
- **inherited** otherwise; the record that produced the differing input is named when the dump shows it (the
  earlier record whose output has exactly that input's statistics).

A backward record's inputs are its incoming gradients and the inputs of its forward call. An output holding inf
or nan on one side only is an overflow, and its finding says so. An output whose deviation the target dtype's range
explains (UNDERFLOW: precheck.compare.metrics) parts nothing, and passes its deviation on as an input does.

A tolerance cannot see a kernel that loses a few roundings (a bf16 softmax that sums in bf16 reads "agree" against a
bf16 bench), nor tell a kernel that parts the runs from a sum whose cancellation magnifies the rounding it received
beyond CARRIED (a layer_norm's bias gradient under autocast). So a tensor dump's records whose outputs deviate within
rounding are kept as *candidates*, and the records the tolerance would name as *picks* (its first divergent record,
then each later suspect or amplified one), in execution order: precheck.compare.localize grades each side of them
against the float64 golden of its own inputs. The first candidate where the target is worse than an honest kernel
and the bench is not becomes the first divergent record (rule HONEST_RULE); a pick where neither side is worse than
an honest kernel is explained by rounding and cleared, and the first pick not cleared stands (rule TOLERANCE_RULE).
Only a pick whose outputs were held to CARRIED (finer than the rounding the runs went through) is replayed: in
same-precision runs the tolerance's record stands as it is, and a compare that grades nothing stays torch-free.
Where no record parts the runs, the summary says how far the worst record is, in roundings of the coarsest dtype
the two runs compared. Across precisions (bf16, fp16 or autocast against fp32) no record is first divergent where
none is suspect or amplified and every record that differs inherited a finite deviation that a record within
rounding handed on: the runs agree within what the precision explains, and the summary's ``explained`` names the
largest deviation and where it was carried from."""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from precheck.compare.entries import Item, Record
from precheck.dump.record_names import call_of, is_collective, is_point_to_point

AGREE, SUSPECT, AMPLIFIED, INHERITED, UNMATCHED, UNREADABLE = (
    "agree", "suspect", "amplified", "inherited", "unmatched", "unreadable",
)  # fmt: skip
UNDEFINED = "undefined"  # a record whose tensors neither run defined (precheck.compare.overflow.incomparable)
AMPLIFY = 10.0
# How much more than the deviation its inputs carried a record's outputs may deviate and agree: a well-conditioned op
# passes its inputs' relative deviation on (once) and adds its own rounding
CARRIED = 2.0
# What rounding explains: four unit roundoffs in bf16 and fp16 (an honest op rounds its result once, after inputs
# rounded once more), and in fp32 / fp64 the reordered sums of another device's kernels.
TOLERANCE = {"bfloat16": 2.0**-6, "float16": 2.0**-9, "float32": 2.0**-16, "float64": 2.0**-40}
ROUNDING = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-24, "float64": 2.0**-53}  # unit roundoff
_DTYPE_OF = {tol: dtype for dtype, tol in TOLERANCE.items()}
MAX_PRODUCERS = 200_000  # output fingerprints remembered to name the producer of a differing input
MAX_SUSPECTS = 200
MAX_CANDIDATES = 2_000  # records kept for the honest-kernel rule (precheck.compare.localize replays fewer)
MAX_EXCHANGES = 20_000  # collective, send and receive records kept for the step's verdict (precheck.compare.steps)
UNDERFLOW = "underflow"  # an item whose deviation the target dtype's range explains (precheck.compare.metrics)
TOLERANCE_RULE, HONEST_RULE = "tolerance", "honest kernel"  # which rule named the first divergent record


def canonical(dtype: str | None) -> str:
    """A dtype as TOLERANCE names it, in either framework's spelling (torch.bfloat16, BFloat16, Float32, half)."""
    text = (dtype or "").lower().removeprefix("torch.").removeprefix("mindspore.")
    return {"half": "float16", "float": "float32", "double": "float64"}.get(text, text)


def tolerance(npu: Item, bench: Item) -> float:
    """What rounding explains for this pair: the coarser float dtype's; nothing for integers and values."""
    known = [TOLERANCE[d] for d in (canonical(npu.dtype), canonical(bench.dtype)) if d in TOLERANCE]
    return max(known) if known else 0.0


def fingerprint(item: Item) -> tuple | None:
    """A tensor as its statistics show it (shape, Max, Min, Mean, Norm): the same tensor handed from one record to
    the next, or from one rank to another, has the same; None where the dump says too little."""
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
    overflow: str | None = None  # the side ("target" or "bench") whose worst output alone holds inf or nan
    # In a step of ranks: the peer rank whose divergence reached this record, and the record it came through (this
    # rank's collective, or the peer's send); its verdict is then INHERITED (precheck.compare.steps)
    from_rank: int | None = None
    through: str | None = None
    # A receive whose record msprobe rewrote with a later message: that message (``<send> of rank R``)
    rewritten: str | None = None

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
            "overflow": self.overflow,
            "inherited_from": None if self.from_rank is None else {"rank": self.from_rank, "through": self.through},
            "rewritten_with": self.rewritten,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        """The finding a summary JSON holds (its deviations may be "inf" or "nan")."""

        def number(v: object) -> float:
            try:
                return float(v)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                return math.nan

        peer = d.get("inherited_from") if isinstance(d.get("inherited_from"), dict) else {}
        rank = peer.get("rank") if isinstance(peer.get("rank"), int) else None
        rewritten = d.get("rewritten_with") if isinstance(d.get("rewritten_with"), str) else None
        return cls(str(d.get("name", "")), str(d.get("direction", "")), str(d.get("verdict", "")),
                   bool(d.get("inputs_agree")), number(d.get("input_deviation")), number(d.get("output_deviation")),
                   d.get("worst_input"), d.get("worst_output"), d.get("produced_by"),
                   str(d.get("rule") or TOLERANCE_RULE), d.get("honest_kernel"), d.get("overflow"), rank,
                   None if rank is None else str(peer.get("through")), rewritten)  # fmt: skip

    def why(self) -> str:
        """Why the runs part at this record, in one sentence: the console and the report say the same."""
        if self.from_rank is not None:
            how = (
                f"this call: its inputs agree on this rank and rank {self.from_rank}'s inputs to it already differ"
                if self.through == self.name
                else f"{self.through}: what rank {self.from_rank} handed this rank already differed"
            )
            return f"{self.name}: inherited from rank {self.from_rank} through {how} ({self.output_deviation:.3g})"
        if self.rule == HONEST_RULE:
            return (
                f"{self.name}: each side graded against the float64 golden of its own inputs, {self.honest} "
                f"(rule: {HONEST_RULE}; its output deviation {self.output_deviation:.3g} is within what the "
                "tolerance takes for rounding): the API is suspect"
            )
        if self.overflow and self.verdict in (SUSPECT, AMPLIFIED):
            inputs = "its inputs agree" if self.inputs_agree else f"its inputs already differ ({self.worst_input})"
            return (
                f"{self.name}: {inputs} and its output {self.worst_output} holds inf or nan on the {self.overflow} "
                f"only: an overflow{', the API is suspect' if self.inputs_agree else ''}"
            )
        if self.verdict == SUSPECT:
            return (
                f"{self.name}: its inputs agree (deviation {self.input_deviation:.3g}, within rounding) and its "
                f"outputs do not ({self.output_deviation:.3g}): the API is suspect{self.rewritten_note()}"
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

    def rewritten_note(self) -> str:
        """What the console adds to a receive whose record msprobe rewrote: its outputs are another message's."""
        if not self.rewritten:
            return ""
        return f" (its record holds {self.rewritten}: msprobe rewrote it with a later message)"


def _number(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


@dataclass
class Divergence:
    """Reads matched records in execution order and keeps what the summary needs, in bounded memory."""

    first: Finding | None = None
    suspects: list[Finding] = field(default_factory=list)
    verdicts: Counter = field(default_factory=Counter)
    candidates: list[Finding] = field(default_factory=list)  # candidates and picks, in execution order
    candidates_seen: int = 0  # how many candidates there were (at most MAX_CANDIDATES are kept, and every pick)
    localization: dict[str, Any] = field(default_factory=dict)  # which rule named the first record, at what cost
    clearable: set[str] = field(default_factory=set)  # picks held to CARRIED: localize's replay may clear them
    worst: tuple[float, str] | None = None  # the largest output deviation of a record that agrees, and its record
    coarsest: float = 0.0  # the largest tolerance of a matched item: the coarsest dtype the runs compared
    # A tensor dump's picks held to CARRIED are replayed (precheck.compare.localize) and cleared where rounding
    # explains them; a statistics dump's cannot be. Its statistics do not show the deviation each element carries
    # (a gradient's extremes sit where its incoming gradient's do not: RMSNorm's rsqrt backward, 0.022 from inputs
    # whose statistics read 0.004), so its inputs are taken to carry the rounding the runs went through, and a finer
    # output is held to CARRIED times that, as a tensor dump's to CARRIED times what its inputs carry; an output
    # that sums terms of its largest input (a weight or bias gradient sums the batch) to that times the input's norm
    # over its own: the deviation its terms carry, over what is left of them once they cancel. An output in the
    # coarser dtype is held to that dtype's rounding, as before: a 6-bit bf16 GELU (0.02) is still named.
    replayable: bool = True
    # A step's collective, send and receive records (at most MAX_EXCHANGES, first seen kept), in execution order:
    # record -> (its finding, the names of its items beyond their tolerance), for precheck.compare.steps
    exchanges: dict[str, tuple[Finding, frozenset[str]]] = field(default_factory=dict)
    # Across precisions (the first tensor pair whose float dtypes differ: target's, bench's), where no record is
    # suspect and every record that differs only passed on what a record within rounding handed it, the runs agree
    # within what the precision explains: :meth:`explain` moves the first divergent record out, and ``explained``
    # says so (precision_line)
    across: tuple[str, str] | None = None
    explained: dict[str, Any] | None = None
    carried: Finding | None = None  # the inherited finding with the largest output deviation
    unexplained: bool = False  # an inherited finding no precision explains: inf or nan, or no record produced it
    _forward_inputs: dict[str, tuple[float, float]] = field(default_factory=dict)  # call -> (excess, deviation)
    _producers: OrderedDict = field(default_factory=OrderedDict)

    def observe(
        self, record: Record, deviations: dict[str, tuple[float, float]], overflows: dict[str, str] | None = None
    ) -> Finding:
        """``deviations``: item name -> (deviation, tolerance) for the items matched with the bench;
        ``overflows``: item name -> the side whose item alone holds inf or nan, or UNDERFLOW: the target dtype's
        range explains its deviation (its tolerance says so), and as an output it neither parts the runs nor is
        the worst record that agrees; as an input it carries its deviation on to the outputs finer than it."""
        overflows = overflows or {}
        ins = [(i.name, *deviations[i.name]) for i in record.inputs if i.name in deviations]
        self.coarsest = max([self.coarsest, *(tol for _, _, tol in ins)])
        came = self.coarsest  # the coarsest rounding the runs went through: what reaches this record carries it
        ins = [(name, dev, max(tol, came)) for name, dev, tol in ins]
        in_dev, worst_in, in_ok = _worst(ins)
        carried = in_dev
        if record.direction == "backward":
            excess, forward = self._forward_inputs.get(call_of(record.key), (0.0, 0.0))
            carried = max(carried, forward)
            if excess > in_dev:
                in_dev, worst_in = excess, f"{call_of(record.key)}.forward inputs"
            in_ok = in_ok and excess <= 0.0
        elif record.direction == "forward":
            self._forward_inputs[call_of(record.key)] = (_excess(ins), _worst(ins)[0])
        outs = [(i.name, *deviations[i.name]) for i in record.outputs
                if i.name in deviations and overflows.get(i.name) != UNDERFLOW]  # fmt: skip
        self.coarsest = max([self.coarsest, *(tol for _, _, tol in outs)])
        finer = in_ok and record.direction != "parameters_grad" and any(tol < came for _, _, tol in outs)
        if finer:  # a finer output carries what came in, CARRIED-fold (in a statistics dump, that rounding at least)
            held = {i.name: 0.0 if self.replayable else CARRIED * came * _cancelled(record, i) for i in record.outputs}
            outs = [(n, dev, max(tol, CARRIED * carried, held[n]) if tol < came else tol) for n, dev, tol in outs]
        out_dev, worst_out, out_ok = _worst(outs)
        verdict = _verdict(record.direction, out_ok, in_ok, in_dev, out_dev)
        if record.direction == "parameters_grad":
            in_ok, worst_in = False, None
        finding = Finding(record.key, record.direction, verdict, in_ok, in_dev, out_dev, worst_in, worst_out)
        finding.overflow = overflows.get(worst_out or "")
        if record.direction == "parameters_grad":
            finding.producer = record.key.replace(".parameters_grad", ".backward")
        elif verdict == INHERITED and worst_in:
            finding.producer = self._producer(record, worst_in)
        self._remember(record, deviations)
        self._tally(finding, finer)
        call = call_of(record.key)
        if (is_collective(call) or is_point_to_point(call)) and len(self.exchanges) < MAX_EXCHANGES:
            self.exchanges[record.key] = (finding, frozenset(n for n, (dev, tol) in deviations.items() if dev > tol))
        return finding

    def _tally(self, finding: Finding, finer: bool) -> None:
        """Count the finding and keep what the summary and the honest-kernel rule need of it; ``finer``: its
        outputs were held to what their inputs carried (CARRIED), so a replay may clear it as rounding."""
        verdict = finding.verdict
        self.verdicts[verdict] += 1
        graded = finding.direction in ("forward", "backward") and finding.output_deviation > 0.0
        if verdict == AGREE and graded:
            self.candidates_seen += 1
            if self.candidates_seen <= MAX_CANDIDATES:
                self.candidates.append(finding)
        if verdict == AGREE and graded and (self.worst is None or finding.output_deviation > self.worst[0]):
            self.worst = (finding.output_deviation, finding.name)
        if verdict == INHERITED:
            self._carry(finding)
        picked = verdict != AGREE and self.first is None
        if verdict in (SUSPECT, AMPLIFIED) and len(self.suspects) < MAX_SUSPECTS:
            self.suspects.append(finding)
            picked = True
        if picked:  # a record the tolerance names, unless localize's replay clears it
            self.first = self.first or finding
            self.candidates.append(finding)
            if finer:
                self.clearable.add(finding.name)

    def _carry(self, finding: Finding) -> None:
        """Keep the largest deviation an inherited record carries, and whether precision can explain them all: a
        finite deviation, no overflow, and a record of the dump that handed it on (a parameter's gradient is handed
        by its module's backward)."""
        finite = math.isfinite(finding.input_deviation) and math.isfinite(finding.output_deviation)
        if not finite or finding.overflow or (finding.producer is None and finding.direction != "parameters_grad"):
            self.unexplained = True
        elif self.carried is None or finding.output_deviation > self.carried.output_deviation:
            self.carried = finding

    def explain(self) -> None:
        """Across precisions, runs whose first divergent record only inherited what a record within rounding
        handed it, with no suspect or amplified record and no deviation precision cannot explain, agree within what
        the precision explains: the first divergent record is moved out and ``explained`` names the largest
        deviation and where it was carried from. Called once the honest-kernel rule has settled the suspects."""
        first = self.first
        if self.across is None or first is None or self.suspects or self.unexplained or self.carried is None:
            return
        if first.verdict != INHERITED or first.from_rank is not None or first.producer is None:
            return
        dtype = _DTYPE_OF.get(self.coarsest)
        largest = self.carried
        self.explained = {
            "record": largest.name,
            "deviation": largest.output_deviation,
            "dtype": dtype,
            "roundings": round(largest.output_deviation / ROUNDING[dtype], 3) if dtype else None,
            "first_inherited": first.name,
            "carried_from": first.producer,
            "precisions": list(self.across),
        }
        self.first = None

    def rounding(self) -> dict[str, Any] | None:
        """How far the worst record that agrees is from the bench, in unit roundoffs of the coarsest dtype the
        runs compared (the summary's ``rounding``); None where no record deviates."""
        dtype = _DTYPE_OF.get(self.coarsest)
        if self.worst is None or dtype is None:
            return None
        return {"dtype": dtype, "worst": self.worst[1], "roundings": round(self.worst[0] / ROUNDING[dtype], 3)}

    def count(self, verdict: str) -> None:
        self.verdicts[verdict] += 1

    def _remember(self, record: Record, deviations: dict) -> None:
        for item in record.outputs:
            dev = deviations.get(item.name)
            mark = fingerprint(item)
            if mark is not None and dev is not None and dev[0] > dev[1]:
                self._producers[mark] = record.key
                self._producers.move_to_end(mark)
                if len(self._producers) > MAX_PRODUCERS:
                    self._producers.popitem(last=False)

    def _producer(self, record: Record, worst: str) -> str | None:
        item = next((i for i in record.inputs if i.name == worst), None)
        mark = fingerprint(item) if item else None
        return self._producers.get(mark) if mark else None


def _cancelled(record: Record, item: Item) -> float:
    """How much a sum's cancellation magnifies the relative deviation its terms carry, from the statistics: the
    Norm of its record's largest input over its own, where ``item`` has fewer elements than that input (a bias
    gradient of 8 summing an incoming gradient of 2x5x8); 1 for any other output, or statistics that say nothing."""
    sized = [(math.prod(d), i) for i in record.inputs if (d := i.dims) is not None]
    own = item.dims
    if not sized or own is None or max(sized, key=lambda s: s[0])[0] <= math.prod(own):
        return 1.0
    largest = max(sized, key=lambda s: s[0])[1]
    theirs, mine = _norm(largest), _norm(item)
    return max(1.0, theirs / mine) if theirs is not None and mine else 1.0


def _norm(item: Item) -> float | None:
    try:
        value = float(item.stats[3])
    except (TypeError, ValueError, IndexError):
        return None
    return value if math.isfinite(value) else None


def _verdict(direction: str, out_ok: bool, in_ok: bool, in_dev: float, out_dev: float) -> str:
    if out_ok:
        return AGREE
    if direction == "parameters_grad":  # made by the module's backward, which is judged itself
        return INHERITED
    if in_ok:
        return SUSPECT
    return AMPLIFIED if out_dev > AMPLIFY * in_dev else INHERITED


def agreement(rounding: object, localization: object = None) -> str:
    """The one line of a compare where no record parts the runs, from the summary's ``rounding`` and, where the
    honest-kernel replay cleared records the tolerance would name, its ``localization`` (a summary JSON read back
    may hold anything there)."""
    beyond = _cleared(localization)
    if not isinstance(rounding, dict) or not isinstance(rounding.get("roundings"), (int, float)):
        return f"the two runs agree everywhere{beyond}"
    dtype = SHORT.get(str(rounding.get("dtype")))
    return (
        f"no record diverges beyond {dtype or 'its'} rounding (worst: {rounding.get('worst')} at "
        f"{rounding['roundings']:.3g} roundings){beyond}"
    )


SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}


def precision_line(explained: object, localization: object = None) -> str | None:
    """The one line of a compare across precisions whose runs agree within what the precision explains
    (Divergence.explain), from the summary's ``explained`` (a summary JSON read back may hold anything there);
    None where it says nothing."""
    if not isinstance(explained, dict) or not isinstance(explained.get("deviation"), (int, float)):
        return None
    sides = explained.get("precisions")
    t, b = (SHORT.get(str(p), str(p)) for p in sides) if isinstance(sides, list) and len(sides) == 2 else ("?", "?")
    dtype = SHORT.get(str(explained.get("dtype")), "its")
    roundings = explained.get("roundings")
    count = f" ({roundings:.3g} {dtype} roundings)" if isinstance(roundings, (int, float)) else ""
    return (
        f"the runs agree within what the precision explains ({t} against {b}): no record is suspect, and the largest "
        f"deviation, {explained['deviation']:.3g}{count} at {explained.get('record')}, was carried from "
        f"{explained.get('carried_from')}, whose own output is within {dtype} rounding: explained by the precision"
        f"{_cleared(localization)}"
    )


def _cleared(localization: object) -> str:
    """Where the honest-kernel replay cleared records the tolerance would name: how many, and the first three."""
    cleared = localization.get("cleared") if isinstance(localization, dict) else None
    names = [str(c.get("record")) for c in cleared if isinstance(c, dict)] if isinstance(cleared, list) else []
    if not names:
        return ""
    return (
        f"; {len(names)} beyond the tolerance cleared by replay, no worse than an honest kernel on either side: "
        f"{', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
    )


def _excess(items: list[tuple[str, float, float]]) -> float:
    """How far the worst item is beyond its tolerance (0 when all agree)."""
    return max((dev for _, dev, tol in items if dev > tol), default=0.0)


def _worst(items: list[tuple[str, float, float]]) -> tuple[float, str | None, bool]:
    """(largest deviation, its item, whether every item agrees)."""
    if not items:
        return 0.0, None, True
    name, dev, _ = max(items, key=lambda x: (x[1], x[0]))
    return dev, name, all(d <= t for _, d, t in items)
