"""How many terms a call adds into one output element: its reduced length n.

A kernel that accumulates in fp32 and rounds once carries one rounding of its dtype whatever n is; one that adds
in fp16/bf16 rounds every partial sum, and its error grows with n (about sqrt(n) roundings). The expert advice
(precheck/report/advice.py) holds an observed error against both, so it needs n, read from the recorded call the
way the API reads its arguments, without running anything (the report imports no torch).

Tensors are read by duck typing (``.shape``, as api_registry/sizes.py does), numbers as plain values. A forward
call's n is the length each output element sums over; for a backward, ``grad_of`` names the input whose gradient is
meant, and n is known where that gradient is itself a matmul or a convolution (linear, matmul, conv). None: the
call sums nothing, or its arguments do not say how much.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from api_registry.classes import base_name
from api_registry.size_args import count_of, shape_of

__all__ = ["reduced_length"]

Rule = Callable[[tuple, dict, "int | None"], "float | None"]  # (args, kwargs, grad_of) -> n
_LOSSES = """
mse_loss l1_loss smooth_l1_loss huber_loss cross_entropy nll_loss binary_cross_entropy
binary_cross_entropy_with_logits kl_div soft_margin_loss poisson_nll_loss gaussian_nll_loss
""".split()


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any = None) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


def _dims(shape: tuple, dim: Any) -> float:
    """The elements ``dim`` (None: all, an int, a list) spans of ``shape``."""
    if dim is None:
        return float(math.prod(shape))
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    if not dims:
        return float(math.prod(shape))
    return float(math.prod(shape[int(d)] for d in dims))


def _over(place: int, name: str = "dim", default: Any = None) -> Rule:
    """sum, mean, var, softmax ...: the input's extent over the dims argument (at ``place``)."""

    def rule(args: tuple, kwargs: dict, grad_of: int | None) -> float | None:
        shape = shape_of(_arg(args, kwargs, 0, "input"))
        if grad_of is not None or shape is None:
            return None
        return _dims(shape, _arg(args, kwargs, place, name, default)) if shape else 1.0

    return rule


def _trailing(place: int, name: str) -> Rule:
    """layer_norm, rms_norm: the elements of the normalized shape."""

    def rule(args: tuple, kwargs: dict, grad_of: int | None) -> float | None:
        sizes = _arg(args, kwargs, place, name)
        sizes = sizes if isinstance(sizes, (list, tuple)) else [sizes]
        return None if grad_of is not None else math.prod(count_of(s) for s in sizes)

    return rule


def _per_channel(args: tuple, kwargs: dict, grad_of: int | None) -> float | None:
    """batch_norm: every element of a channel; instance_norm: every element of a sample's channel."""
    shape = shape_of(_arg(args, kwargs, 0, "input"))
    return None if grad_of is not None or not shape or len(shape) < 2 else math.prod(shape) / shape[1]


def _instance_norm(args: tuple, kwargs: dict, grad_of: int | None) -> float | None:
    shape = shape_of(_arg(args, kwargs, 0, "input"))
    return None if grad_of is not None or not shape else float(math.prod(shape[2:]))


def _group_norm(args: tuple, kwargs: dict, grad_of: int | None) -> float | None:
    shape = shape_of(_arg(args, kwargs, 0, "input"))
    groups = count_of(_arg(args, kwargs, 1, "num_groups", 1))
    return None if grad_of is not None or not shape else math.prod(shape[1:]) / groups


def _loss(args: tuple, kwargs: dict, grad_of: int | None) -> float | None:
    shape = shape_of(_arg(args, kwargs, 0, "input"))
    if grad_of is not None or shape is None or kwargs.get("reduction", "mean") == "none":
        return None
    return float(math.prod(shape))


def _matmul(a: int, b: int) -> Rule:
    """a @ b (at places ``a``, ``b``): the inner dim; a gradient sums over the other operand's outer dim."""

    def rule(args: tuple, kwargs: dict, grad_of: int | None) -> float | None:
        left, right = shape_of(args[a]) if len(args) > a else None, shape_of(args[b]) if len(args) > b else None
        if not left or not right:
            return None
        if grad_of is None:
            return float(left[-1])
        if grad_of == a:
            return float(right[-1])
        return float(math.prod(left) / left[-1]) if grad_of == b else None

    return rule


