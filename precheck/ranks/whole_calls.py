"""DTensor calls (tensor parallelism, FSDP2) graded as a whole across the ranks of one step.

msprobe saves a DTensor argument as its rank's local shard with the layout of the whole (precheck.dump.sharding),
so each rank's run grades the kernel its device ran on its shards, as any call. A step folder holds every rank's
shards, so the call as a whole is graded here too: every argument, output and gradient put together by its
placements (precheck.execution.shards), the golden the float64 call on the whole inputs, the target the ranks'
recorded outputs put together (the call ran on several devices: there is no one device to rerun it on). Its row is
``<call>.whole`` in the CSVs of the first rank of its mesh (``rank0/``; each data parallel group's mesh its own),
after the call's own row, its Message saying which ranks and layouts made it.

Some calls' local kernels did not run on their recorded shards as they stand, and each rank's row of them is graded
here, in place of its run's: a ``Partial`` input of a call whose outputs are not ``Partial`` (a norm of FSDP2's
clipping) was reduced across the ranks first (DTensor redistributes it); a vocab-parallel embedding's kernel ran on
its ids masked to the rank's rows (DTensor's ``_MaskPartial``: precheck.execution.vocab_parallel), and its whole
output is the sum of the ranks' outputs with the rows of the ids outside each rank's shard zeroed.

The case a row grades is made by precheck.ranks.shard_cases (shards read, put together, saved in a scratch folder).
In a statistics dump those rank rows are graded as its every other row, on generated inputs: each rank's shard
generated from that rank's own statistics, then reduced, masked or put together as above
(precheck.ranks.synthesized_shards), its Message saying so.

A statistics dump's DTensor calls have no whole row, and the run says so once (``ShardedRows.statistics_calls``): its
shards hold no values, and a whole made of shards generated from their statistics grades nothing the ranks ran.
Its target would be this machine's kernel on a call no device ran as one (each rank's own row already grades that
kernel on its shard's inputs), or the ranks' recorded statistics put together against the golden of generated
inputs, which describe other values than those (the statistics' verdict is then the generator's, not the call's).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from precheck.core.reasons import Reason
from precheck.dump.cannot_grade import CannotGrade
from precheck.dump.decode import Case, TensorSpec, clip
from precheck.dump.records import Dump
from precheck.dump.selection import ApiLists
from precheck.execution.check import check_case
from precheck.execution.options import CheckOptions
from precheck.execution.runner import one_line
from precheck.execution.shards import Layout, reduced_before_kernel
from precheck.execution.vocab_parallel import (
    embedding_rows,
    ids_in_shard,
    is_loss_parallel,
    is_masked_embedding,
    rows_outside_zeroed,
)
from precheck.ranks.shard_cases import Adjust, Assembly, StepRank, built, load, members, require_within, shardings
from precheck.ranks.synthesized_shards import SAID
from precheck.results import ApiResult, skipped
from precheck.walk import flatten, placed

__all__ = ["WHOLE", "ShardedRows", "grade_sharded", "is_sharded"]

WHOLE = ".whole"  # the suffix of a whole call's row name: Functional.linear.0.whole
_NORMS = frozenset(
    {"Torch._foreach_norm", "Torch.vector_norm", "Torch.norm", "Tensor.norm", "Torch.linalg_vector_norm"}
)


def is_sharded(case: Case) -> bool:
    """Whether a call took or made a DTensor."""
    return any(
        _spec_sharding(leaf) is not None for tree in (case.args, case.kwargs, case.outputs) for leaf in flatten(tree)
    )


def _spec_sharding(leaf: Any) -> Any:
    return leaf.sharding if isinstance(leaf, TensorSpec) else None


def _own_row(case: Case) -> bool:
    """Whether each rank's row of the call is graded here: its kernel ran on what no rank's record holds as it
    stands."""
    inputs = (case.args, case.kwargs)
    return reduced_before_kernel(inputs, case.outputs) or is_masked_embedding(case) or is_loss_parallel(case)


@dataclass(frozen=True)
class ShardedRows:
    """What grade_sharded made: the rows, by rank and row name, and how many DTensor calls of a statistics dump
    have no whole row (the run says so once)."""

    rows: dict[int, dict[str, ApiResult]]
    statistics_calls: int = 0


def grade_sharded(dumps: dict[int, Dump], options: CheckOptions, api_lists: ApiLists | None = None) -> ShardedRows:
    """Rows graded here, by rank and row name: each whole call's in the CSVs of the first rank of its mesh found
    (a step of data and tensor parallel groups has a mesh per group), but for a statistics dump's (counted
    instead: no whole to grade), and each rank's row of a call whose kernel ran on inputs its record does not hold
    as they stand. A call ``api_lists`` leave out has none (its rank rows say so)."""
    ranks = {r: StepRank(d) for r, d in sorted(dumps.items())}
    out: dict[int, dict[str, ApiResult]] = {r: {} for r in ranks}
    statistics_calls = 0
    for r, rank in ranks.items():
        for case in rank.dump.cases:
            if case.problem or not is_sharded(case) or api_lists is not None and api_lists.excluded(case):
                continue
            hosted, own = _host(case, ranks) == r, _own_row(case)
            if hosted and rank.dump.task == "statistics":
                hosted, statistics_calls = False, statistics_calls + 1
            if hosted or own:  # else another rank's whole row: nothing read for it
                out[r].update(_graded(case, r, ranks, options, hosted, own))
    return ShardedRows(out, statistics_calls)


def _graded(
    case: Case, r: int, ranks: dict[int, StepRank], options: CheckOptions, hosted: bool, own: bool
) -> dict[str, ApiResult]:
    """The call's whole row (``hosted``) and rank ``r``'s own row (``own``), by name. Sized from the records
    before any shard is read or scratch folder made: a call above --max-memory writes nothing. Each row's files
    lie in a scratch folder of their own, removed before the next is made."""
    whole = replace(case, name=case.name + WHOLE)
    try:
        mesh, cases = members(case, ranks)
        require_within(cases, options.max_memory)
    except CannotGrade as e:
        return {
            **({whole.name: skipped(whole, f"whole call: {e}", e.code)} if hosted else {}),
            **({case.name: skipped(case, f"{e}", e.code)} if own else {}),
        }
    rows = {}
    if hosted:
        with tempfile.TemporaryDirectory(prefix="precheck-whole-") as scratch:
            rows[whole.name] = _whole(case, mesh, cases, ranks, options, Path(scratch))
    if own:
        with tempfile.TemporaryDirectory(prefix="precheck-whole-") as scratch:
            rows[case.name] = _rank_row(case, r, cases, ranks, options, Path(scratch))
    return rows


def _host(case: Case, ranks: dict[int, StepRank]) -> int:
    """The rank whose CSVs hold the call's whole row: the first of its mesh in the step; the step's first where
    its layout is unknown (one SKIP row, not one per rank)."""
    meshes = {s.mesh if s.placements is not None else () for s in shardings(case)}
    mesh = next(iter(meshes)) if len(meshes) == 1 else ()
    return min((m for m in mesh if m in ranks), default=min(ranks))


def _whole(
    case: Case, mesh: list[int], cases: dict[int, Case], ranks: dict[int, StepRank], options: CheckOptions, folder: Path
) -> ApiResult:
    """The call put together from every rank of its mesh (``cases``: each one's record), its recorded outputs the
    target."""
    row = replace(case, name=case.name + WHOLE)
    masks = None
    try:
        layout = Layout(mesh[0], norm=_norm_order(case))
        masks = _output_masks(case, cases, ranks, options.max_memory) if is_masked_embedding(case) else None
        assembly = Assembly(layout, adjust=masks, limit=options.max_memory)
        whole, notes = built(case.name, cases, ranks, assembly, folder)
        whole = replace(whole, name=row.name, grads_of_inputs=is_loss_parallel(case))
        result = check_case(whole, folder, replace(options, target="recorded"))
    except CannotGrade as e:
        return skipped(row, f"whole call: {e}", e.code)
    except Exception as e:  # precheck's own fault (a full scratch disk): this row's SKIP, never the step's end
        return skipped(
            row, f"whole call: precheck could not put it together: {one_line(e)}", Reason.SKIP_PRECHECK_FAULT
        )
    said = f"whole call over ranks {mesh}: shards put together by their placements ({_layouts(case)})"
    said += _rebuilt(case)
    if masks is not None:
        said += "; each rank's output rows of the ids outside its shard zeroed before the sum (DTensor's mask)"
    if is_loss_parallel(case):
        said += "; loss_parallel: its recorded gradient is the logits' (DTensor's nll_loss backward returns it)"
    return _said(result, "; ".join([said, *notes]))


def _rank_row(
    mine: Case, rank: int, cases: dict[int, Case], ranks: dict[int, StepRank], options: CheckOptions, folder: Path
) -> ApiResult:
    """Rank ``rank``'s call ``mine`` on its inputs as its kernel got them: the Partial ones reduced across the
    ranks, a vocab-parallel embedding's ids masked to the rank's rows, a loss-parallel cross-entropy's logits put
    together (DTensor computed it across the ranks' shards)."""
    statistics = ranks[rank].dump.task == "statistics"
    build = Assembly(Layout(rank), limit=options.max_memory, seed=options.seed if statistics else None)
    try:
        case, said = _rank_case(mine, rank, cases, ranks, folder, build)
        result = check_case(case, folder, options)
    except CannotGrade as e:
        return skipped(mine, f"{e}", e.code)
    except Exception as e:
        return skipped(
            mine, f"precheck could not rebuild its kernel's inputs: {one_line(e)}", Reason.SKIP_PRECHECK_FAULT
        )
    if statistics:  # its inputs were written to files: say they were generated, as check_case says of its own
        result = replace(result, generated_inputs=True)
        said = f"{said}; {SAID.format(seed=options.seed)}"
    return _said(result, said)


def _rank_case(
    mine: Case, rank: int, cases: dict[int, Case], ranks: dict[int, StepRank], folder: Path, build: Assembly
) -> tuple[Case, str]:
    """The case of rank ``rank``'s call as DTensor ran it (``build``: the rank's layout, its limit and a statistics
    dump's seed), and what its Message says of it."""
    if is_masked_embedding(mine):
        assembly = replace(build, own_only=True, adjust=_ids_masks(mine, cases))
        case, _ = built(mine.name, cases, ranks, assembly, folder)
        case, note = _whole_vocabulary_gradient(case, rank, cases, statistics=build.seed is not None)
        said = "its ids masked to this rank's rows of the embedding first, as DTensor ran it"
        return case, "; ".join(filter(None, [said, note]))
    if is_loss_parallel(mine):
        case, _ = built(mine.name, cases, ranks, build, folder)
        own, _ = built(mine.name, cases, ranks, replace(build, own_only=True), folder / "own")
        said = (
            "loss_parallel: DTensor computed it across the ranks' shards of the classes, so it is graded on the "
            "logits put together, this rank's recorded loss its output"
        )
        return replace(case, outputs=own.outputs, grads_of_inputs=True), said
    layout = Layout(rank, partial_only=True, norm=_norm_order(mine))
    case, _ = built(mine.name, cases, ranks, replace(build, layout=layout), folder)
    return case, "its Partial inputs reduced across the ranks first, as DTensor ran it"


def _whole_vocabulary_gradient(
    case: Case, rank: int, cases: dict[int, Case], statistics: bool = False
) -> tuple[Case, str]:
    """The rank's embedding case without a recorded weight gradient of the whole vocabulary (DTensor ran the
    backward on the replicated gradient and every id: msprobe saves it ``Replicate``, the whole weight's shape),
    and what its Message says of it; the whole row grades it (a ``statistics`` dump has none)."""
    own = _weights(cases[rank], cases)[rank][1]
    grads = [g for g in flatten(case.grad_inputs or ()) if isinstance(g, TensorSpec)]
    if not any(g.shape and g.shape[0] != own for g in grads):
        return case, ""
    said = (
        "backward: its recorded weight gradient is the whole vocabulary's (DTensor ran the backward on every id), "
        + ("not graded here, and a statistics dump has no whole row" if statistics else "graded in the whole row")
    )
    return replace(case, grad_inputs=None), said


def _ids_place(case: Case) -> str:
    """Where an embedding call's ids lie (``input_args[0]``): its first integer DTensor argument."""
    found = [
        at
        for tree, root in ((case.args, "input_args"), (case.kwargs, "input_kwargs"))
        for at, leaf in placed(tree, root)
        if isinstance(leaf, TensorSpec) and leaf.sharding is not None and not leaf.dtype.is_floating_point
    ]
    if not found:
        raise CannotGrade("a vocab-parallel embedding with no integer ids recorded", Reason.SKIP_BAD_RECORD)
    return found[0]


def _weights(case: Case, cases: dict[int, Case]) -> dict[int, tuple[int, int]]:
    """Each rank's first weight row and row count (precheck.execution.vocab_parallel.embedding_rows)."""
    shapes = {}
    for r, c in cases.items():
        floats = [s for s in flatten((c.args, c.kwargs)) if isinstance(s, TensorSpec) and s.dtype.is_floating_point]
        if not floats or not floats[0].shape:
            raise CannotGrade(f"rank {r}: a vocab-parallel embedding with no weight recorded", Reason.SKIP_BAD_RECORD)
        shapes[r] = floats[0].shape
    return embedding_rows(case, shapes)


def _ids_masks(case: Case, cases: dict[int, Case]) -> Adjust:
    """A rank's ids as its kernel got them (DTensor's ``_MaskPartial``): shifted to its rows, those outside 0."""
    at, rows = _ids_place(case), _weights(case, cases)

    def adjust(tree: str, place: str, rank: int, tensor: torch.Tensor) -> torch.Tensor:
        return ids_in_shard(tensor, *rows[rank]) if tree in ("args", "kwargs") and place == at else tensor

    return adjust


def _output_masks(case: Case, cases: dict[int, Case], ranks: dict[int, StepRank], limit: int | None) -> Adjust:
    """A rank's embedding output as DTensor summed it: the rows of its ids outside its shard zeroed."""
    at, rows = _ids_place(case), _weights(case, cases)

    def adjust(tree: str, place: str, rank: int, tensor: torch.Tensor) -> torch.Tensor:
        if tree != "outputs":
            return tensor
        spec = _spec_at(cases[rank], at)
        return rows_outside_zeroed(tensor, load(cases[rank], spec, ranks, rank, limit), *rows[rank])

    return adjust


def _spec_at(case: Case, place: str) -> TensorSpec:
    found = dict(placed(case.args, "input_args") + placed(case.kwargs, "input_kwargs")).get(place)
    if not isinstance(found, TensorSpec):
        raise CannotGrade(f"{place}: {case.name} recorded no tensor there", Reason.SKIP_BAD_RECORD)
    return found


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


def _rebuilt(case: Case) -> str:
    """What the Message says of the placements precheck put back (precheck.dump.sharding): the first, and how many
    more tensors were rebuilt alike; empty where none was."""
    said = [s.rebuilt for s in shardings(case) if s.rebuilt]
    if not said:
        return ""
    more = f" (and {len(said) - 1} more of its tensors alike)" if len(said) > 1 else ""
    return f"; {clip(said[0], 300)}{more}"


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
