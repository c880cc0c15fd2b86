"""A DTensor's ``_StridedShard`` placements, which msprobe 26.2 leaves out of its record, rebuilt where they can be.

FSDP2 over tensor parallelism (``fully_shard`` on the data-parallel dimension of a mesh whose later dimension
already shards the weights, as torchtitan runs it) shards a weight twice along one tensor dimension: by the later
mesh dimension first (tensor parallelism), then each rank's piece by the earlier one (FSDP2). DTensor lays that out
as ``_StridedShard(d, split_factor=s)`` on the earlier mesh dimension, ``s`` the number of pieces the later mesh
dimensions cut dimension ``d`` into, and ``Shard(d)`` on the later ones. msprobe writes a placement only when it is
a Shard, a Replicate or a Partial (``placement.is_shard()`` is False for a ``_StridedShard``), so such a record keeps
its mesh and one placement fewer than the mesh has dimensions.

What was kept says where the missing placement can stand: a ``_StridedShard`` splits a tensor dimension that a
later mesh dimension shards again (else DTensor lays it out as a plain ``Shard``), so each missing placement is tried
at every place of the mesh and on every tensor dimension that the placements after it shard, its split factor the
product of those mesh dimensions' sizes. Where exactly one layout fits, it is the one rebuilt (the usual FSDP2 over
TP weight: ``[Shard(0)]`` on a 2-D mesh is ``(_StridedShard(0, split_factor=tp), Shard(0))``); where none or several
fit, the layout stays unknown and the problem says which could be (HSDP over TP's ``[Replicate(), Shard(0)]`` on a
3-D mesh fits the strided shard on either of its first two dimensions): the shards are still graded, the whole
call is not.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from precheck.dump.sharding import Placement

__all__ = ["rebuilt_placements"]


def rebuilt_placements(
    kept: tuple[Placement, ...], sizes: tuple[int, ...], ndim: int | None
) -> tuple[tuple[Placement, ...] | None, str]:
    """The placements of a DTensor whose record kept ``kept`` on a mesh of ``sizes`` (a tensor of ``ndim``
    dimensions, None where unknown), its missing ``_StridedShard`` placements put back, and a line saying what was
    rebuilt; ``(None, why)`` where no layout, or more than one, fits."""
    missing = len(sizes) - len(kept)
    fits = _layouts(kept, sizes, ndim, missing)
    left = f"msprobe left out {missing} of its {len(sizes)} placements (it writes no _StridedShard)"
    if len(fits) == 1:
        (layout,) = fits
        said = ", ".join(f"{p} on mesh dimension {i}" for i, p in enumerate(layout) if p.kind == "strided")
        return layout, f"{left}: rebuilt as {said}, the one layout its other placements and mesh allow"
    if not fits:
        return None, (f"{left}, and no _StridedShard fits: none of its kept placements shards a tensor dimension "
                      f"again after the place of one left out")  # fmt: skip
    shown = " or ".join(f"({', '.join(map(str, f))})" for f in fits[:3])
    more = f" (and {len(fits) - 3} more)" if len(fits) > 3 else ""
    return None, f"{left}, and more than one layout fits: {shown}{more}; precheck does not guess which"


def _layouts(
    kept: tuple[Placement, ...], sizes: tuple[int, ...], ndim: int | None, missing: int
) -> list[tuple[Placement, ...]]:
    """Every layout of ``kept`` with ``missing`` _StridedShard placements put in, each on a tensor dimension the
    placements after it shard again, with that split factor."""
    found: list[tuple[Placement, ...]] = []
    for places in itertools.combinations(range(len(sizes)), missing):
        rest = iter(kept)
        slots = [None if i in places else next(rest) for i in range(len(sizes))]
        choices = [_dims(slots, i, ndim) if s is None else [s] for i, s in enumerate(slots)]
        found.extend(tuple(_split(layout, sizes)) for layout in itertools.product(*choices))
    return found


def _dims(slots: list, at: int, ndim: int | None) -> list[Placement]:
    """The _StridedShard candidates at mesh dimension ``at``: one per tensor dimension a plain Shard after it
    splits (its split factor set by _split)."""
    later = sorted({p.dim for p in slots[at + 1 :] if p is not None and p.kind == "shard"})
    return [Placement("strided", dim=d) for d in later if ndim is None or d < ndim]


def _split(layout: tuple, sizes: tuple[int, ...]) -> list:
    """The layout with each _StridedShard's split factor: the product of the sizes of the mesh dimensions after
    it that shard the same tensor dimension."""
    out = []
    for i, p in enumerate(layout):
        if p.kind == "strided":
            factor = 1
            for j in range(i + 1, len(layout)):
                if layout[j].kind in ("shard", "strided") and layout[j].dim == p.dim:
                    factor *= sizes[j]
            p = replace(p, split_factor=factor)
        out.append(p)
    return out
