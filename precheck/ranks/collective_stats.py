"""A statistics dump's collectives checked on what their recorded statistics still say.

Without the tensors there is no golden to grade a collective's output against, but a collective is linear in
its inputs, or copies them, so some of the output's statistics follow from the inputs' across the group's ranks:
an all_reduce(SUM)'s output Mean is the sum of its inputs' Means, its Max at most the sum of their Maxes; a MAX's
Max is the largest of the inputs' Maxes; a broadcast's output has its src's statistics; each tensor of an
all_gather's list has its rank's; the mean of a reduce-scatter's output Means over the group is the reduction of
its inputs' Means. Each such identity is checked within a tolerance from the dtype: the rounding
of the reduction (a ring of n ranks rounds each element up to n times, by at most eps of its magnitude each time),
bounded by the tensors' root mean square (Norm over the square root of the size). An identity broken beyond that
is an error, proven from the statistics alone; each row says what was checked.

A recorded output statistic that is inf or nan where the inputs' finite statistics bound every element (and the
statistic's own arithmetic) inside the dtype's range is an error too (``non_finite_statistics``, which the
point-to-point check uses as well): an identity cannot be checked on a non-finite value, so without this rule an
output of inf passed on whichever statistic stayed finite, and an all-NaN output was SKIP.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from precheck.core.comparison import Comparison
from precheck.core.reasons import Reason
from precheck.core.status import ERROR, PASS
from precheck.dump.decode import TensorSpec, decode_value
from precheck.ranks.cannot_grade import CannotGrade
from precheck.ranks.collective_records import PLACES, recorded_input, recorded_output, reduce_op
from precheck.results import DetailRow, Direction

__all__ = ["implied_bound", "non_finite_statistics", "statistics_rows"]

_STATS = ("Max", "Min", "Mean", "Norm")


@dataclass(frozen=True)
class _Group:
    """One collective's records on the members of its group, read as statistics."""

    name: str
    api: str
    members: list[int]
    records: dict[int, dict]

    def spec(self, r: int, arg: str, done: bool = False) -> Any:
        """Argument ``arg`` of rank ``r`` as given (``done``: once the call had run), decoded."""
        raw = (recorded_output if done else recorded_input)(self.records[r], *PLACES[self.api][arg])
        if raw is None:
            raise CannotGrade(f"rank {r}: the record holds no {'output' if done else 'input'} {arg}")
        return decode_value(raw, f"rank {r}: {arg}")


@dataclass(frozen=True)
class _Fact:
    """One identity: the recorded statistic, what the inputs' statistics make it, and how it must compare."""

    what: str  # "Mean = sum of the inputs' Means"
    recorded: float | None
    expected: float | None
    relation: str = "="  # "=", "<=" (recorded at most expected) or ">="


@dataclass(frozen=True)
class _Output:
    """One output tensor of a collective as its statistics check it: the identities it must hold, the tensors the
    tolerance is sized on, and the tensors its elements come from (``sources``) and how (``how``: each element
    one of theirs or a mean, max or min of theirs, "copy"; a sum of theirs, "sum"; a product, "product")."""

    target: TensorSpec
    facts: list[_Fact]
    inputs: list[TensorSpec]
    sources: list[TensorSpec] = field(default_factory=list)
    how: str = "copy"


def statistics_rows(name: str, r: int, members: list[int], records: dict[int, dict]) -> list[DetailRow]:
    """Rank ``r``'s rows of the collective ``name`` from its group's statistics; CannotGrade where they hold no
    identity precheck checks."""
    api = name.split(".")[1]
    if api not in _CHECKS:
        raise CannotGrade(f"{api}'s statistics hold no identity precheck checks")
    group = _Group(name, api, members, records)
    rows = []
    for i, output in enumerate(_CHECKS[api](group, r)):
        where = f"rank {r}: {name} output {i}"
        rows.append(DetailRow(name, Direction.FORWARD, i, _compared(output, where, len(members))))
    return rows


_GROWTH: dict[str, Callable[[list[float]], float]] = {"copy": max, "sum": math.fsum, "product": math.prod}


