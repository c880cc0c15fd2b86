"""MindSpore's APIs in PyTorch's terms: which PyTorch API computes what a recorded MindSpore call computed, with
its arguments translated. The golden of a MindSpore call is this PyTorch call in float64.

mint is MindSpore's PyTorch-shaped API: ``Mint.x`` is ``torch.x`` and ``MintFunctional.x`` is
``torch.nn.functional.x``, argument for argument. MindSpore's ``Tensor`` methods are not: many keep numpy's
conventions beside PyTorch's, so a method is mapped only where its MindSpore 2.10 meaning was checked (the
table below, each departure with a test on a recorded call); any other method, and ``Functional.x``
(mindspore.ops, whose signatures differ throughout), has no equivalent and is a SKIP row saying so. Checked on
MindSpore 2.10:

- ``x.transpose(*axes)`` with every axis (or none) is a permute; with two axes it swaps them, as PyTorch's.
- ``x.std(axis, ddof=0, keepdims)`` / ``x.var``: numpy's ddof 0 is the default, PyTorch's correction is 1.
- ``x.max(axis=, keepdims=)`` / ``x.min`` return the values only (``amax``); ``x.max(dim)`` returns values and
  indices, as PyTorch's.
- ``x.sum(axis, dtype, keepdims)``: a dtype as the second positional argument is numpy's order.
- ``axis`` / ``keep_dims`` / ``keepdims`` are PyTorch's ``dim`` / ``keepdim``; ``expand_dims`` is
  ``unsqueeze``; ``astype`` is ``to`` (msprobe records ``astype`` as ``Tensor.to`` already).

No torch here: the rules read only shapes (``.shape``) and plain values, so they can be asked anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Equivalent", "NoEquivalent", "is_mint", "torch_call"]

_MINT = {"Mint": "Torch", "MintFunctional": "Functional"}


def is_mint(api: str) -> bool:
    """Whether a dump name is one of MindSpore's mint APIs (``Mint.abs``): in a dump read as PyTorch's, the
    dump is MindSpore's and the run wants --framework mindspore."""
    return api.partition(".")[0] in _MINT


@dataclass(frozen=True)
class Equivalent:
    """The PyTorch dump name (``Torch.softmax``) and the arguments that make it compute the recorded call."""

    api: str
    args: tuple
    kwargs: dict


class NoEquivalent(Exception):
    """The recorded MindSpore call has no PyTorch equivalent precheck knows; the message says why."""


def torch_call(api: str, args: tuple, kwargs: dict) -> Equivalent:
    """The PyTorch call that computes the MindSpore call ``api(*args, **kwargs)``; NoEquivalent says why none."""
    prefix, _, name = api.partition(".")
    if prefix in _MINT and name:
        return Equivalent(f"{_MINT[prefix]}.{name}", args, kwargs)
    if prefix == "Tensor" and not args:
        raise NoEquivalent(f"Tensor.{name} recorded without the tensor it was called on")
    if prefix == "Tensor" and name in _SAME_METHODS:
        return Equivalent(api, args, kwargs)
    if prefix == "Tensor" and name in _METHOD_RULES:
        return _METHOD_RULES[name](args, dict(kwargs))
    if prefix == "Tensor":
        raise NoEquivalent(
            f"MindSpore's Tensor.{name}: no PyTorch equivalent in precheck's MindSpore mapping (its MindSpore "
            "meaning is not checked against torch.Tensor's)"
        )
    if prefix == "Functional":
        raise NoEquivalent(f"MindSpore's ops.{name} (Functional.{name}): no PyTorch equivalent mapped")
    raise NoEquivalent(f"MindSpore API {api}: no PyTorch equivalent (precheck maps Mint, MintFunctional, Tensor)")


# Methods whose MindSpore 2.10 overload with these arguments is PyTorch's.
_SAME_METHODS = frozenset(
    """__add__ __radd__ __iadd__ __sub__ __rsub__ __isub__ __mul__ __rmul__ __imul__ __truediv__ __rtruediv__
    __itruediv__ __floordiv__ __rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __neg__ __abs__ __matmul__
    __rmatmul__ __getitem__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ __and__ __or__ __xor__ __invert__
    to reshape view permute unsqueeze flatten expand tile swapaxes matmul exp log sqrt rsqrt abs neg sigmoid tanh
    pow add sub mul div clamp float half double int long bool contiguous t chunk split masked_fill""".split()
)


