"""The words a statistics dump's collective is checked in (precheck.ranks.collective_stats and
all_to_all_stats): one call's records on its group read as statistics (``Group``), an identity its output's
statistics must hold (``Fact``), and one output tensor with its identities and the tensors they come from
(``Output``). Apart from the checks so that each kind of collective's checks can live in a module of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from precheck.dump.cannot_grade import CannotGrade
from precheck.dump.decode import TensorSpec, decode_value
from precheck.dump.distributed_args import recorded_input, recorded_output
from precheck.ranks.collective_records import PLACES

__all__ = ["STATS", "Fact", "Group", "Output", "rms", "same", "stat", "tensor", "within"]

STATS = ("Max", "Min", "Mean", "Norm")


@dataclass(frozen=True)
class Group:
    """One collective's records on the members of its group, read as statistics."""

    name: str
    api: str
    members: list[int]
    records: dict[int, dict]
    shared: dict[str, Any] = field(default_factory=dict)  # what every rank's row of the call reads, read once

    def spec(self, r: int, arg: str, done: bool = False) -> Any:
        """Argument ``arg`` of rank ``r`` as given (``done``: once the call had run), decoded."""
        raw = (recorded_output if done else recorded_input)(self.records[r], *PLACES[self.api][arg])
        if raw is None:
            raise CannotGrade(f"rank {r}: the record holds no {'output' if done else 'input'} {arg}")
        return decode_value(raw, f"rank {r}: {arg}")


@dataclass(frozen=True)
class Fact:
    """One identity: the recorded statistic, what the inputs' statistics make it, and how it must compare."""

    what: str  # "Mean = sum of the inputs' Means"
    recorded: float | None
    expected: float | None
    relation: str = "="  # "=", "<=" (recorded at most expected) or ">="


@dataclass(frozen=True)
class Output:
    """One output tensor of a collective as its statistics check it: the identities it must hold, the tensors the
    tolerance is sized on, and the tensors its elements come from (``sources``) and how (``how``: each element
    one of theirs or a mean, max or min of theirs, "copy"; a sum of theirs, "sum"; a product, "product")."""

    target: TensorSpec
    facts: list[Fact]
    inputs: list[TensorSpec]
    sources: list[TensorSpec] = field(default_factory=list)
    how: str = "copy"
    rounds: int | None = None  # how many roundings the tolerance allows (None: one per rank and one more)
    rounding: str = ""  # what they are, as the Message says it


def rms(spec: TensorSpec) -> float:
    """The tensor's root mean square (its Norm over the root of its size): the scale a tolerance is sized on; 0 where
    its Norm is not recorded or not finite."""
    norm = spec.stats.norm
    return norm / math.sqrt(spec.numel) if norm is not None and math.isfinite(norm) and spec.numel else 0.0


def stat(spec: TensorSpec, name: str) -> float | None:
    """The recorded statistic ``name`` ("Max", "Min", "Mean", "Norm") of the tensor; None where not recorded."""
    return getattr(spec.stats, name.lower())


def same(source: TensorSpec, target: TensorSpec, whose: str) -> list[Fact]:
    """A copied tensor's statistics are its source's."""
    return [Fact(f"{s} = {whose}'s", stat(target, s), stat(source, s)) for s in STATS]


def tensor(value: Any, where: str) -> TensorSpec:
    """``value`` where it is a recorded tensor; CannotGrade saying ``where`` is not one."""
    if not isinstance(value, TensorSpec):
        raise CannotGrade(f"{where} is not a tensor")
    return value


def within(target: TensorSpec, inputs: list[TensorSpec], rounds: int) -> float:
    """How far a correct collective's statistic may sit from the identity: each element rounded up to ``rounds``
    times in the target's dtype (and each statistic computed in float32), bounded by the tensors' RMS."""
    dtype = target.dtype
    eps = max(torch.finfo(dtype).eps, torch.finfo(torch.float32).eps) if dtype.is_floating_point else 0.0
    return rounds * eps * (sum(rms(s) for s in inputs) + rms(target))
