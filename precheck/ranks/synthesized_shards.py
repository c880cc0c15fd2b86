"""A statistics dump's shards generated from their own statistics, for a rank's row of a DTensor call whose kernel
ran on more than its rank's record holds as it stands (precheck.ranks.whole_calls).

A statistics dump saves no tensor, and every other row of it is graded on inputs generated from the recorded
statistics (precheck.inputs). Such a call is graded the same way: each rank's shard of an input is generated from
that rank's own statistics (a sum-``Partial`` tensor's local values too), then reduced, put together or masked as
DTensor did before the kernel ran (precheck.ranks.shard_cases), so the row grades the kernel on what it was given,
its golden the float64 call on those same inputs. A tensor every rank holds alike (no DTensor, or one replicated on
every mesh dimension) is generated as each rank's own row generates it, seeded by the call and its place alone;
any other shard by its rank too, so shards of the same statistics are not copies of one another.

The recorded outputs and gradients are kept as records, never generated: a replay on generated inputs grades no
recorded value. Put together, their shapes are the whole's and their statistics the whole's where the shards fix
them exactly (pieces along a dimension: the largest Max, the smallest Min, the Mean weighted by size, the root of
the squared Norms' sum); a pending reduction leaves them blank.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import torch

from api_registry import lookup
from precheck.core.reasons import Reason
from precheck.dump.cannot_grade import CannotGrade
from precheck.dump.decode import Case, Stats, TensorSpec
from precheck.execution.shards import Layout, coordinates, put_together
from precheck.inputs.builder import InputBuilder, InputError, builder_for

__all__ = ["SAID", "generated", "recorded_together"]

SAID = "inputs synthesized per shard from each rank's recorded statistics (seed {seed}), as a statistics dump is graded"


def generated(case: Case, spec: TensorSpec, rank: int, place: str, seed: int) -> torch.Tensor:
    """Rank ``rank``'s tensor ``spec`` at ``place`` of its record ``case``, generated from its own statistics with
    the fix-ups of the call's registry entry (class ids kept valid, int64 widening); CannotGrade where its
    statistics are all blank (an AsyncCollectiveTensor's: as in any statistics row, nothing to rebuild it from)."""
    if all(v is None for v in (spec.stats.max, spec.stats.min, spec.stats.mean, spec.stats.norm)):
        raise CannotGrade(
            f"rank {rank}: {case.name}: {place} saved by msprobe without data (null statistics, no file): nothing "
            f"to generate its shard from",
            Reason.SKIP_INPUTS,
        )
    named = case if _alike(spec) else replace(case, name=f"{case.name}@rank{rank}")  # a shard its own stream
    entry = lookup(case.api)
    no_files = Path(".")  # a spec with no file is generated, never read
    builder = (
        InputBuilder(no_files, named.name, seed=seed, force_random=True)
        if entry is None
        else builder_for(entry, named, no_files, seed=seed, force_random=True)
    )
    try:
        return builder.build(spec, place)
    except InputError as e:
        raise CannotGrade(f"rank {rank}: {case.name}: a statistics dump: {e}", e.reason) from None


def _alike(spec: TensorSpec) -> bool:
    """Whether every rank of the call holds this tensor alike: no DTensor, or one replicated on every mesh
    dimension."""
    placements = spec.sharding.placements if spec.sharding is not None else ()
    return all(p.kind == "replicate" for p in placements or ())


def recorded_together(own: TensorSpec, specs: dict[int, TensorSpec], layout: Layout, own_only: bool) -> TensorSpec:
    """A recorded output or gradient of the case ``layout`` makes, its values never generated: the layout's rank's
    own record (``own_only``, or no DTensor), else a record of the whole's shape, its statistics those the
    shards fix exactly (blank past a pending reduction). ``specs``: each rank's record at that place."""
    sharding = own.sharding
    if own_only or sharding is None or sharding.placements is None:
        return replace(own, sharding=None)
    if set(specs) != set(sharding.mesh):
        raise CannotGrade("a rank of its mesh recorded no tensor at one of its places", Reason.SKIP_BAD_RECORD)
    empty = {r: torch.empty(s.shape, dtype=s.dtype, device="meta") for r, s in specs.items()}
    try:
        shape = tuple(put_together(sharding, empty, replace(layout, norm=None)).shape)
    except (RuntimeError, IndexError, ValueError) as e:
        raise CannotGrade(f"shards that do not fit {sharding}: {e}", Reason.SKIP_BAD_RECORD) from None
    return replace(own, shape=shape, stats=_stats_together(own, specs, layout), sharding=None, data_name=None)


def _stats_together(own: TensorSpec, specs: dict[int, TensorSpec], layout: Layout) -> Stats:
    """The statistics of the whole the ranks' pieces make: exact where each piece lies beside the others (a
    ``Shard``), the layout's rank's along a replicated dimension or one ``partial_only`` keeps; blank where the
    pieces are reduced."""
    assert own.sharding is not None and own.sharding.placements is not None, "a known layout"
    coords = coordinates(own.sharding.mesh, own.sharding.shape)
    mine = coords[layout.rank]
    kept = [d for d, p in enumerate(own.sharding.placements) if p.kind not in ("shard", "strided")]
    if any(own.sharding.placements[d].kind == "partial" for d in kept):
        return Stats(None, None, None, None)
    pieces = [specs[r] for r, c in coords.items() if all(c[d] == mine[d] for d in kept)]
    return _joined([p.stats for p in pieces], [p.numel for p in pieces])


def _joined(stats: list[Stats], sizes: list[int]) -> Stats:
    """The statistics of pieces laid side by side; a statistic any piece left blank is blank."""

    def known(values: list) -> bool:
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)

    maxes, mins = [s.max for s in stats], [s.min for s in stats]
    means, norms = [s.mean for s in stats], [s.norm for s in stats]
    total = sum(sizes)
    return Stats(
        max(maxes) if known(maxes) and maxes else None,
        min(mins) if known(mins) and mins else None,
        sum(m * n for m, n in zip(means, sizes)) / total if known(means) and total else None,
        math.sqrt(sum(n * n for n in norms)) if known(norms) and norms else None,
    )