def _kwargs_renamed(kwargs: dict) -> dict:
    """numpy's argument names as PyTorch's."""
    names = {"axis": "dim", "keep_dims": "keepdim", "keepdims": "keepdim"}
    return {names.get(k, k): v for k, v in kwargs.items()}


def _renamed(torch_name: str, refused: tuple[str, ...] = ()) -> Callable[[tuple, dict], Equivalent]:
    """A method whose positional arguments are PyTorch's and whose keywords may be numpy's."""

    def rule(args: tuple, kwargs: dict) -> Equivalent:
        _refuse(torch_name, kwargs, refused)
        return Equivalent(f"Tensor.{torch_name}", args, _kwargs_renamed(kwargs))

    return rule


def _refuse(name: str, kwargs: dict, refused: tuple[str, ...]) -> None:
    for key in refused:
        if kwargs.get(key) is not None:
            raise NoEquivalent(f"MindSpore's Tensor.{name}({key}=...) has no PyTorch argument")


def _transpose(args: tuple, kwargs: dict) -> Equivalent:
    """Every axis (or none: reversed) is a permute; two axes are swapped, as in PyTorch."""
    if kwargs:
        raise NoEquivalent(f"MindSpore's Tensor.transpose with keywords {sorted(kwargs)}: not mapped")
    x, axes = args[0], args[1:]
    if len(axes) == 1 and isinstance(axes[0], tuple):
        axes = axes[0]
    rank = len(getattr(x, "shape", ()))
    if len(axes) == 2 and rank != 2:
        return Equivalent("Tensor.transpose", (x, *axes), {})
    return Equivalent("Tensor.permute", (x, *(axes or tuple(range(rank - 1, -1, -1)))), {})


def _deviation(name: str) -> Callable[[tuple, dict], Equivalent]:
    """std / var: MindSpore's positional order is (axis, ddof, keepdims) and its default ddof 0."""

    def rule(args: tuple, kwargs: dict) -> Equivalent:
        x, rest = args[0], args[1:]
        for key, value in zip(("axis", "ddof", "keepdims"), rest):
            kwargs[key] = value
        kwargs = _kwargs_renamed(kwargs)
        if "correction" not in kwargs and "unbiased" not in kwargs:
            kwargs["correction"] = kwargs.pop("ddof", 0)
        return Equivalent(f"Tensor.{name}", (x,), kwargs)

    return rule


def _extreme(name: str) -> Callable[[tuple, dict], Equivalent]:
    """max / min with numpy's ``axis`` keyword return the values only: ``amax`` / ``amin``."""

    def rule(args: tuple, kwargs: dict) -> Equivalent:
        _refuse(name, kwargs, ("initial", "where"))
        if "axis" not in kwargs:
            return Equivalent(f"Tensor.{name}", args, _kwargs_renamed(kwargs))
        return Equivalent(f"Tensor.a{name}", args, _kwargs_renamed(kwargs))

    return rule


def _sum(args: tuple, kwargs: dict) -> Equivalent:
    """numpy's positional order (axis, dtype, keepdims) when a dtype comes second, else PyTorch's."""
    _refuse("sum", kwargs, ("initial",))
    if len(args) > 2 and args[2] is not None and not isinstance(args[2], (bool, int)):
        for key, value in zip(("axis", "dtype", "keepdims"), args[1:]):
            kwargs[key] = value
        args = args[:1]
    return Equivalent("Tensor.sum", args, _kwargs_renamed(kwargs))


_METHOD_RULES: dict[str, Callable[[tuple, dict], Equivalent]] = {
    "transpose": _transpose,
    "std": _deviation("std"),
    "var": _deviation("var"),
    "max": _extreme("max"),
    "min": _extreme("min"),
    "sum": _sum,
    "mean": _renamed("mean"),
    "prod": _renamed("prod"),
    "argmax": _renamed("argmax"),
    "argmin": _renamed("argmin"),
    "all": _renamed("all"),
    "any": _renamed("any"),
    "squeeze": _renamed("squeeze"),
    "expand_dims": _renamed("unsqueeze"),
    "astype": _renamed("to"),
}
