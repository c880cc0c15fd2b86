"""The one walk over nested arguments and outputs: decoded argument trees (tuples and dicts of TensorSpecs and
plain values), the tensors rebuilt from them, and an API's outputs (tuples, lists, dicts, return types).

Built on torch's pytree, with one rule every stage shares: ``None`` and ``torch.Size`` are leaves (an output that
is None is still an output, and a Size is a value, not a sequence of outputs). Leaves come depth first in
argument order: positional before keyword, dict values in their order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

__all__ = ["flatten", "map_placed", "placed"]


def _is_leaf(value: Any) -> bool:
    return value is None or isinstance(value, torch.Size)


def flatten(tree: Any) -> list[Any]:
    """The leaves of ``tree`` in order."""
    return pytree.tree_leaves(tree, is_leaf=_is_leaf)


def _place(root: str, path: tuple) -> str:
    """``input_args[1]``, ``input_kwargs.target``: where a leaf sits, as messages and file names say it."""
    parts = [f"[{key.idx}]" if isinstance(key, pytree.SequenceKey) else f".{key.key}" for key in path]
    return root + "".join(parts)


def placed(tree: Any, root: str = "") -> list[tuple[str, Any]]:
    """(place, leaf) for every leaf of ``tree``, its place spelled from ``root``."""
    pairs, _ = pytree.tree_flatten_with_path(tree, is_leaf=_is_leaf)
    return [(_place(root, path), leaf) for path, leaf in pairs]


def map_placed(tree: Any, fn: Callable[[Any, str], Any], root: str = "") -> Any:
    """``tree`` with each leaf replaced by ``fn(leaf, place)``, its structure kept."""
    pairs, spec = pytree.tree_flatten_with_path(tree, is_leaf=_is_leaf)
    return pytree.tree_unflatten([fn(leaf, _place(root, path)) for path, leaf in pairs], spec)
