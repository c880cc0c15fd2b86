"""The ranks' shards of one DTensor put together by their placements (precheck.dump.sharding), in float64.

A device mesh is a grid of ranks, one placement per grid dimension. Its dimensions are undone from the last to the
first (DTensor shards a tensor by the first mesh dimension, then each piece by the next): along each one, the
ranks that differ only there give their pieces to one, by the placement: ``Shard(d)`` concatenates along ``d``,
``_StridedShard(d, split_factor=s)`` cuts each rank's piece into ``s`` along ``d`` and concatenates the ranks'
``i``-th cuts for each ``i`` in turn (each rank held its chunk of each of ``s`` pieces), ``Replicate`` keeps the
first rank's, ``Partial(op)`` reduces by ``op``. The result is cast back to the recorded
dtype: the whole tensor as the ranks held it once redistributed.

A norm's ``Partial`` is DTensor's ``_NormPartial``: each rank holds the norm of its shard, and the whole is the norm
of the ranks' norms. msprobe writes it as ``Partial(sum)`` (its ``reduce_op``), the norm's order lost; a norm
call's ``Partial(sum)`` argument that holds no negative value is taken for one, of the call's own order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from precheck.dump.sharding import Placement, Sharding
from precheck.walk import flatten

__all__ = ["Layout", "coordinates", "put_together", "reduced_before_kernel", "replicas_apart"]

_REDUCE: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sum": lambda x: x.sum(0),
    "avg": lambda x: x.mean(0),
    "max": lambda x: x.amax(0),
    "min": lambda x: x.amin(0),
}


@dataclass(frozen=True)
class Layout:
    """How to undo one argument's layout: ``partial_only`` undoes its pending reductions only and keeps the shard
    of the mesh coordinates of ``rank`` elsewhere (what a rank's kernel got once DTensor redistributed a Partial
    input); ``norm`` the order of a norm call's ``_NormPartial`` (None: not a norm call)."""

    rank: int
    partial_only: bool = False
    norm: float | None = None


def put_together(sharding: Sharding, shards: dict[int, torch.Tensor], layout: Layout) -> torch.Tensor:
    """The tensor of the ranks' ``shards`` (by rank, every rank of the mesh) laid out by ``sharding``."""
    assert sharding.placements is not None, "a known layout"
    dtype = shards[sharding.mesh[0]].dtype
    coords = coordinates(sharding.mesh, sharding.shape)
    pieces = {coords[r]: _wide(t) for r, t in shards.items()}
    norm = layout.norm if layout.norm is not None and all(bool((t >= 0).all()) for t in pieces.values()) else None
    mine = coords[layout.rank]
    for dim in reversed(range(len(sharding.shape))):
        placement = sharding.placements[dim]
        keep_own = layout.partial_only and placement.kind != "partial"
        groups: dict[tuple, list] = {}
        for coord in sorted(pieces):
            if keep_own and coord[dim] != mine[dim]:
                continue
            groups.setdefault(coord[:dim] + coord[dim + 1 :], []).append(pieces[coord])
        pieces = {key[:dim] + (0,) + key[dim:]: _combine(placement, group, norm) for key, group in groups.items()}
    (whole,) = pieces.values()
    return whole.to(dtype)


def replicas_apart(sharding: Sharding, shards: dict[int, torch.Tensor]) -> tuple[int, float] | None:
    """The rank whose replica differs most from the first rank's along the ``Replicate`` mesh dimensions, and by
    how much (largest absolute difference, inf where a NaN or inf stands against a number); None where every
    replica is the same. DTensor's ranks hold the same values there: a difference is a rank gone its own way."""
    assert sharding.placements is not None, "a known layout"
    coords = coordinates(sharding.mesh, sharding.shape)
    at = {coord: r for r, coord in coords.items()}
    replicated = [d for d, p in enumerate(sharding.placements) if p.kind == "replicate"]
    worst: tuple[int, float] | None = None
    for r, t in shards.items():
        first = at[tuple(0 if d in replicated else c for d, c in enumerate(coords[r]))]
        other = shards[first]
        if first == r or t.shape != other.shape or torch.equal(t, other):
            continue
        same = torch.isclose(_wide(t), _wide(other), rtol=0, atol=0, equal_nan=True)
        if bool(same.all()):
            continue
        gap = (_wide(t) - _wide(other)).abs()[~same].nan_to_num(nan=math.inf).max().item()
        if worst is None or gap > worst[1]:
            worst = (r, gap)
    return worst


def reduced_before_kernel(inputs: Any, outputs: Any) -> bool:
    """Whether DTensor reduced a ``Partial`` input across the ranks before the kernel ran (an input is Partial, an
    output is a DTensor that is not): the kernel's inputs are then in no one rank's record."""

    def partial(tree: Any) -> list[bool]:
        shardings = [leaf.sharding for leaf in flatten(tree) if getattr(leaf, "sharding", None) is not None]
        return [any(p.kind == "partial" for p in s.placements or ()) for s in shardings]

    found = partial(outputs)
    return any(partial(inputs)) and bool(found) and not all(found)


def coordinates(mesh: tuple[int, ...], shape: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """Each rank's place in the mesh's grid (row-major)."""
    out = {}
    for i, rank in enumerate(mesh):
        coord, rest = [], i
        for size in reversed(shape):
            coord.append(rest % size)
            rest //= size
        out[rank] = tuple(reversed(coord))
    return out


def _wide(t: torch.Tensor) -> torch.Tensor:
    if t.is_complex():
        return t.to(torch.complex128)
    return t.to(torch.float64) if t.is_floating_point() else t


def _combine(placement: Placement, group: list[torch.Tensor], norm: float | None) -> torch.Tensor:
    if placement.kind == "shard":
        return torch.cat(group, dim=placement.dim)
    if placement.kind == "strided":
        return _strided(group, placement.dim, placement.split_factor)
    if placement.kind == "replicate":
        return group[0]
    stacked = torch.stack(group)
    if norm is not None and placement.reduce_op == "sum" and math.isfinite(norm) and norm > 0:
        return stacked.abs().pow(norm).sum(0).pow(1 / norm)
    return _REDUCE[placement.reduce_op](stacked)


def _strided(group: list[torch.Tensor], dim: int, split: int) -> torch.Tensor:
    """The ranks' ``_StridedShard(dim, split_factor=split)`` pieces put together: each holds its chunk of each of
    ``split`` equal pieces of the whole; ValueError where a rank's piece does not cut into ``split`` equal ones
    (DTensor's uneven strided layouts are not rebuilt)."""
    if any(t.shape[dim] % split for t in group):
        raise ValueError(f"a shard of {[t.shape[dim] for t in group]} along {dim} does not cut into {split} pieces")
    cuts = [t.chunk(split, dim=dim) for t in group]
    return torch.cat([cut[i] for i in range(split) for cut in cuts], dim=dim)
