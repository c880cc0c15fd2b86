"""One DTensor call of a step made into a case from its ranks' records: its shards read, put together (or kept a
rank's own) and saved in a scratch folder, for precheck.ranks.whole_calls to grade.

Everything it reads and writes is sized from the records before the first shard is read: the shards, their
float64 copies while they are put together, the whole tensors written to the scratch folder (disk the run holds
as much as memory) and the call on them, every recorded gradient counted. A call above ``--max-memory`` is a
CannotGrade (SKIP_MEMORY) before any file is opened or folder made, and each shard is read with that limit, so a
file whose storage holds more than its record says is refused unread.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from precheck.core.reasons import Reason
from precheck.dump.cannot_grade import CannotGrade
from precheck.dump.decode import Case, Stats, TensorSpec, clip
from precheck.dump.records import Dump
from precheck.execution.runner import one_line
from precheck.execution.shards import Layout, put_together, replicas_apart
from precheck.execution.sizes import estimated_bytes
from precheck.inputs.builder import InputError, iter_specs, load_tensor
from precheck.ranks.synthesized_shards import generated, recorded_together
from precheck.walk import flatten, map_placed, placed

__all__ = ["Assembly", "StepRank", "built", "load", "members", "need_bytes", "require_within", "shardings"]

# a case's trees, by the names msprobe's record gives them (the places messages say)
TREES = {"args": "input_args", "kwargs": "input_kwargs", "outputs": "output", "grad_outputs": "backward.input",
         "grad_inputs": "backward.output"}  # fmt: skip
_INPUTS = ("args", "kwargs")  # the trees a statistics dump's case generates (its gradients kept as records)
# what a shard becomes before it is put together: (tree, place, rank, tensor) -> tensor
Adjust = Callable[[str, str, int, torch.Tensor], torch.Tensor]


class StepRank:
    """One rank's dump as the whole calls read it: its cases by name (the index built at the first call asked
    for: a step without DTensor calls builds none) and its data folder."""

    def __init__(self, dump: Dump) -> None:
        self.dump = dump
        self._orders: dict[str, int] | None = None

    def case(self, name: str) -> Case | None:
        if self._orders is None:
            self._orders = {n: i for i, n in enumerate(self.dump.cases.names)}
        return self.dump.cases[self._orders[name]] if name in self._orders else None


@dataclass(frozen=True)
class Assembly:
    """How the case is made of the ranks' shards: ``layout`` puts each DTensor together (or, ``own_only``, keeps
    the layout's rank's shard: its local kernel's inputs), ``adjust`` changes a shard first (DTensor's masks),
    ``limit`` bounds each file read (--max-memory); ``seed``, a statistics dump's: each input's shards generated
    from their own statistics with it, the outputs and gradients kept as records (synthesized_shards)."""

    layout: Layout
    own_only: bool = False
    adjust: Adjust | None = None
    limit: int | None = None
    seed: int | None = None


def shardings(case: Case) -> list:
    """The known or unknown layouts of the call's DTensor arguments and outputs."""
    leaves = (leaf for tree in (case.args, case.kwargs, case.outputs) for leaf in flatten(tree))
    return [leaf.sharding for leaf in leaves if isinstance(leaf, TensorSpec) and leaf.sharding is not None]


def members(case: Case, ranks: dict[int, StepRank]) -> tuple[list[int], dict[int, Case]]:
    """The ranks of the call's mesh and each one's record of it; CannotGrade when one is missing or unreadable."""
    found_shardings = shardings(case)
    unknown = next((s.problem for s in found_shardings if s.placements is None), None)
    if unknown is not None:
        raise CannotGrade(unknown, Reason.SKIP_UNSUPPORTED)
    meshes = {s.mesh for s in found_shardings}
    if len(meshes) != 1:
        raise CannotGrade(
            f"its DTensors lie on {len(meshes)} device meshes; precheck puts together one", Reason.SKIP_UNSUPPORTED
        )
    mesh = list(next(iter(meshes)))
    cases = {}
    for r in mesh:
        found = ranks[r].case(case.name) if r in ranks else None
        if found is None:
            where = "recorded no such call" if r in ranks else "has no dump in the step folder"
            raise CannotGrade(f"rank {r} of its mesh {where}", Reason.SKIP_MISSING_RANK)
        if found.problem:
            raise CannotGrade(f"rank {r}: {found.problem}", found.problem_reason)
        cases[r] = found
    return mesh, cases


