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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from precheck.core.comparison import Comparison
from precheck.core.reasons import Reason
from precheck.core.status import ERROR, PASS
from precheck.dump.decode import TensorSpec, decode_value
from precheck.ranks.cannot_grade import CannotGrade
from precheck.ranks.collective_records import PLACES, recorded_input, recorded_output, reduce_op, root
from precheck.results import DetailRow, Direction

__all__ = ["statistics_rows"]

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


def statistics_rows(name: str, r: int, members: list[int], records: dict[int, dict]) -> list[DetailRow]:
    """Rank ``r``'s rows of the collective ``name`` from its group's statistics; CannotGrade where they hold no
    identity precheck checks."""
    api = name.split(".")[1]
    if api not in _CHECKS:
        raise CannotGrade(f"{api}'s statistics hold no identity precheck checks")
    group = _Group(name, api, members, records)
    rows = []
    for i, (target, facts, inputs) in enumerate(_CHECKS[api](group, r)):
        rows.append(DetailRow(name, Direction.FORWARD, i, _compared(target, facts, inputs, len(members))))
    return rows


def _compared(target: TensorSpec, facts: list[_Fact], inputs: list[TensorSpec], ranks: int) -> Comparison:
    tolerance = _tolerance(target, inputs, ranks)
    checked, broken = [], []
    for fact in facts:
        if not all(isinstance(v, float) and math.isfinite(v) for v in (fact.recorded, fact.expected)):
            continue
        off = fact.recorded - fact.expected  # type: ignore[operator]
        ok = {"=": abs(off) <= tolerance, "<=": off <= tolerance, ">=": off >= -tolerance}[fact.relation]
        (checked if ok else broken).append(f"{fact.what} ({fact.recorded:.6g} vs {fact.expected:.6g})")
    if not checked and not broken:
        raise CannotGrade("its statistics are not finite: nothing of them can be checked")
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


def _reduced(g: _Group, r: int) -> list[tuple[TensorSpec, list[_Fact], list[TensorSpec]]]:
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
    }.get(op)  # fmt: skip
    if facts is None:
        raise CannotGrade(f"reduce op {op}: its output's statistics follow from no input statistic")
    return [(target, facts, inputs)]


def _reduce(g: _Group, r: int) -> list[tuple[TensorSpec, list[_Fact], list[TensorSpec]]]:
    if root("reduce", g.records[r]) != r:
        raise CannotGrade(f"rank {r} is not the reduce's dst: its tensor holds no defined result",
                           Reason.SKIP_RECORDED_OUTPUT)  # fmt: skip
    return _reduced(g, r)


def _broadcast(g: _Group, r: int) -> list[tuple[TensorSpec, list[_Fact], list[TensorSpec]]]:
    src = root("broadcast", g.records[r])
    if src not in g.records:
        raise CannotGrade(f"broadcast src rank {src!r} is not in the group {g.members}")
    source = _tensor(g.spec(src, "tensor"), f"rank {src}: input")
    target = _tensor(g.spec(r, "tensor", done=True), f"rank {r}: output")
    return [(target, _same(source, target, f"src rank {src}'s input"), [source])]


def _all_gather(g: _Group, r: int) -> list[tuple[TensorSpec, list[_Fact], list[TensorSpec]]]:
    targets = g.spec(r, "tensor_list", done=True)
    if not isinstance(targets, tuple) or len(targets) != len(g.members):
        raise CannotGrade(f"rank {r}: its all_gather list is not one tensor per rank of its group",
                           Reason.SKIP_BAD_RECORD)  # fmt: skip
    out = []
    for m, target in zip(g.members, targets, strict=True):
        source = _tensor(g.spec(m, "tensor"), f"rank {m}: input")
        out.append((_tensor(target, f"rank {r}: output"), _same(source, target, f"rank {m}'s input"), [source]))
    return out


def _all_gather_into(g: _Group, r: int) -> list[tuple[TensorSpec, list[_Fact], list[TensorSpec]]]:
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
    return [(target, facts, inputs)]


def _reduce_scattered(g: _Group, r: int) -> list[tuple[TensorSpec, list[_Fact], list[TensorSpec]]]:
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
    return [(target, facts, [*inputs, *outputs])]


# API -> rank -> (each output's recorded spec, the identities its statistics must hold, the inputs they come from)
_CHECKS: dict[str, Callable[[_Group, int], list[tuple[TensorSpec, list[_Fact], list[TensorSpec]]]]] = {
    "all_reduce": _reduced,
    "reduce": _reduce,
    "broadcast": _broadcast,
    "all_gather": _all_gather,
    **dict.fromkeys(("all_gather_into_tensor", "_all_gather_base", "all_gather_single"), _all_gather_into),
    **dict.fromkeys(("reduce_scatter_tensor", "_reduce_scatter_base", "reduce_scatter_single"), _reduce_scattered),
}
