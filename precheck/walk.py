"""The one walk over nested arguments and outputs: decoded argument trees (tuples and dicts of TensorSpecs and
plain values), the tensors rebuilt from them, and an API's outputs (tuples, lists, dicts, return types).

Built on torch's pytree, with one rule every stage shares: ``None`` and ``torch.Size`` are leaves (an output that
is None is still an output, and a Size is a value, not a sequence of outputs). Leaves come depth first in
argument order: positional before keyword, dict values in their order.

torch before 2.2 has neither key paths nor ``is_leaf`` in its pytree (and counts a Size as a node there): on it
the walk follows pytree's own node table, so that every torch sees the same leaves at the same places.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from precheck.core.older_python import zip_strict

__all__ = ["flatten", "map_placed", "placed"]

_KEY_PATHS = hasattr(pytree, "tree_flatten_with_path")  # and is_leaf with it


def _is_leaf(value: Any) -> bool:
    return value is None or isinstance(value, torch.Size)


def _part(key: Any) -> str:
    """One step of a key path as a place spells it: ``[1]`` for a sequence, ``.name`` for a mapping or a field."""
    if hasattr(key, "idx"):
        return f"[{key.idx}]"
    return f".{key.key if hasattr(key, 'key') else key.name}"


def _node_parts(tree: Any, context: Any, count: int) -> list[str]:
    """The places of a node's children on a pytree without key paths: keys for a dict, fields for a named tuple."""
    if isinstance(tree, dict):
        return [f".{key}" for key in context]
    fields = getattr(type(tree), "_fields", None)
    if fields is not None and len(fields) == count:
        return [f".{field}" for field in fields]
    return [f"[{i}]" for i in range(count)]


def _walk_nodes(tree: Any, place: str) -> tuple[list[tuple[str, Any]], Any]:
    """tree_flatten_with_path for a pytree that has none: (place, leaf) pairs and the TreeSpec to rebuild it."""
    if _is_leaf(tree) or pytree._is_leaf(tree):
        return [(place, tree)], pytree.LeafSpec()
    node_type = pytree._get_node_type(tree)
    children, context = pytree.SUPPORTED_NODES[node_type].flatten_fn(tree)
    pairs: list[tuple[str, Any]] = []
    specs = []
    for part, child in zip_strict(_node_parts(tree, context, len(children)), children):
        child_pairs, spec = _walk_nodes(child, place + part)
        pairs += child_pairs
        specs.append(spec)
    return pairs, pytree.TreeSpec(node_type, context, specs)


def _placed_leaves(tree: Any, root: str) -> tuple[list[tuple[str, Any]], Any]:
    if not _KEY_PATHS:
        return _walk_nodes(tree, root)
    pairs, spec = pytree.tree_flatten_with_path(tree, is_leaf=_is_leaf)
    return [(root + "".join(map(_part, path)), leaf) for path, leaf in pairs], spec


def flatten(tree: Any) -> list[Any]:
    """The leaves of ``tree`` in order."""
    if not _KEY_PATHS:
        return [leaf for _, leaf in _walk_nodes(tree, "")[0]]
    return pytree.tree_leaves(tree, is_leaf=_is_leaf)


def placed(tree: Any, root: str = "") -> list[tuple[str, Any]]:
    """(place, leaf) for every leaf of ``tree``, its place spelled from ``root`` (``input_args[1]``,
    ``input_kwargs.target``: as messages and file names say it)."""
    return _placed_leaves(tree, root)[0]


def map_placed(tree: Any, fn: Callable[[Any, str], Any], root: str = "") -> Any:
    """``tree`` with each leaf replaced by ``fn(leaf, place)``, its structure kept."""
    pairs, spec = _placed_leaves(tree, root)
    return pytree.tree_unflatten([fn(leaf, place) for place, leaf in pairs], spec)
