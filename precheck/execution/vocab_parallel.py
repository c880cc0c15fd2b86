"""DTensor's two vocab-parallel calls, whose kernels did not run on what one rank recorded as it stands.

A vocab-parallel embedding (torchtitan's ``RowwiseParallel(input_layouts=Replicate())`` on ``nn.Embedding``): the
weight's rows are ``Shard(0)``, the ids ``Replicate``. DTensor's ``_MaskPartial`` gives each rank's kernel the ids
shifted to its rows, those outside them set to 0, and its output is ``_MaskPartial`` too: the rows of the ids
outside the shard are zeroed when it is reduced, not before. msprobe writes that placement as ``Partial(sum)`` and
saves the ids as the program passed them and the local output before masking (a row outside the shard holds the
shard's row 0). A rank's kernel is replayed on its ids so masked; the whole output is the sum of the ranks' outputs
with those rows zeroed.

A loss-parallel cross-entropy (``loss_parallel()``, its logits ``Shard`` on the class dimension): DTensor computes
the log-softmax and the loss across the ranks' shards, and its ``nll_loss`` backward returns the gradient of the
logits (the log-softmax backward passes it through), so the gradient msprobe's hook saves at ``NllLossBackward0``
is the logits' own, not the log-softmax output's as for a plain ``cross_entropy``. It has no kernel of one rank.
"""

from __future__ import annotations

from typing import Any

import torch

from precheck.dump.sharding import Sharding
from precheck.execution.shards import coordinates

__all__ = ["embedding_rows", "ids_in_shard", "is_loss_parallel", "is_masked_embedding", "rows_outside_zeroed"]

_EMBEDDINGS = frozenset({"Functional.embedding", "Torch.embedding"})
_CROSS_ENTROPIES = frozenset({"Functional.cross_entropy"})


def _sharding(leaf: Any) -> Sharding | None:
    sharding = getattr(leaf, "sharding", None)
    return sharding if sharding is not None and sharding.placements is not None else None


def _embedding_args(case: Any) -> tuple[Any, Any]:
    """The recorded ids and weight of an embedding call (F.embedding(input, weight); torch.embedding(weight,
    input))."""
    args, kwargs = case.args, case.kwargs
    first, second = ("weight", "input") if case.api == "Torch.embedding" else ("input", "weight")
    got = [args[i] if len(args) > i else kwargs.get(k) for i, k in enumerate((first, second))]
    return (got[1], got[0]) if case.api == "Torch.embedding" else (got[0], got[1])


def is_masked_embedding(case: Any) -> bool:
    """Whether ``case`` is a vocab-parallel embedding: its weight ``Shard(0)`` and its output ``Partial`` along
    the same mesh dimension (DTensor's ``_MaskPartial``), its ids replicated there."""
    if case.api not in _EMBEDDINGS or len(case.outputs) != 1:
        return False
    ids, weight = _embedding_args(case)
    out, laid, along = _sharding(case.outputs[0]), _sharding(ids), _shard0_dim(_sharding(weight))
    if out is None or laid is None or along is None or len(out.placements) != len(laid.placements):
        return False
    return out.placements[along].kind == "partial" and laid.placements[along].kind == "replicate"


def _shard0_dim(sharding: Sharding | None) -> int | None:
    """The mesh dimension along which the weight's rows are split; None where they are not, or on several."""
    if sharding is None:
        return None
    dims = [d for d, p in enumerate(sharding.placements) if p.kind == "shard" and p.dim == 0]
    return dims[0] if len(dims) == 1 else None


def embedding_rows(case: Any, weights: dict[int, tuple[int, ...]]) -> dict[int, tuple[int, int]]:
    """Each rank's first weight row and row count, from the shapes of the ranks' weight shards (``weights``, by
    rank): the shards before a rank along the split mesh dimension (the others alike) hold the rows before it."""
    sharding = _sharding(_embedding_args(case)[1])
    assert sharding is not None, "a masked embedding"
    along = _shard0_dim(sharding)
    coords = coordinates(sharding.mesh, sharding.shape)
    out = {}
    for r, coord in coords.items():
        before = [
            q
            for q, c in coords.items()
            if c[along] < coord[along] and c[:along] + c[along + 1 :] == coord[:along] + coord[along + 1 :]
        ]
        out[r] = (sum(weights[q][0] for q in before), weights[r][0])
    return out


def ids_in_shard(ids: torch.Tensor, first: int, rows: int) -> torch.Tensor:
    """The ids a rank's kernel ran on: shifted to its rows, those outside them 0 (``_MaskPartial``'s partition)."""
    outside = (ids < first) | (ids >= first + rows)
    shifted = ids - first
    shifted[outside] = 0
    return shifted


def rows_outside_zeroed(output: torch.Tensor, ids: torch.Tensor, first: int, rows: int) -> torch.Tensor:
    """A rank's embedding output as it enters the sum: the rows of its ids outside its shard zeroed
    (``_MaskPartial``'s reduction)."""
    outside = (ids < first) | (ids >= first + rows)
    return output.masked_fill(outside.unsqueeze(-1), 0)


def is_loss_parallel(case: Any) -> bool:
    """Whether ``case`` is a cross-entropy DTensor ran under ``loss_parallel()``: its logits ``Shard`` on the class
    dimension (dimension 1, or 0 for one sample's logits), as ``loss_parallel`` requires."""
    if case.api not in _CROSS_ENTROPIES or not case.args:
        return False
    logits = case.args[0]
    sharding = _sharding(logits)
    if sharding is None:
        return False
    classes = 1 if len(logits.shape) >= 2 else 0
    return any(p.kind == "shard" and p.dim in (classes, classes - len(logits.shape)) for p in sharding.placements)
