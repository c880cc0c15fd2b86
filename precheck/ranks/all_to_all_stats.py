"""A statistics dump's all-to-alls (MoE's dispatch and combine) checked on what their statistics still say.

An all-to-all computes nothing: it moves rows. With the list form each output tensor is a copy of one sender's
tensor, so it has that tensor's statistics. With ``all_to_all_single`` a rank's output is the rows its senders cut
for it (precheck.ranks.all_to_all_splits reads which, from the split sizes every member recorded), and a chunk's
statistics are not recorded, only its sender's whole input's. What they still prove:

- each element of the output is one of its senders' (only those that send it rows): its Max is at most the
  largest of their Maxes, its Min at least the smallest of their Mins;
- k elements of a sender's N sum to between k times its Min and k times its Max, and to its sum less what its other
  N - k elements can hold: the output's Mean lies within the bounds its chunks give (exact where a sender sends
  all or none of its rows), its sum of squares (Norm squared) alike;
- every row of every input is in exactly one output: the group's outputs hold the sum and the sum of squares of its
  inputs. Broken, the identity is on the row of each rank whose output alone could break it (its sum, less the
  group's excess, within its own bounds), so a bug on one rank is named there; where none could, on every row.

Each is compared per element (Mean, RMS = Norm over the root of the size) within the rounding of the statistics
themselves: the data is copied, not rounded, but a Mean or Norm is computed in the dtype over its N elements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from precheck.core.older_python import zip_strict
from precheck.core.reasons import Reason
from precheck.dump.cannot_grade import CannotGrade
from precheck.dump.decode import TensorSpec
from precheck.ranks.all_to_all_splits import Chunk, incoming
from precheck.ranks.stat_facts import Fact, Group, Output, same, stat, tensor, within

__all__ = ["all_to_all", "all_to_all_single"]

_Bounds = tuple[float, float]


@dataclass(frozen=True)
class _Flow:
    """One rank's all_to_all_single output: its recorded spec, the chunks it is made of, and the bounds its senders'
    statistics put on its sum and its sum of squares (None: a statistic they need is not recorded)."""

    target: TensorSpec
    chunks: list[Chunk]
    sums: _Bounds | None
    squares: _Bounds | None


def all_to_all(g: Group, r: int) -> list[Output]:
    """all_to_all with lists: rank ``r``'s j-th tensor is a copy of member j's input tensor for ``r`` (its size
    checked too, so an empty tensor is graded on it)."""
    targets, i = g.spec(r, "output", done=True), g.members.index(r)
    _one_per_rank(targets, g, r, "output")
    out = []
    for m, target in zip_strict(g.members, targets):
        sent = g.spec(m, "input")
        _one_per_rank(sent, g, m, "input")
        source, target = tensor(sent[i], f"rank {m}: input {i}"), tensor(target, f"rank {r}: output")
        size = Fact(f"elements = rank {m}'s input {i}'s", float(target.numel), float(source.numel))
        out.append(Output(target, [size, *same(source, target, f"rank {m}'s input {i}")], [source], [source]))
    return out


def _one_per_rank(value: object, g: Group, r: int, arg: str) -> None:
    if not isinstance(value, tuple) or len(value) != len(g.members):
        raise CannotGrade(f"rank {r}: its all_to_all {arg} is not one tensor per rank of its group",
                          Reason.SKIP_BAD_RECORD)  # fmt: skip


def all_to_all_single(g: Group, r: int) -> list[Output]:
    """Rank ``r``'s output against the rows its senders cut for it, and the group's outputs against its inputs."""
    flows = _flows(g)
    flow = flows[r]
    if isinstance(flow, CannotGrade):
        raise flow
    target, n = flow.target, flow.target.numel
    senders = [_input(g, k.sender) for k in flow.chunks if k.rows]
    facts = [Fact("elements = the rows its senders cut for it", float(n), float(sum(k.numel for k in flow.chunks)))]
    if senders and all(stat(s, "Max") is not None and stat(s, "Min") is not None for s in senders):
        facts += [
            Fact("Max <= the largest Max of its senders", stat(target, "Max"), max(stat(s, "Max") for s in senders),
                 "<="),
            Fact("Min >= the smallest Min of its senders", stat(target, "Min"), min(stat(s, "Min") for s in senders),
                 ">="),
        ]  # fmt: skip
    if n and flow.sums is not None:
        facts += _within("Mean", stat(target, "Mean"), flow.sums, n, "its senders' rows allow")
    if n and flow.squares is not None:
        norm = stat(target, "Norm")
        facts += _within("RMS", None if norm is None else norm / math.sqrt(n), flow.squares, n,
                         "its senders' rows allow", root=True)  # fmt: skip
    inputs = [_input(g, m) for m in g.members] + [f.target for f in flows.values() if isinstance(f, _Flow)]
    largest = max([1, *(s.numel for s in inputs)])
    rounds = 2 + math.ceil(math.log2(largest))
    facts += _group_facts(g, r, flows, within(target, inputs, rounds))
    return [Output(target, facts, inputs, senders, rounds=rounds,
                   rounding=f"a Mean's or Norm's rounding over up to {largest} elements")]  # fmt: skip


def _within(what: str, recorded: float | None, bounds: _Bounds, n: int, how: str, root: bool = False) -> list[Fact]:
    """The per-element statistic ``recorded`` within a sum's ``bounds`` over ``n`` elements (``root``: of squares)."""
    lo, hi = (math.sqrt(max(b, 0.0) / n) if root else b / n for b in bounds)
    return [Fact(f"{what} >= the least {how}", recorded, lo, ">="),
            Fact(f"{what} <= the most {how}", recorded, hi, "<=")]  # fmt: skip


