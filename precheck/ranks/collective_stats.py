"""A statistics dump's collectives checked on what their recorded statistics still say.

Without the tensors there is no golden to grade a collective's output against, but a collective is linear in
its inputs, or copies them, so some of the output's statistics follow from the inputs' across the group's ranks:
an all_reduce(SUM)'s output Mean is the sum of its inputs' Means, its Max at most the sum of their Maxes; a MAX's
Max is the largest of the inputs' Maxes; a broadcast's output has its src's statistics; each tensor of an
all_gather's list (and of a gather's list on its dst) has its rank's; a scatter's output has the statistics of its
src's tensor for it; the mean of a reduce-scatter's output Means over the group is the reduction of its inputs'
Means. Each such identity is checked within a tolerance from the dtype: the rounding
of the reduction (a ring of n ranks rounds each element up to n times, by at most eps of its magnitude each time),
bounded by the tensors' root mean square (Norm over the square root of the size). An identity broken beyond that
is an error, proven from the statistics alone; each row says what was checked.

An all-to-all only moves rows: its identities are precheck.ranks.all_to_all_stats'.

A recorded output statistic that is inf or nan where the inputs' finite statistics bound every element (and the
statistic's own arithmetic) inside the dtype's range is an error too (``non_finite_statistics``, which the
point-to-point check uses as well): an identity cannot be checked on a non-finite value, so without this rule an
output of inf passed on whichever statistic stayed finite, and an all-NaN output was SKIP.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from precheck.core.comparison import Comparison
from precheck.core.older_python import zip_strict
from precheck.core.reasons import Reason
from precheck.core.status import ERROR, PASS
from precheck.dump.cannot_grade import CannotGrade
from precheck.dump.decode import TensorSpec
from precheck.dump.distributed_args import recorded_input
from precheck.escape import clip
from precheck.ranks.all_to_all_stats import all_to_all, all_to_all_single
from precheck.ranks.collective_records import PLACES, reduce_op, root
from precheck.ranks.stat_facts import STATS, Fact, Group, Output, same, stat, tensor, within
from precheck.results import DetailRow, Direction

__all__ = ["implied_bound", "non_finite_statistics", "statistics_rows"]


def statistics_rows(
    name: str, r: int, members: list[int], records: dict[int, dict], shared: dict[str, Any] | None = None
) -> list[DetailRow]:
    """Rank ``r``'s rows of the collective ``name`` from its group's statistics; CannotGrade where they hold no
    identity precheck checks. ``shared``: one dict for every rank's rows of the call (what they all read is read
    once: an all-to-all's group identities)."""
    api = name.split(".")[1]
    if api not in _CHECKS:
        raise CannotGrade(f"{api}'s statistics hold no identity precheck checks")
    group = Group(name, api, members, records, {} if shared is None else shared)
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
        return dict.fromkeys(STATS, True)  # an integer or bool tensor's statistics are never inf or nan
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
    for name in STATS:
        value = stat(target, name)
        if value is not None and not math.isfinite(value) and finite[name]:
            found.append(f"{where}: {name} is {value} where its inputs' finite statistics make it finite "
                         f"(every element within {bound:.6g})")  # fmt: skip
    return found


def _compared(output: Output, where: str, ranks: int) -> Comparison:
    target = output.target
    tolerance = within(target, output.inputs, output.rounds or ranks + 1)
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
    rounding = output.rounding or f"the dtype's rounding over {ranks} ranks"
    head = f"statistics dump: checked within {tolerance:.3g} ({rounding})"
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


