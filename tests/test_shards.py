"""precheck.execution.shards: a DTensor's shards put together by their placements, on meshes of one and two
dimensions, as DTensor lays them out (Shard by torch.chunk, mesh dimension 0 first)."""

import math

import pytest
import torch

from precheck.core.older_python import zip_strict
from precheck.dump.sharding import Placement, Sharding
from precheck.execution.shards import Layout, put_together, replicas_apart

SHARD0, SHARD1, REPLICATE = Placement("shard", dim=0), Placement("shard", dim=1), Placement("replicate")
PARTIAL = Placement("partial", reduce_op="sum")
SPLIT = (0.25, 0.75)  # how a Partial(sum) value is split between the two ranks of a mesh dimension


def _local(whole: torch.Tensor, placements: tuple, coord: tuple) -> torch.Tensor:
    """Rank ``coord``'s shard, as DTensor computes it: mesh dimension 0's placement first, then the next."""
    t = whole
    for placement, c in zip_strict(placements, coord):
        if placement.kind == "shard":
            t = t.chunk(2, placement.dim)[c]
        elif placement.kind == "partial":
            t = t * SPLIT[c]
    return t


def _shards(whole: torch.Tensor, placements: tuple, shape: tuple) -> dict[int, torch.Tensor]:
    coords = [(i,) for i in range(shape[0])] if len(shape) == 1 else [(i, j) for i in range(2) for j in range(2)]
    return {rank: _local(whole, placements, coord) for rank, coord in enumerate(coords)}


@pytest.mark.parametrize(
    "placements",
    [(SHARD0, SHARD1), (SHARD0, SHARD0), (REPLICATE, SHARD1), (PARTIAL, SHARD0), (SHARD1, PARTIAL), (PARTIAL, PARTIAL)],
)
def test_a_two_dimensional_meshs_shards_make_the_whole_tensor(placements):
    whole = torch.arange(35.0).reshape(7, 5) / 7  # uneven: 7 rows into 2 and 2 again
    sharding = Sharding((0, 1, 2, 3), (2, 2), placements)
    together = put_together(sharding, _shards(whole, placements, (2, 2)), Layout(0))
    torch.testing.assert_close(together, whole, rtol=1e-6, atol=1e-6)
    assert together.dtype == whole.dtype


def test_a_mesh_of_other_rank_numbers_is_laid_out_row_major():
    whole = torch.arange(12.0).reshape(4, 3)
    shards = _shards(whole, (SHARD0, SHARD1), (2, 2))
    renumbered = dict(zip_strict((4, 6, 5, 7), shards.values()))
    together = put_together(Sharding((4, 6, 5, 7), (2, 2), (SHARD0, SHARD1)), renumbered, Layout(4))
    assert torch.equal(together, whole)


def test_a_norms_partial_is_the_norm_of_the_ranks_norms_and_a_signed_one_a_sum():
    pieces = torch.tensor([3.0, 1.0, 2.0, 5.0]).chunk(2)
    norms = {r: torch.linalg.vector_norm(p) for r, p in enumerate(pieces)}
    sharding = Sharding((0, 1), (2,), (PARTIAL,))
    together = put_together(sharding, norms, Layout(0, norm=2.0))
    assert math.isclose(together.item(), math.sqrt(9 + 1 + 4 + 25), rel_tol=1e-6)
    signed = {0: torch.tensor(-1.0), 1: torch.tensor(3.0)}  # no norm holds a negative value: a plain sum
    assert put_together(sharding, signed, Layout(0, norm=2.0)).item() == 2.0


def test_partial_only_reduces_the_pending_sums_and_keeps_the_ranks_own_shard():
    whole = torch.arange(8.0).reshape(4, 2)
    placements = (SHARD0, PARTIAL)
    shards = _shards(whole, placements, (2, 2))
    mine = put_together(Sharding((0, 1, 2, 3), (2, 2), placements), shards, Layout(2, partial_only=True))
    assert torch.equal(mine, whole.chunk(2, 0)[1])  # rank 2 is mesh coordinate (1, 0): the second row block


def test_replicas_that_differ_name_the_rank_and_the_largest_difference():
    sharding = Sharding((0, 1, 2, 3), (2, 2), (REPLICATE, SHARD0))
    shards = _shards(torch.arange(4.0), (REPLICATE, SHARD0), (2, 2))
    assert replicas_apart(sharding, shards) is None
    shards[3] = shards[3] + torch.tensor([0.0, 0.5])  # rank 3, coordinate (1, 1): rank 1's replica
    assert replicas_apart(sharding, shards) == (3, 0.5)
    shards[2] = torch.tensor([float("nan"), 1.0])
    assert replicas_apart(sharding, shards) == (2, math.inf)
