"""DTensor calls (tensor parallelism, FSDP2) graded as a whole across the ranks of one step.

msprobe saves a DTensor argument as its rank's local shard with the layout of the whole (precheck.dump.sharding),
so each rank's run grades the kernel its device ran on its shards, as any call. A step folder holds every rank's
shards, so the call as a whole is graded here too: every argument, output and gradient put together by its
placements (precheck.execution.shards), the golden the float64 call on the whole inputs, the target the ranks'
recorded outputs put together (the call ran on several devices: there is no one device to rerun it on). Its row is
``<call>.whole`` in the CSVs of the first rank of its mesh (``rank0/``; each data parallel group's mesh its own),
after the call's own row, its Message saying which ranks and layouts made it.

One call's local kernel did not run on its recorded shards: a ``Partial`` input of a call whose outputs are not
``Partial`` (a norm of FSDP2's clipping) was reduced across the ranks first (DTensor redistributes it). Each rank's
row of such a call is graded here, on its inputs so reduced, in place of its run's.
"""

from __future__ import annotations

import itertools
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from precheck.core.reasons import Reason
from precheck.dump.decode import Case, Stats, TensorSpec, clip
from precheck.dump.records import Dump
from precheck.dump.selection import ApiLists
from precheck.execution.check import check_case
from precheck.execution.options import CheckOptions
from precheck.execution.runner import one_line
from precheck.execution.shards import Layout, put_together, reduced_before_kernel, replicas_apart
from precheck.execution.sizes import estimated_bytes
from precheck.inputs.builder import InputError, load_tensor
from precheck.ranks.cannot_grade import CannotGrade
from precheck.results import ApiResult, skipped
from precheck.walk import flatten, map_placed, placed

__all__ = ["WHOLE", "grade_sharded", "is_sharded"]

WHOLE = ".whole"  # the suffix of a whole call's row name: Functional.linear.0.whole
_NORMS = frozenset(
    {"Torch._foreach_norm", "Torch.vector_norm", "Torch.norm", "Tensor.norm", "Torch.linalg_vector_norm"}
)
# a case's trees, by the names msprobe's record gives them (the places messages say)
_TREES = {"args": "input_args", "kwargs": "input_kwargs", "outputs": "output", "grad_outputs": "backward.input",
          "grad_inputs": "backward.output"}  # fmt: skip


def is_sharded(case: Case) -> bool:
    """Whether a call took or made a DTensor."""
    return any(
        _spec_sharding(leaf) is not None for tree in (case.args, case.kwargs, case.outputs) for leaf in flatten(tree)
    )


def _spec_sharding(leaf: Any) -> Any:
    return leaf.sharding if isinstance(leaf, TensorSpec) else None


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


def grade_sharded(
    dumps: dict[int, Dump], options: CheckOptions, api_lists: ApiLists | None = None
) -> dict[int, dict[str, ApiResult]]:
    """Rows graded here, by rank and row name: each whole call's in the CSVs of the first rank of its mesh found
    (a step of data and tensor parallel groups has a mesh per group), and each rank's row of a call whose Partial
    inputs were reduced before its kernel. A call ``api_lists`` leave out has none (its rank rows say so)."""
    ranks = {r: StepRank(d) for r, d in sorted(dumps.items())}
    out: dict[int, dict[str, ApiResult]] = {r: {} for r in ranks}
    for r, rank in ranks.items():
        for case in rank.dump.cases:
            if case.problem or not is_sharded(case) or api_lists is not None and api_lists.excluded(case):
                continue
            hosted, reduced = _host(case, ranks) == r, reduced_before_kernel((case.args, case.kwargs), case.outputs)
            if not (hosted or reduced):
                continue  # another rank's whole row: no scratch folder made for it
            with tempfile.TemporaryDirectory(prefix="precheck-whole-") as scratch:  # one call's files at a time
                if hosted:
                    whole = _whole(case, ranks, options, Path(scratch) / "whole")
                    out[r][whole.name] = whole
                if reduced:
                    out[r][case.name] = _reduced_row(case, r, ranks, options, Path(scratch) / "rank")
    return out