def _linear(args: tuple, kwargs: dict, grad_of: int | None) -> float | None:
    """input @ weight.T: the input's features; the input's gradient sums over the outputs, the weight's and the
    bias's over every row."""
    x, w = shape_of(_arg(args, kwargs, 0, "input")), shape_of(_arg(args, kwargs, 1, "weight"))
    if not x or not w:
        return None
    return {None: x[-1], 0: w[0], 1: math.prod(x) / x[-1], 2: math.prod(x) / x[-1]}.get(grad_of)


def _conv(transposed: bool) -> Rule:
    """Every input channel of a group times the kernel (conv_transpose: an upper bound, stride ignored); the
    input's gradient sums over the output channels of a group times the kernel, the weight's and the bias's over
    every output position (counted as the input's, stride 1)."""

    def rule(args: tuple, kwargs: dict, grad_of: int | None) -> float | None:
        x, w = shape_of(_arg(args, kwargs, 0, "input")), shape_of(_arg(args, kwargs, 1, "weight"))
        if not x or not w or len(w) < 3:
            return None
        groups = count_of(_arg(args, kwargs, 6, "groups", 1))
        kernel = math.prod(w[2:])
        into, out = (w[0] / groups, w[1]) if transposed else (w[1], w[0] / groups)
        per_sample = math.prod(x[2:]) if len(x) > 2 else 1
        return {None: into * kernel, 0: out * kernel, 1: x[0] * per_sample, 2: x[0] * per_sample}.get(grad_of)

    return rule


def _avg_pool(d: int) -> Rule:
    def rule(args: tuple, kwargs: dict, grad_of: int | None) -> float | None:
        kernel = _arg(args, kwargs, 1, "kernel_size")
        sizes = kernel if isinstance(kernel, (list, tuple)) else [kernel] * d
        return None if grad_of is not None else math.prod(count_of(k) for k in sizes)

    return rule


def _adaptive_pool(d: int) -> Rule:
    """Each output element averages about in/out elements per dim (None in output_size keeps the dim)."""

    def rule(args: tuple, kwargs: dict, grad_of: int | None) -> float | None:
        shape, size = shape_of(_arg(args, kwargs, 0, "input")), _arg(args, kwargs, 1, "output_size")
        if grad_of is not None or not shape or len(shape) < d:
            return None
        sizes = size if isinstance(size, (list, tuple)) else [size] * d
        pairs = zip(shape[-d:], sizes)
        return math.prod(math.ceil(n / count_of(o)) if o is not None else 1 for n, o in pairs)

    return rule


_RULES: dict[str, Rule] = {
    **dict.fromkeys("sum mean nansum nanmean logsumexp var std var_mean std_mean cumsum prod".split(), _over(1)),
    **dict.fromkeys("softmax log_softmax softmin".split(), _over(1, default=-1)),
    **dict.fromkeys("normalize cosine_similarity".split(), _over(2, default=1)),
    **dict.fromkeys("norm vector_norm linalg.vector_norm".split(), _over(2)),
    "layer_norm": _trailing(1, "normalized_shape"),
    "rms_norm": _trailing(1, "normalized_shape"),
    "batch_norm": _per_channel,
    "group_norm": _group_norm,
    "instance_norm": _instance_norm,
    **dict.fromkeys(_LOSSES, _loss),
    **dict.fromkeys("matmul mm bmm __matmul__ dot vdot inner mv".split(), _matmul(0, 1)),
    **dict.fromkeys("addmm baddbmm addmv".split(), _matmul(1, 2)),
    "linear": _linear,
    **{f"conv{d}d": _conv(False) for d in (1, 2, 3)},
    **{f"conv_transpose{d}d": _conv(True) for d in (1, 2, 3)},
    **{f"avg_pool{d}d": _avg_pool(d) for d in (1, 2, 3)},
    **{f"adaptive_avg_pool{d}d": _adaptive_pool(d) for d in (1, 2, 3)},
}


def reduced_length(api: str, args: tuple, kwargs: dict, grad_of: int | None = None) -> float | None:
    """The terms each output element of ``api``'s forward call sums (``grad_of``: of the gradient of that input);
    None where the call sums nothing or its arguments do not say."""
    rule = _RULES.get(base_name(api)[1])
    if rule is None:
        return None
    try:
        n = rule(args, kwargs, grad_of)
    except (TypeError, ValueError, IndexError, ZeroDivisionError, OverflowError):  # arguments the API would refuse
        return None
    return float(n) if n is not None and math.isfinite(n) and n >= 1 else None