def need_bytes(cases: dict[int, Case]) -> float:
    """What putting the ranks' records together holds, in memory and in the scratch folder, roughly: every shard
    read (the recorded gradients too) and its float64 copy, the whole tensors saved (never more than the shards
    they are made of) and the call on them, golden and honest runs included."""
    specs = [s for c in cases.values() for s in iter_specs(tuple(getattr(c, t) for t in TREES))]
    shards = sum(s.numel * (s.dtype.itemsize + 8) for s in specs)
    scratch = 2 * sum(s.numel * s.dtype.itemsize for s in specs)  # a loss-parallel rank row saves its own beside
    gradients = sum(s.numel * (2 * s.dtype.itemsize + 16) for c in cases.values() for s in iter_specs(c.grad_inputs))
    return shards + scratch + sum(estimated_bytes(c) for c in cases.values()) + gradients


def require_within(cases: dict[int, Case], limit: int | None) -> None:
    """CannotGrade (SKIP_MEMORY) where putting the ranks' records together would need more than ``limit`` bytes
    (need_bytes): asked before the first shard is read or the scratch folder is made."""
    need = need_bytes(cases)
    if limit is not None and need > limit:
        raise CannotGrade(
            f"putting its shards together needs about {need / 2**30:.3g} GiB (scratch files included), "
            f"above --max-memory {limit / 2**30:.3g} GiB",
            Reason.SKIP_MEMORY,
        )


def built(
    name: str, cases: dict[int, Case], ranks: dict[int, StepRank], assembly: Assembly, folder: Path
) -> tuple[Case, list[str]]:
    """The case of the call made by ``assembly``, its tensors saved in ``folder``, and what its Message must say
    of the shards (replicated outputs that differ); its arguments that are no DTensor are those of the layout's
    rank. A replicated argument whose ranks hold different values is a CannotGrade naming it and the rank: the
    ranks ran the call on different inputs, and no whole is the call of any of them."""
    layout = assembly.layout
    own = cases[layout.rank]
    notes: list[str] = []
    numbers = itertools.count()  # the saved files' names
    leaves = {r: {t: dict(placed(getattr(c, t) or (), root)) for t, root in TREES.items()} for r, c in cases.items()}
    folder.mkdir(parents=True, exist_ok=True)

    def together(leaf: Any, place: str, tree: str) -> Any:
        if not isinstance(leaf, TensorSpec):
            return leaf
        if assembly.seed is not None and tree not in _INPUTS:  # a statistics dump's records: never generated
            specs = {r: s for r in cases if isinstance(s := leaves[r][tree].get(place), TensorSpec)}
            return recorded_together(leaf, specs, layout, assembly.own_only)
        if leaf.sharding is None:
            value = _load(own, leaf, ranks, layout.rank, assembly, place)
            return _saved(value, folder / f"{next(numbers)}.pt", leaf)
        if leaf.sharding.placements is None:
            raise CannotGrade(leaf.sharding.problem, Reason.SKIP_UNSUPPORTED)  # a gradient's (the forward's were read)
        shards = _shards(cases, leaves, tree, place, ranks, assembly)
        if assembly.own_only:
            return _saved(shards[layout.rank], folder / f"{next(numbers)}.pt", leaf)
        notes.extend(_replicas(leaf, place, tree, shards, layout))
        try:
            whole = put_together(leaf.sharding, shards, layout)
        except (RuntimeError, IndexError, ValueError) as e:  # shards of other shapes than their placements say
            raise CannotGrade(
                f"{place}: shards that do not fit {leaf.sharding}: {one_line(e)}", Reason.SKIP_BAD_RECORD
            ) from None
        return _saved(whole, folder / f"{next(numbers)}.pt", leaf)

    trees = {
        t: None if getattr(own, t) is None else map_placed(getattr(own, t), lambda v, at, t=t: together(v, at, t), root)
        for t, root in TREES.items()
    }
    return replace(own, name=name, **trees), notes