def _reduced(g: Group, r: int) -> list[Output]:
    """all_reduce (and reduce on its dst): the output's statistics against the inputs' by the reduce op."""
    target = tensor(g.spec(r, "tensor", done=True), f"rank {r}: output")
    inputs = [tensor(g.spec(m, "tensor"), f"rank {m}: input") for m in g.members]
    op = reduce_op(recorded_input(g.records[r], *PLACES[g.api]["op"]))
    n = len(inputs)
    ins = {s: [stat(i, s) for i in inputs] for s in STATS}
    if any(v is None for s in ("Max", "Min", "Mean") for v in ins[s]):
        raise CannotGrade("an input's statistics are missing")
    facts = {
        "SUM": [Fact("Mean = sum of the inputs' Means", stat(target, "Mean"), math.fsum(ins["Mean"])),
                Fact("Max <= sum of the inputs' Maxes", stat(target, "Max"), math.fsum(ins["Max"]), "<="),
                Fact("Min >= sum of the inputs' Mins", stat(target, "Min"), math.fsum(ins["Min"]), ">=")],
        "AVG": [Fact("Mean = mean of the inputs' Means", stat(target, "Mean"), math.fsum(ins["Mean"]) / n),
                Fact("Max <= mean of the inputs' Maxes", stat(target, "Max"), math.fsum(ins["Max"]) / n, "<="),
                Fact("Min >= mean of the inputs' Mins", stat(target, "Min"), math.fsum(ins["Min"]) / n, ">=")],
        "MAX": [Fact("Max = largest of the inputs' Maxes", stat(target, "Max"), max(ins["Max"])),
                Fact("Min >= largest of the inputs' Mins", stat(target, "Min"), max(ins["Min"]), ">=")],
        "MIN": [Fact("Min = smallest of the inputs' Mins", stat(target, "Min"), min(ins["Min"])),
                Fact("Max <= smallest of the inputs' Maxes", stat(target, "Max"), min(ins["Max"]), "<=")],
        "PRODUCT": [],  # no identity, but finite inputs bound the product: its non-finite statistics are checked
    }.get(op)  # fmt: skip
    if facts is None:
        raise CannotGrade(f"reduce op {op}: its output's statistics follow from no input statistic")
    return [Output(target, facts, inputs, inputs, {"SUM": "sum", "PRODUCT": "product"}.get(op, "copy"))]


def _reduce(g: Group, r: int) -> list[Output]:
    if root("reduce", g.records[r]) != r:
        raise CannotGrade(f"rank {r} is not the reduce's dst: its tensor holds no defined result",
                           Reason.SKIP_RECORDED_OUTPUT)  # fmt: skip
    return _reduced(g, r)


def _broadcast(g: Group, r: int) -> list[Output]:
    src = root("broadcast", g.records[r])
    if src not in g.records:
        raise CannotGrade(f"broadcast src rank {src!r} is not in the group {g.members}")
    source = tensor(g.spec(src, "tensor"), f"rank {src}: input")
    target = tensor(g.spec(r, "tensor", done=True), f"rank {r}: output")
    return [Output(target, same(source, target, f"src rank {src}'s input"), [source], [source])]


def _peer(g: Group, r: int) -> int:
    """The root rank ``r``'s record names (a gather's dst, a scatter's src: torch's rank 0 where none is given)."""
    peer = root(g.api, g.records[r])
    if peer not in g.records:
        raise CannotGrade(f"{g.api} {'dst' if g.api == 'gather' else 'src'} rank {clip(repr(peer), 40)} is not "
                          f"in the group {g.members}")  # fmt: skip
    return peer


def _listed(g: Group, r: int, arg: str, done: bool) -> tuple:
    """Rank ``r``'s list argument ``arg``: one tensor per rank of the group, else CannotGrade."""
    found = g.spec(r, arg, done=done)
    if not isinstance(found, tuple) or len(found) != len(g.members):
        raise CannotGrade(f"rank {r}: its {g.api} list is not one tensor per rank of its group",
                           Reason.SKIP_BAD_RECORD)  # fmt: skip
    return found


def _gather(g: Group, r: int) -> list[Output]:
    """On the dst the gather_list's i-th tensor has member i's input's statistics; another rank's tensor was only
    sent, so it is unchanged (its statistics as given), as the tensor dump's check has it."""
    source = tensor(g.spec(r, "tensor"), f"rank {r}: input")
    if r != _peer(g, r):
        target = tensor(g.spec(r, "tensor", done=True), f"rank {r}: output")
        return [Output(target, same(source, target, f"rank {r}'s own input"), [source], [source])]
    return _all_gather(g, r, "gather_list")


def _scatter(g: Group, r: int) -> list[Output]:
    """Rank ``r``'s output has the statistics of the src's scatter_list tensor of its place in the group."""
    src = _peer(g, r)
    i = g.members.index(r)
    source = tensor(_listed(g, src, "scatter_list", done=False)[i], f"rank {src}: scatter_list[{i}]")
    target = tensor(g.spec(r, "tensor", done=True), f"rank {r}: output")
    return [Output(target, same(source, target, f"src rank {src}'s scatter_list[{i}]"), [source], [source])]