def _input(g: Group, m: int) -> TensorSpec:
    return tensor(g.spec(m, "input"), f"rank {m}: input")


def _flows(g: Group) -> dict[int, _Flow | CannotGrade]:
    """Every member's output and the bounds on it (or why they cannot be had), read once for all ranks' rows."""
    if "flows" not in g.shared:
        flows: dict[int, _Flow | CannotGrade] = {}
        for x in g.members:
            try:
                chunks = incoming(g.members, g.records, x)
                target = tensor(g.spec(x, "output", done=True), f"rank {x}: output")
                bounds = [_chunk_bounds(_input(g, k.sender), k.numel) for k in chunks]
                flows[x] = _Flow(target, chunks, _total([b[0] for b in bounds]), _total([b[1] for b in bounds]))
            except CannotGrade as e:
                flows[x] = e
        g.shared["flows"] = flows
    return g.shared["flows"]


def _total(parts: list[_Bounds | None]) -> _Bounds | None:
    """The bounds of a sum of parts each within its own bounds; None where one is unknown."""
    if any(b is None for b in parts):
        return None
    return math.fsum(b[0] for b in parts if b), math.fsum(b[1] for b in parts if b)


def _chunk_bounds(source: TensorSpec, k: int) -> tuple[_Bounds | None, _Bounds | None]:
    """What k of ``source``'s N elements can sum to, and their squares: between k of its smallest and k of its
    largest, and its whole sum less what the other N - k can hold. Exact for k = 0 and k = N."""
    n = source.numel
    if k == 0:
        return (0.0, 0.0), (0.0, 0.0)
    top, bottom, mean, norm = (stat(source, s) for s in ("Max", "Min", "Mean", "Norm"))
    if not all(v is not None and math.isfinite(v) for v in (top, bottom)):
        return None, None
    rest = n - k
    sums = None
    if mean is not None and math.isfinite(mean):
        whole = mean * n
        sums = (max(k * bottom, whole - rest * top), min(k * top, whole - rest * bottom))
    squares = None
    if norm is not None and math.isfinite(norm):
        big = max(top * top, bottom * bottom)
        small = 0.0 if bottom <= 0.0 <= top else min(top * top, bottom * bottom)
        whole = norm * norm
        squares = (max(k * small, whole - rest * big), min(k * big, whole - rest * small))
    return sums, squares


def _group_facts(g: Group, r: int, flows: dict[int, _Flow | CannotGrade], tolerance: float) -> list[Fact]:
    """The group's outputs hold its inputs' sum and sum of squares (compared per element: mean and RMS, within
    ``tolerance``): on every rank's row where that holds; where it is broken, on the rows of the ranks whose output
    alone could break it (its own sum, less the group's excess, within its bounds), on every row where none could."""
    found = {m: f for m, f in flows.items() if isinstance(f, _Flow)}
    inputs = [_input(g, m) for m in g.members]
    total = sum(s.numel for s in inputs)
    if len(found) < len(flows) or not total or total != sum(f.target.numel for f in found.values()):
        return []  # a member's record is bad (its own row says so): the group's totals are not known
    facts = []
    for what, of, bounds in (("mean", _sum, lambda f: f.sums), ("RMS", _squares, lambda f: f.squares)):
        outs = {m: of(f.target) for m, f in found.items()}
        ins = [of(s) for s in inputs]
        if any(v is None for v in [*outs.values(), *ins]):
            continue
        recorded, expected = math.fsum(outs.values()), math.fsum(ins)  # type: ignore[arg-type]
        if what == "mean":
            recorded, expected, slack = recorded / total, expected / total, tolerance * total
        else:
            recorded, expected = math.sqrt(recorded / total), math.sqrt(expected / total)
            slack = (2 * tolerance * expected + tolerance * tolerance) * total  # d(sum of squares) at this RMS
        said = f"the group's outputs' {what} = its inputs' {what}"
        if abs(recorded - expected) > tolerance:
            excess = math.fsum(outs.values()) - math.fsum(ins)  # type: ignore[arg-type]
            suspects = [m for m, f in found.items() if _could(outs[m] - excess, bounds(f), slack)]  # type: ignore[operator]
            if suspects and r not in suspects:
                continue  # another rank's output breaks it: its row says so
            said += _whose(suspects or list(found))
        facts.append(Fact(said, recorded, expected))
    return facts


def _whose(suspects: list[int]) -> str:
    """Which ranks' outputs could break a group identity, as the Message says it."""
    if len(suspects) == 1:
        return f" (only rank {suspects[0]}'s output can be off by the difference and still hold its own bounds)"
    return (f" (the output of any of ranks {', '.join(map(str, suspects))} could be off by the difference: "
            "the statistics do not tell which)")  # fmt: skip


def _could(value: float, bounds: _Bounds | None, slack: float) -> bool:
    """Whether a sum of ``value`` lies within ``bounds``, loosened by ``slack``."""
    return bounds is None or bounds[0] - slack <= value <= bounds[1] + slack


def _sum(spec: TensorSpec) -> float | None:
    """The sum of a tensor's elements (Mean times size; 0 for an empty one)."""
    mean = stat(spec, "Mean")
    return 0.0 if spec.numel == 0 else None if mean is None or not math.isfinite(mean) else mean * spec.numel


def _squares(spec: TensorSpec) -> float | None:
    """The sum of a tensor's squared elements (Norm squared; 0 for an empty one)."""
    norm = stat(spec, "Norm")
    return 0.0 if spec.numel == 0 else None if norm is None or not math.isfinite(norm) else norm * norm