def _host(case: Case, ranks: dict[int, StepRank]) -> int:
    """The rank whose CSVs hold the call's whole row: the first of its mesh in the step; the step's first where
    its layout is unknown (one SKIP row, not one per rank)."""
    meshes = {s.mesh if s.placements is not None else () for s in _shardings(case)}
    mesh = next(iter(meshes)) if len(meshes) == 1 else ()
    return min((m for m in mesh if m in ranks), default=min(ranks))


def _shardings(case: Case) -> list:
    return [s for tree in (case.args, case.kwargs, case.outputs) for s in map(_spec_sharding, flatten(tree)) if s]


def _whole(case: Case, ranks: dict[int, StepRank], options: CheckOptions, folder: Path) -> ApiResult:
    """The call put together from every rank of its mesh, its recorded outputs the target."""
    row = replace(case, name=case.name + WHOLE)
    try:
        members, cases = _members(case, ranks)
        _require_within(cases, options.max_memory)
        layout = Layout(members[0], norm=_norm_order(case))
        built, notes = _built(case.name, cases, ranks, layout, folder)
        result = check_case(replace(built, name=row.name), folder, replace(options, target="recorded"))
    except CannotGrade as e:
        return skipped(row, f"whole call: {e}", e.code)
    except Exception as e:  # precheck's own fault (a full scratch disk): this row's SKIP, never the step's end
        return skipped(
            row, f"whole call: precheck could not put it together: {one_line(e)}", Reason.SKIP_PRECHECK_FAULT
        )
    said = f"whole call over ranks {members}: shards put together by their placements ({_layouts(case)})"
    return _said(result, "; ".join([said, *notes]))


def _reduced_row(mine: Case, rank: int, ranks: dict[int, StepRank], options: CheckOptions, folder: Path) -> ApiResult:
    """Rank ``rank``'s call ``mine`` on its inputs as its kernel got them: the Partial ones reduced across the
    ranks."""
    name = mine.name
    try:
        _, cases = _members(mine, ranks)
        _require_within(cases, options.max_memory)
        built, _ = _built(name, cases, ranks, Layout(rank, partial_only=True, norm=_norm_order(mine)), folder)
        result = check_case(built, folder, options)
    except CannotGrade as e:
        return skipped(mine, f"{e}", e.code)
    except Exception as e:
        return skipped(mine, f"precheck could not reduce its Partial inputs: {one_line(e)}", Reason.SKIP_PRECHECK_FAULT)
    return _said(result, "its Partial inputs reduced across the ranks first, as DTensor ran it")


def _members(case: Case, ranks: dict[int, StepRank]) -> tuple[list[int], dict[int, Case]]:
    """The ranks of the call's mesh and each one's record of it; CannotGrade when one is missing or unreadable."""
    shardings = _shardings(case)
    unknown = next((s.problem for s in shardings if s.placements is None), None)
    if unknown is not None:
        raise CannotGrade(unknown, Reason.SKIP_UNSUPPORTED)
    meshes = {s.mesh for s in shardings}
    if len(meshes) != 1:
        raise CannotGrade(
            f"its DTensors lie on {len(meshes)} device meshes; precheck puts together one", Reason.SKIP_UNSUPPORTED
        )
    members = list(next(iter(meshes)))
    cases = {}
    for r in members:
        found = ranks[r].case(case.name) if r in ranks else None
        if found is None:
            where = "recorded no such call" if r in ranks else "has no dump in the step folder"
            raise CannotGrade(f"rank {r} of its mesh {where}", Reason.SKIP_MISSING_RANK)
        if found.problem:
            raise CannotGrade(f"rank {r}: {found.problem}", found.problem_reason)
        cases[r] = found
    return members, cases


def _require_within(cases: dict[int, Case], limit: int | None) -> None:
    """CannotGrade (SKIP_MEMORY) where putting the ranks' shards together would need more than ``limit`` bytes:
    roughly the shards, their whole in float64 and the call on it."""
    need = 5 * sum(estimated_bytes(c) for c in cases.values())
    if limit is not None and need > limit:
        raise CannotGrade(
            f"putting its shards together needs about {need / 2**30:.3g} GiB, "
            f"above --max-memory {limit / 2**30:.3g} GiB",
            Reason.SKIP_MEMORY,
        )