def implied_bound(sources: Sequence[TensorSpec], how: str = "copy") -> float | None:
    """The largest magnitude an element of a tensor made of ``sources`` can have (``how``: "copy" where each
    element is one of theirs, or their mean, max or min; "sum"; "product"), from their recorded Max and Min; None
    where a source's statistics are missing or not finite (then they bound nothing). An empty source adds nothing."""
    magnitudes = []
    for source in sources:
        if source.numel == 0:
            continue
        top, bottom = source.stats.max, source.stats.min
        if top is None or bottom is None or not (math.isfinite(top) and math.isfinite(bottom)):
            return None
        magnitudes.append(max(abs(top), abs(bottom)))
    bound = _GROWTH[how](magnitudes) if magnitudes else 0.0
    return bound if math.isfinite(bound) else None


def _finite_implied(target: TensorSpec, bound: float) -> dict[str, bool]:
    """Which of ``target``'s statistics are finite for sure when no element exceeds ``bound``: Max and Min when the
    bound is inside the dtype's range, Mean when the sum it is computed from also is (in float32, float64 for a
    float64 tensor, as torch accumulates), Norm when its sum of squares and its value are."""
    dtype = target.dtype
    if not (dtype.is_floating_point or dtype.is_complex):
        return dict.fromkeys(_STATS, True)  # an integer or bool tensor's statistics are never inf or nan
    top = torch.finfo(dtype).max
    acc = torch.finfo(torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32).max
    n = target.numel
    inside = bound <= top
    sums = inside and bound * n <= acc
    squares = inside and bound * math.sqrt(n) <= top and bound * bound * n <= acc
    return {"Max": inside, "Min": inside, "Mean": sums, "Norm": squares}


def non_finite_statistics(
    target: TensorSpec, sources: Sequence[TensorSpec], where: str, how: str = "copy"
) -> list[str]:
    """One message per recorded statistic of ``target`` that is inf, -inf or nan where the finite statistics of
    the tensors it is made of (``sources``, combined as ``how`` says: see ``implied_bound``) make it finite. Each
    is an error: no identity can be checked on a non-finite value, so a collective's (or a receive's) output of
    inf would otherwise pass on whichever statistic stayed finite. ``where`` names the record and the rank
    ("rank 1: Distributed.all_reduce.0 output 0"). Empty where the sources bound nothing (an input of inf, an fp16
    sum that may overflow)."""
    bound = implied_bound(sources, how)
    if bound is None:
        return []
    finite = _finite_implied(target, bound)
    found = []
    for stat in _STATS:
        value = _stat(target, stat)
        if value is not None and not math.isfinite(value) and finite[stat]:
            found.append(f"{where}: {stat} is {value} where its inputs' finite statistics make it finite "
                         f"(every element within {bound:.6g})")  # fmt: skip
    return found


def _compared(output: _Output, where: str, ranks: int) -> Comparison:
    target = output.target
    tolerance = _tolerance(target, output.inputs, ranks)
    checked, broken = [], non_finite_statistics(target, output.sources, where, output.how)
    for fact in output.facts:
        if not all(isinstance(v, float) and math.isfinite(v) for v in (fact.recorded, fact.expected)):
            continue
        off = fact.recorded - fact.expected  # type: ignore[operator]
        ok = {"=": abs(off) <= tolerance, "<=": off <= tolerance, ">=": off >= -tolerance}[fact.relation]
        (checked if ok else broken).append(f"{fact.what} ({fact.recorded:.6g} vs {fact.expected:.6g})")
    if not checked and not broken:
        raise CannotGrade("its statistics are not finite: nothing of them can be checked" if output.facts else
                          "its output's statistics follow from no identity precheck checks")  # fmt: skip
    head = f"statistics dump: checked within {tolerance:.3g} (the dtype's rounding over {ranks} ranks)"
    message = f"{head}: broken: {'; '.join(broken)}" if broken else f"{head}: {'; '.join(checked)}"
    return Comparison(
        ERROR if broken else PASS,
        message,
        None,
        golden_dtype="",
        target_dtype=str(target.dtype),
        shape=target.shape,
        standard="statistics",
        reason=Reason.STATISTICS,
    )


def _rms(spec: TensorSpec) -> float:
    norm = spec.stats.norm
    return norm / math.sqrt(spec.numel) if norm is not None and math.isfinite(norm) and spec.numel else 0.0