def _shards(
    cases: dict[int, Case], leaves: dict, tree: str, place: str, ranks: dict[int, StepRank], assembly: Assembly
) -> dict[int, torch.Tensor]:
    """Each rank's shard at ``place`` (the layout's rank's alone when ``own_only``), adjusted."""
    wanted = [assembly.layout.rank] if assembly.own_only else list(cases)
    shards = {}
    for r in wanted:
        spec = leaves[r][tree].get(place)
        if not isinstance(spec, TensorSpec):
            raise CannotGrade(f"{place}: rank {r} recorded no tensor there", Reason.SKIP_BAD_RECORD)
        shards[r] = _load(cases[r], spec, ranks, r, assembly, place)
        if assembly.adjust is not None:
            shards[r] = assembly.adjust(tree, place, r, shards[r])
    return shards


def _replicas(leaf: TensorSpec, place: str, tree: str, shards: dict[int, torch.Tensor], layout: Layout) -> list[str]:
    """What a replicated tensor whose ranks differ makes of the call: an argument, no whole to grade
    (CannotGrade); an output, a note (graded on the layout's rank's)."""
    if layout.partial_only or tree not in ("args", "kwargs", "outputs"):
        return []
    apart = replicas_apart(leaf.sharding, shards)
    if apart is None:
        return []
    if tree == "outputs":
        return [f"{place} is replicated, yet rank {apart[0]}'s differs from rank {layout.rank}'s by up to "
                f"{apart[1]:.3g}: graded on rank {layout.rank}'s"]  # fmt: skip
    raise CannotGrade(
        f"{place} is a replicated input, yet rank {apart[0]}'s differs from rank {layout.rank}'s by up to "
        f"{apart[1]:.3g}: the ranks ran the call on different inputs (a rank gone its own way, such as a dropout "
        f"not seeded alike), so it has no one whole to grade; each rank's own row grades its kernel",
        Reason.SKIP_INPUTS,
    )


def load(case: Case, spec: TensorSpec, ranks: dict[int, StepRank], rank: int, limit: int | None) -> torch.Tensor:
    """Rank ``rank``'s recorded tensor ``spec`` of ``case``, a file whose storage needs more than ``limit`` bytes
    refused unread; CannotGrade where it cannot be read."""
    return _load(case, spec, ranks, rank, Assembly(Layout(rank), limit=limit))


def _load(
    case: Case, spec: TensorSpec, ranks: dict[int, StepRank], rank: int, assembly: Assembly, place: str = ""
) -> torch.Tensor:
    """The tensor read, or generated from its statistics where ``assembly`` has a seed and its dump no file."""
    limit = assembly.limit
    if spec.data_name is None and assembly.seed is not None:
        return generated(case, spec, rank, place, assembly.seed)
    if spec.data_name is None:
        raise CannotGrade(
            f"rank {rank}: {case.name}: {_unsaved(spec, ranks[rank].dump.task, place)}: shards need their values"
        )
    try:
        return load_tensor(spec, ranks[rank].dump.data_dir, max_bytes=limit)
    except InputError as e:
        raise CannotGrade(f"rank {rank}: {clip(str(e))}", e.reason) from None


def _unsaved(spec: TensorSpec, task: str, place: str) -> str:
    """Why a recorded tensor has no file, as its dump says: a statistics dump saves none; in a tensor dump msprobe
    saved this one without data (null statistics: an AsyncCollectiveTensor, a RowwiseParallel output before its
    all-reduce was waited on)."""
    if task == "statistics":
        return "no tensor file (a statistics dump)"
    if all(v is None for v in (spec.stats.max, spec.stats.min, spec.stats.mean, spec.stats.norm)):
        return f"{place or 'a tensor'} saved by msprobe without data (null statistics, no file) in a tensor dump"
    return "no tensor file in a tensor dump (its record names none)"


def _saved(tensor: torch.Tensor, path: Path, spec: TensorSpec) -> TensorSpec:
    """``tensor`` saved at ``path`` (numbered: no name from the dump, a keyword, becomes a path) and described as
    a recorded tensor, its statistics its own."""
    torch.save(tensor.detach().clone(), path)
    wide = tensor.detach().to(torch.float64) if tensor.is_floating_point() else None
    stats = (
        Stats(*(float(f(wide)) for f in (torch.max, torch.min, torch.mean, torch.norm)))
        if wide is not None and wide.numel()
        else Stats(None, None, None, None)
    )
    return replace(spec, shape=tuple(tensor.shape), stats=stats, data_name=path.name, sharding=None)
