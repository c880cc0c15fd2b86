"""The catalogue of APIs precheck can run, keyed by their msprobe dump name (``Functional.linear``).

The table is built once per process from the candidate names of ``catalogue.py`` and what the installed torch
provides. A dump name that is not in the table is not supported: it is never turned into an attribute lookup.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F

from api_registry import catalogue, testing

RandomCheck = Callable[[tuple, dict], "str | None"]


@dataclass(frozen=True)
class ApiEntry:
    """How to run one API and what the grader needs to know about it."""

    name: str
    func: Callable[..., Any]
    standard: str
    inplace: bool = False
    # Returns a reason when this particular call draws random numbers (dropout only does when training).
    randomness: RandomCheck | None = None
    # Runs the golden side instead of ``func`` where ``func`` itself would round (``Tensor.half`` and friends).
    golden: Callable[..., Any] | None = None
    # Integer arguments whose negative Min is a sentinel, not a range (argument place -> lowest valid value):
    # generated cross-entropy targets are class ids or ignore_index, never -5.
    int_floors: dict[str, int] = field(default_factory=dict)

    def random_reason(self, args: tuple, kwargs: dict) -> str | None:
        return self.randomness(args, kwargs) if self.randomness else None


def _arg(args: tuple, kwargs: dict, pos: int, name: str, default: Any) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[pos] if len(args) > pos else default


def _dropout(p_pos: int, p_name: str, p_default: float, train_pos: int | None, train_name: str,
             train_default: bool) -> RandomCheck:
    """A call is random when its probability is above zero and it runs in training mode."""
    def check(args: tuple, kwargs: dict) -> str | None:
        p = _arg(args, kwargs, p_pos, p_name, p_default)
        training = kwargs.get(train_name, train_default) if train_pos is None else \
            _arg(args, kwargs, train_pos, train_name, train_default)
        if isinstance(p, (int, float)) and p > 0 and training:
            return f"random op: {p_name}={p} in training mode, outputs are random draws"
        return None
    return check


def _always(args: tuple, kwargs: dict) -> str:
    return "random op: outputs are random draws"


def _rrelu(args: tuple, kwargs: dict) -> str | None:
    return "random op: rrelu in training mode draws its slopes" if _arg(args, kwargs, 3, "training", False) \
        else None


_F_DROPOUT = _dropout(1, "p", 0.5, 2, "training", True)
_RANDOM = {
    "Functional.dropout": _F_DROPOUT, "Functional.dropout1d": _F_DROPOUT, "Functional.dropout2d": _F_DROPOUT,
    "Functional.dropout3d": _F_DROPOUT, "Functional.alpha_dropout": _dropout(1, "p", 0.5, 2, "training", False),
    "Functional.feature_alpha_dropout": _dropout(1, "p", 0.5, 2, "training", False),
    "Functional.scaled_dot_product_attention": _dropout(4, "dropout_p", 0.0, None, "training", True),
    "Functional.rrelu": _rrelu, "Functional.rrelu_": _rrelu,
    "Torch.dropout": _dropout(1, "p", 0.5, 2, "train", True),
    "Torch.feature_dropout": _dropout(1, "p", 0.5, 2, "train", True),
    "Torch.alpha_dropout": _dropout(1, "p", 0.5, 2, "train", True),
}
_ALWAYS_RANDOM = {
    "Functional.gumbel_softmax", "Functional.fractional_max_pool2d", "Functional.fractional_max_pool3d",
    *(f"Torch.{n}" for n in "rand rand_like randn randn_like randint randint_like randperm bernoulli normal "
      "multinomial poisson".split()),
    *(f"Tensor.{n}" for n in "bernoulli bernoulli_ normal_ uniform_ exponential_ random_ cauchy_ log_normal_ "
      "geometric_ multinomial".split()),
}


def _raise_to_double(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """Golden of a down-cast: keep float64, the point of the golden is never to round."""
    return self.double() if self.is_floating_point() else self


_TARGET_IS_CLASS_ID = {"input_args[1]": 0, "input_kwargs.target": 0}
_INT_FLOORS = {"Functional.cross_entropy": _TARGET_IS_CLASS_ID, "Functional.nll_loss": _TARGET_IS_CLASS_ID}
_GOLDEN = {f"Tensor.{n}": _raise_to_double for n in ("float", "half", "bfloat16", "double")}


def _resolve(root: Any, dotted: str) -> Any | None:
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if callable(obj) else None


def _is_inplace(name: str) -> bool:
    if name.startswith("__"):
        return name == "__setitem__" or name.startswith("__i") and name != "__invert__"
    return name.endswith("_")


@functools.lru_cache(maxsize=1)
def registry() -> dict[str, ApiEntry]:
    """Every supported dump name mapped to its entry, built once per process."""
    roots = {"Functional": (F, catalogue.FUNCTIONAL), "Torch": (torch, catalogue.TORCH),
             "Tensor": (torch.Tensor, catalogue.TENSOR)}
    table: dict[str, ApiEntry] = {}
    for prefix, (root, classes) in roots.items():
        for standard, names in classes.items():
            for name in names.split():
                func = _resolve(root, name)
                key = f"{prefix}.{name}"
                if func is None or key in table:
                    continue
                randomness = _always if key in _ALWAYS_RANDOM else _RANDOM.get(key)
                table[key] = ApiEntry(name=key, func=func, standard=standard, inplace=_is_inplace(name),
                                      randomness=randomness, golden=_GOLDEN.get(key),
                                      int_floors=_INT_FLOORS.get(key, {}))
    if testing.enabled():
        table.update({name: ApiEntry(name=name, func=func, standard=catalogue.OTHER)
                      for name, func in testing.MISBEHAVING.items()})
    return table


def lookup(api: str) -> ApiEntry | None:
    """The entry of a dump API name such as ``Tensor.__add__``; None when precheck does not support it."""
    return registry().get(api)