def _tolerance(target: TensorSpec, inputs: list[TensorSpec], ranks: int) -> float:
    """How far a correct collective's statistic may sit from the identity: each element rounded up to ``ranks``
    times in the target's dtype (and each statistic computed in float32), bounded by the tensors' RMS."""
    dtype = target.dtype
    eps = max(torch.finfo(dtype).eps, torch.finfo(torch.float32).eps) if dtype.is_floating_point else 0.0
    return (ranks + 1) * eps * (sum(_rms(s) for s in inputs) + _rms(target))


def _stat(spec: TensorSpec, stat: str) -> float | None:
    return getattr(spec.stats, stat.lower())


def _same(source: TensorSpec, target: TensorSpec, whose: str) -> list[_Fact]:
    """A copied tensor's statistics are its source's."""
    return [_Fact(f"{s} = {whose}'s", _stat(target, s), _stat(source, s)) for s in _STATS]


def _tensor(value: Any, where: str) -> TensorSpec:
    if not isinstance(value, TensorSpec):
        raise CannotGrade(f"{where} is not a tensor")
    return value


def _reduced(g: _Group, r: int) -> list[_Output]:
    """all_reduce (and reduce on its dst): the output's statistics against the inputs' by the reduce op."""
    target = _tensor(g.spec(r, "tensor", done=True), f"rank {r}: output")
    inputs = [_tensor(g.spec(m, "tensor"), f"rank {m}: input") for m in g.members]
    op = reduce_op(recorded_input(g.records[r], *PLACES[g.api]["op"]))
    n = len(inputs)
    ins = {s: [_stat(i, s) for i in inputs] for s in _STATS}
    if any(v is None for s in ("Max", "Min", "Mean") for v in ins[s]):
        raise CannotGrade("an input's statistics are missing")
    facts = {
        "SUM": [_Fact("Mean = sum of the inputs' Means", _stat(target, "Mean"), math.fsum(ins["Mean"])),
                _Fact("Max <= sum of the inputs' Maxes", _stat(target, "Max"), math.fsum(ins["Max"]), "<="),
                _Fact("Min >= sum of the inputs' Mins", _stat(target, "Min"), math.fsum(ins["Min"]), ">=")],
        "AVG": [_Fact("Mean = mean of the inputs' Means", _stat(target, "Mean"), math.fsum(ins["Mean"]) / n),
                _Fact("Max <= mean of the inputs' Maxes", _stat(target, "Max"), math.fsum(ins["Max"]) / n, "<="),
                _Fact("Min >= mean of the inputs' Mins", _stat(target, "Min"), math.fsum(ins["Min"]) / n, ">=")],
        "MAX": [_Fact("Max = largest of the inputs' Maxes", _stat(target, "Max"), max(ins["Max"])),
                _Fact("Min >= largest of the inputs' Mins", _stat(target, "Min"), max(ins["Min"]), ">=")],
        "MIN": [_Fact("Min = smallest of the inputs' Mins", _stat(target, "Min"), min(ins["Min"])),
                _Fact("Max <= smallest of the inputs' Maxes", _stat(target, "Max"), min(ins["Max"]), "<=")],
        "PRODUCT": [],  # no identity, but finite inputs bound the product: its non-finite statistics are checked
    }.get(op)  # fmt: skip
    if facts is None:
        raise CannotGrade(f"reduce op {op}: its output's statistics follow from no input statistic")
    return [_Output(target, facts, inputs, inputs, {"SUM": "sum", "PRODUCT": "product"}.get(op, "copy"))]


def _reduce(g: _Group, r: int) -> list[_Output]:
    dst = recorded_input(g.records[r], *PLACES["reduce"]["dst"])
    if (dst.get("value") if isinstance(dst, dict) else dst) != r:
        raise CannotGrade(f"rank {r} is not the reduce's dst: its tensor holds no defined result",
                           Reason.SKIP_RECORDED_OUTPUT)  # fmt: skip
    return _reduced(g, r)


def _broadcast(g: _Group, r: int) -> list[_Output]:
    src = recorded_input(g.records[r], *PLACES["broadcast"]["src"])
    src = src.get("value") if isinstance(src, dict) else src
    if src not in g.records:
        raise CannotGrade(f"broadcast src rank {src!r} is not in the group {g.members}")
    source = _tensor(g.spec(src, "tensor"), f"rank {src}: input")
    target = _tensor(g.spec(r, "tensor", done=True), f"rank {r}: output")
    return [_Output(target, _same(source, target, f"src rank {src}'s input"), [source], [source])]