def _built(
    name: str, cases: dict[int, Case], ranks: dict[int, StepRank], layout: Layout, folder: Path
) -> tuple[Case, list[str]]:
    """The case of the call put together by ``layout``, its tensors saved in ``folder``, and what its Message
    must say of the shards (replicated outputs that differ); its arguments that are no DTensor are those of the
    layout's rank."""
    own = cases[layout.rank]
    notes: list[str] = []
    numbers = itertools.count()  # the saved files' names
    leaves = {r: {t: dict(placed(getattr(c, t) or (), root)) for t, root in _TREES.items()} for r, c in cases.items()}
    folder.mkdir(parents=True, exist_ok=True)

    def together(leaf: Any, place: str, tree: str) -> Any:
        if not isinstance(leaf, TensorSpec):
            return leaf
        if leaf.sharding is None:
            return _saved(_load(own, leaf, ranks, layout.rank), folder / f"{next(numbers)}.pt", leaf)
        if leaf.sharding.placements is None:
            raise CannotGrade(leaf.sharding.problem, Reason.SKIP_UNSUPPORTED)  # a gradient's (the forward's were read)
        shards = {}
        for r, c in cases.items():
            spec = leaves[r][tree].get(place)
            if not isinstance(spec, TensorSpec):
                raise CannotGrade(f"{place}: rank {r} recorded no tensor there", Reason.SKIP_BAD_RECORD)
            shards[r] = _load(c, spec, ranks, r)
        apart = replicas_apart(leaf.sharding, shards) if tree == "outputs" and not layout.partial_only else None
        if apart is not None:
            notes.append(f"{place} is replicated, yet rank {apart[0]}'s differs from rank {layout.rank}'s by up to "
                         f"{apart[1]:.3g}: graded on rank {layout.rank}'s")  # fmt: skip
        try:
            whole = put_together(leaf.sharding, shards, layout)
        except (RuntimeError, IndexError, ValueError) as e:  # shards of other shapes than their placements say
            raise CannotGrade(
                f"{place}: shards that do not fit {leaf.sharding}: {one_line(e)}", Reason.SKIP_BAD_RECORD
            ) from None
        return _saved(whole, folder / f"{next(numbers)}.pt", leaf)

    trees = {
        t: None if getattr(own, t) is None else map_placed(getattr(own, t), lambda v, at, t=t: together(v, at, t), root)
        for t, root in _TREES.items()
    }
    return replace(own, name=name, **trees), notes


def _load(case: Case, spec: TensorSpec, ranks: dict[int, StepRank], rank: int) -> torch.Tensor:
    if spec.data_name is None:
        raise CannotGrade(f"rank {rank}: {case.name}: no tensor file (a statistics dump): shards need their values")
    try:
        return load_tensor(spec, ranks[rank].dump.data_dir)
    except InputError as e:
        raise CannotGrade(f"rank {rank}: {clip(str(e))}", e.reason) from None


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


def _norm_order(case: Case) -> float | None:
    """The order of a norm call (its Partial values are norms of that order), None for another call."""
    if case.api not in _NORMS:
        return None
    given = case.args[1] if len(case.args) > 1 else case.kwargs.get("ord", case.kwargs.get("p", 2.0))
    given = 2.0 if given is None or given == "fro" else given
    return float(given) if isinstance(given, (int, float)) and not isinstance(given, bool) else None


def _layouts(case: Case) -> str:
    """Where each DTensor argument and output lay: ``input_args[1] Shard(0)`` (the ranks are said before it)."""
    laid = [
        f"{at} {_placements(leaf.sharding.placements)}"
        for tree, root in ((case.args, "input_args"), (case.kwargs, "input_kwargs"), (case.outputs, "output"))
        for at, leaf in placed(tree, root)
        if _spec_sharding(leaf) is not None
    ]
    return clip(", ".join(laid), 300)


def _placements(placements: tuple | None) -> str:
    """``Shard(0)`` on a mesh of one dimension, ``(Replicate(), Shard(0))`` on one of two."""
    if not placements:
        return "unknown"
    return str(placements[0]) if len(placements) == 1 else f"({', '.join(map(str, placements))})"


def _said(result: ApiResult, what: str) -> ApiResult:
    """``result`` with ``what`` first in its Message and its details rows'."""
    details = [
        replace(d, comparison=replace(d.comparison, message="; ".join(filter(None, [what, d.comparison.message]))))
        for d in result.details
    ]
    return replace(result, message="; ".join(filter(None, [what, result.message])), details=details)
