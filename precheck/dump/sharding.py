"""How a DTensor argument was laid out across ranks, as msprobe records it (``device_mesh``, ``placements``).

msprobe writes a DTensor argument as ``"type": "torch.distributed.tensor.DTensor"`` with the statistics and file of
its local shard, the ranks of its device mesh (``mesh.tolist()``: nested lists, one level per mesh dimension) and
one placement per mesh dimension: ``{"Shard": {"dim": d}}``, ``{"Replicate": {}}``, ``{"Partial": {"reduce_op":
"sum"}}``. The local shard is what a rank's kernel ran on; the placements say how the shards make the whole tensor
(precheck.ranks.whole_calls puts them together). A placement msprobe could not write it leaves out: a
``_StridedShard`` (FSDP2 over tensor parallelism) is rebuilt from the mesh and the placements kept where one layout
alone fits (rebuilt_placements, below); otherwise the layout is unknown: the local shard is still graded, the
whole call is not, and its row says why.

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
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["DTENSOR_TYPES", "UNSAVED_TYPES", "Placement", "Sharding", "decode_sharding", "rebuilt_placements"]

DTENSOR_TYPES = frozenset({"torch.distributed.tensor.DTensor", "torch.distributed._tensor.api.DTensor"})
# tensors msprobe records without data (null statistics, no file): nothing to rebuild them from
UNSAVED_TYPES = frozenset({"torch.distributed._functional_collectives.AsyncCollectiveTensor"})
_REDUCE_OPS = frozenset({"sum", "avg", "max", "min"})


@dataclass(frozen=True)
class Placement:
    """One mesh dimension's placement: ``shard`` along ``dim``, ``replicate``, ``partial`` values still to
    reduce by ``reduce_op``, or ``strided`` (DTensor's ``_StridedShard``: ``dim`` cut into ``split_factor``
    pieces, each rank holding its chunk of every piece; rebuilt, as msprobe does not write it)."""

    kind: str  # "shard", "replicate", "partial", "strided"
    dim: int = 0  # shard, strided: the tensor dimension split
    reduce_op: str = "sum"  # partial: how the ranks' values make the whole
    split_factor: int = 1  # strided: the pieces ``dim`` is cut into before each is sharded

    def __str__(self) -> str:
        return {
            "shard": f"Shard({self.dim})",
            "replicate": "Replicate()",
            "strided": f"_StridedShard({self.dim}, split_factor={self.split_factor})",
        }.get(self.kind, f"Partial({self.reduce_op})")


@dataclass(frozen=True)
class Sharding:
    """A DTensor's layout: the mesh's ranks (row-major, ``shape`` its dimensions) and a placement per dimension;
    ``placements`` None when the layout is unknown (msprobe left a placement out that cannot be rebuilt, wrote one
    precheck does not know, or a mesh that is no grid of ranks), ``problem`` saying why: the shard is still graded,
    the whole call is not. ``rebuilt`` says which placements precheck put back (rebuilt_placements)."""

    mesh: tuple[int, ...]
    shape: tuple[int, ...]
    placements: tuple[Placement, ...] | None
    problem: str = ""
    rebuilt: str = ""

    def __str__(self) -> str:
        laid = "unknown placements" if self.placements is None else ", ".join(map(str, self.placements))
        return f"[{laid}] on ranks {list(self.mesh)}"


def decode_sharding(raw: dict, where: str) -> Sharding:
    """The layout of the recorded DTensor ``raw``; one that cannot be read says why in its ``problem``."""
    try:
        mesh, shape = _mesh(raw.get("device_mesh"))
    except ValueError as e:
        return Sharding((), (), None, f"{where}: {e}")
    placements = raw.get("placements")
    decoded = tuple(_placement(p) for p in placements) if isinstance(placements, list) else ()
    shown = str(placements) if len(str(placements)) <= 120 else f"{str(placements)[:120]}..."
    if None in decoded or len(decoded) > len(shape) or not isinstance(placements, list):
        why = f"{where}: placements {shown} are not one per mesh dimension of Shard, Replicate or Partial"
        return Sharding(mesh, shape, None, why)
    if len(decoded) < len(shape):  # msprobe left placements out: the _StridedShard it does not write
        ndim = len(raw["shape"]) if isinstance(raw.get("shape"), list) else None
        layout, said = rebuilt_placements(decoded, shape, ndim)  # type: ignore[arg-type]
        if layout is None:
            return Sharding(
                mesh, shape, None, f"{where}: placements {shown} on a mesh of {len(shape)} dimensions: {said}"
            )
        return Sharding(mesh, shape, layout, rebuilt=f"{where}: {said}")
    return Sharding(mesh, shape, decoded)  # type: ignore[arg-type]


def _mesh(raw: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The mesh's ranks, flattened row-major, and its shape; ValueError for a mesh that is no grid of ranks."""
    shape: list[int] = []
    level = raw
    while isinstance(level, list) and level:
        shape.append(len(level))
        level = level[0]
    flat: list[Any] = raw if isinstance(raw, list) else [raw]
    for _ in range(len(shape) - 1):
        flat = [x for row in flat for x in (row if isinstance(row, list) else [row])]
    if not shape or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in flat):
        raise ValueError("a DTensor's device_mesh is not a list of ranks")
    if len(flat) != _product(shape) or len(set(flat)) != len(flat):
        raise ValueError("a DTensor's device_mesh is not a grid of distinct ranks")
    return tuple(flat), tuple(shape)


def _product(shape: list[int]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def _placement(raw: Any) -> Placement | None:
    """A placement; None for one of another shape (its DTensor's layout is unknown, its shard still graded)."""
    if not isinstance(raw, dict) or len(raw) != 1:
        return None
    ((kind, fields),) = raw.items()
    fields = fields if isinstance(fields, dict) else {}
    if kind == "Shard" and isinstance(fields.get("dim"), int) and not isinstance(fields.get("dim"), bool):
        return Placement("shard", dim=fields["dim"])
    if kind == "Replicate":
        return Placement("replicate")
    if kind == "Partial" and fields.get("reduce_op") in _REDUCE_OPS:
        return Placement("partial", reduce_op=fields["reduce_op"])
    return None


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