def _all_gather(g: _Group, r: int) -> list[_Output]:
    targets = g.spec(r, "tensor_list", done=True)
    if not isinstance(targets, tuple) or len(targets) != len(g.members):
        raise CannotGrade(f"rank {r}: its all_gather list is not one tensor per rank of its group",
                           Reason.SKIP_BAD_RECORD)  # fmt: skip
    out = []
    for m, target in zip(g.members, targets, strict=True):
        source = _tensor(g.spec(m, "tensor"), f"rank {m}: input")
        target = _tensor(target, f"rank {r}: output")
        out.append(_Output(target, _same(source, target, f"rank {m}'s input"), [source], [source]))
    return out


def _all_gather_into(g: _Group, r: int) -> list[_Output]:
    target = _tensor(g.spec(r, "output", done=True), f"rank {r}: output")
    inputs = [_tensor(g.spec(m, "input"), f"rank {m}: input") for m in g.members]
    ins = {s: [_stat(i, s) for i in inputs] for s in _STATS}
    if any(v is None for values in ins.values() for v in values):
        raise CannotGrade("an input's statistics are missing")
    facts = [
        _Fact("Max = largest of the inputs' Maxes", _stat(target, "Max"), max(ins["Max"])),
        _Fact("Min = smallest of the inputs' Mins", _stat(target, "Min"), min(ins["Min"])),
        _Fact("Mean = mean of the inputs' Means", _stat(target, "Mean"), math.fsum(ins["Mean"]) / len(inputs)),
        _Fact(
            "Norm = root of the sum of the inputs' squared Norms",
            _stat(target, "Norm"),
            math.sqrt(math.fsum(v * v for v in ins["Norm"])),
        ),  # fmt: skip
    ]
    return [_Output(target, facts, inputs, inputs)]


def _reduce_scattered(g: _Group, r: int) -> list[_Output]:
    """A reduce-scatter's output is one chunk of the reduction: its Max and Min are bounded as an all_reduce's, and
    the mean of the group's output Means is the reduction of the inputs' Means (every chunk of every input is in
    exactly one output: the group's outputs together, so a broken one is on every rank's row)."""
    target = _tensor(g.spec(r, "output", done=True), f"rank {r}: output")
    outputs = [_tensor(g.spec(m, "output", done=True), f"rank {m}: output") for m in g.members]
    inputs = [_tensor(g.spec(m, "input"), f"rank {m}: input") for m in g.members]
    op, n = reduce_op(recorded_input(g.records[r], *PLACES[g.api]["op"])), len(inputs)
    ins = {s: [_stat(i, s) for i in inputs] for s in ("Max", "Min", "Mean")}
    means = [_stat(o, "Mean") for o in outputs]
    if op not in ("SUM", "AVG") or any(v is None for values in [*ins.values(), means] for v in values):
        raise CannotGrade(f"reduce op {op} or missing statistics: nothing of them follows from the inputs'")
    scale, word = (1.0, "sum") if op == "SUM" else (1.0 / n, "mean")
    facts = [
        _Fact(f"the group's outputs' mean Mean = {word} of the inputs' Means", math.fsum(means) / n,
              math.fsum(ins["Mean"]) * scale),
        _Fact(f"Max <= {word} of the inputs' Maxes", _stat(target, "Max"), math.fsum(ins["Max"]) * scale, "<="),
        _Fact(f"Min >= {word} of the inputs' Mins", _stat(target, "Min"), math.fsum(ins["Min"]) * scale, ">="),
    ]  # fmt: skip
    return [_Output(target, facts, [*inputs, *outputs], inputs, "sum" if op == "SUM" else "copy")]


# API -> rank -> each output's recorded spec, the identities its statistics must hold, the inputs they come from
_CHECKS: dict[str, Callable[[_Group, int], list[_Output]]] = {
    "all_reduce": _reduced,
    "reduce": _reduce,
    "broadcast": _broadcast,
    "all_gather": _all_gather,
    **dict.fromkeys(("all_gather_into_tensor", "_all_gather_base", "all_gather_single"), _all_gather_into),
    **dict.fromkeys(("reduce_scatter_tensor", "_reduce_scatter_base", "reduce_scatter_single"), _reduce_scattered),
}