def _all_gather(g: Group, r: int, arg: str = "tensor_list") -> list[Output]:
    """The i-th tensor of rank ``r``'s list ``arg`` has member i's input's statistics."""
    out = []
    for m, target in zip_strict(g.members, _listed(g, r, arg, done=True)):
        source = tensor(g.spec(m, "tensor"), f"rank {m}: input")
        target = tensor(target, f"rank {r}: {arg}[{len(out)}]")
        out.append(Output(target, same(source, target, f"rank {m}'s input"), [source], [source]))
    return out


def _all_gather_into(g: Group, r: int) -> list[Output]:
    target = tensor(g.spec(r, "output", done=True), f"rank {r}: output")
    inputs = [tensor(g.spec(m, "input"), f"rank {m}: input") for m in g.members]
    ins = {s: [stat(i, s) for i in inputs] for s in STATS}
    if any(v is None for values in ins.values() for v in values):
        raise CannotGrade("an input's statistics are missing")
    facts = [
        Fact("Max = largest of the inputs' Maxes", stat(target, "Max"), max(ins["Max"])),
        Fact("Min = smallest of the inputs' Mins", stat(target, "Min"), min(ins["Min"])),
        Fact("Mean = mean of the inputs' Means", stat(target, "Mean"), math.fsum(ins["Mean"]) / len(inputs)),
        _rms_fact(target, ins["Norm"]),
    ]
    return [Output(target, facts, inputs, inputs)]


def _rms_fact(target: TensorSpec, norms: list[float]) -> Fact:
    """The gathered output's Norm against its inputs' Norms, in RMS (Norm over the root of the output's size): the
    unit its tolerance is sized in, as each element's rounding is. Compared as Norms, a clean FSDP2 all-gather of
    2080 floats was an error: 3e-6 apart, 9e-8 of the Norm, against a tolerance of 8e-7 sized for elements."""
    root = math.sqrt(target.numel) if target.numel else 1.0
    norm = stat(target, "Norm")
    return Fact(
        "RMS = root of the sum of the inputs' squared Norms over the output's size",
        None if norm is None else norm / root,
        math.sqrt(math.fsum(v * v for v in norms)) / root,
    )


def _reduce_scattered(g: Group, r: int) -> list[Output]:
    """A reduce-scatter's output is one chunk of the reduction: its Max and Min are bounded as an all_reduce's, and
    the mean of the group's output Means is the reduction of the inputs' Means (every chunk of every input is in
    exactly one output: the group's outputs together, so a broken one is on every rank's row)."""
    target = tensor(g.spec(r, "output", done=True), f"rank {r}: output")
    outputs = [tensor(g.spec(m, "output", done=True), f"rank {m}: output") for m in g.members]
    inputs = [tensor(g.spec(m, "input"), f"rank {m}: input") for m in g.members]
    op, n = reduce_op(recorded_input(g.records[r], *PLACES[g.api]["op"])), len(inputs)
    ins = {s: [stat(i, s) for i in inputs] for s in ("Max", "Min", "Mean")}
    means = [stat(o, "Mean") for o in outputs]
    if op not in ("SUM", "AVG") or any(v is None for values in [*ins.values(), means] for v in values):
        raise CannotGrade(f"reduce op {op} or missing statistics: nothing of them follows from the inputs'")
    scale, word = (1.0, "sum") if op == "SUM" else (1.0 / n, "mean")
    facts = [
        Fact(f"the group's outputs' mean Mean = {word} of the inputs' Means", math.fsum(means) / n,
              math.fsum(ins["Mean"]) * scale),
        Fact(f"Max <= {word} of the inputs' Maxes", stat(target, "Max"), math.fsum(ins["Max"]) * scale, "<="),
        Fact(f"Min >= {word} of the inputs' Mins", stat(target, "Min"), math.fsum(ins["Min"]) * scale, ">="),
    ]  # fmt: skip
    return [Output(target, facts, [*inputs, *outputs], inputs, "sum" if op == "SUM" else "copy")]


# API -> rank -> each output's recorded spec, the identities its statistics must hold, the inputs they come from
_CHECKS: dict[str, Callable[[Group, int], list[Output]]] = {
    "all_reduce": _reduced,
    "reduce": _reduce,
    "broadcast": _broadcast,
    "gather": _gather,
    "scatter": _scatter,
    "all_gather": _all_gather,
    "all_to_all": all_to_all,
    "all_to_all_single": all_to_all_single,
    **dict.fromkeys(("all_gather_into_tensor", "_all_gather_base", "all_gather_single"), _all_gather_into),
    **dict.fromkeys(("reduce_scatter_tensor", "_reduce_scatter_base", "reduce_scatter_single"), _reduce_scattered),
}
