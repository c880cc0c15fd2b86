"""Which calls draw random numbers: per call, not per API name.

``dropout(x, p=0.1)`` in training mode is random, the same call with ``training=False`` or ``p=0`` is an
identity; ``scaled_dot_product_attention`` is random only with ``dropout_p > 0``. A random call's outputs are
never compared numerically with a second draw: it gets a statistical check (precheck/grader/laws/) or a SKIP row that
says why.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from api_registry.calls import arg
from api_registry.dropouts import DROPOUTS

RandomCheck = Callable[[tuple, dict], "str | None"]


def dropout_like(
    p_pos: int | None, p_name: str, p_default: float, train_pos: int | None, train_name: str, train_default: bool
) -> RandomCheck:
    """A call is random when its probability is above zero and it runs in training mode."""

    def check(args: tuple, kwargs: dict) -> str | None:
        p = arg(args, kwargs, p_pos, p_name, p_default)
        training = arg(args, kwargs, train_pos, train_name, train_default)
        if isinstance(p, (int, float)) and p > 0 and training:
            return f"random op: {p_name}={p} in training mode, outputs are random draws"
        return None

    return check


def always(args: tuple, kwargs: dict) -> str:
    return "random op: outputs are random draws"


def _rrelu(args: tuple, kwargs: dict) -> str | None:
    return "random op: rrelu in training mode draws its slopes" if arg(args, kwargs, 3, "training", False) else None


def _recurrent(args: tuple, kwargs: dict) -> str | None:
    """VF.lstm / gru / rnn_*: (input, hx, params, has_biases, num_layers, dropout, train, ...); dropout only acts
    between layers."""
    layers, p, train = (
        arg(args, kwargs, i, n, d) for i, n, d in ((4, "num_layers", 1), (5, "dropout", 0.0), (6, "train", False))
    )
    if isinstance(p, (int, float)) and p > 0 and train and isinstance(layers, int) and layers > 1:
        return f"random op: dropout={p} between {layers} layers in training mode"
    return None


def _fusion_attention(args: tuple, kwargs: dict) -> str | None:
    keep = arg(args, kwargs, 9, "keep_prob", 1.0)
    return (
        f"random op: keep_prob={keep} draws a dropout mask inside the fused attention"
        if isinstance(keep, (int, float)) and keep < 1
        else None
    )


_F_DROPOUT = dropout_like(1, "p", 0.5, 2, "training", True)
_T_DROPOUT = dropout_like(1, "p", 0.5, 2, "train", True)
_PER_CALL: dict[str, RandomCheck] = {
    **{name: dropout_like(1, "p", 0.5, 2, d.train_name, d.train_default) for name, d in DROPOUTS.items()},
    "Functional.scaled_dot_product_attention": dropout_like(4, "dropout_p", 0.0, None, "training", True),
    "Functional.multi_head_attention_forward": dropout_like(10, "dropout_p", 0.0, 13, "training", True),
    "Functional.rrelu": _rrelu,
    "Functional.rrelu_": _rrelu,
    **{f"{name}_": _T_DROPOUT for name in DROPOUTS if name.startswith("Torch.")},  # in place: no law here
    "Torch.rrelu": _rrelu,
    "Torch.rrelu_": _rrelu,
    **{f"{prefix}.{n}": _recurrent for prefix in ("Torch", "VF") for n in ("lstm", "gru", "rnn_tanh", "rnn_relu")},
    "Torch.native_dropout": dropout_like(1, "p", 0.5, 2, "train", True),
    "NPU.npu_fusion_attention": _fusion_attention,
    "Aten.native_dropout.default": dropout_like(1, "p", 0.5, 2, "train", True),
    "Aten.dropout.default": _T_DROPOUT,
    "Aten.alpha_dropout.default": _T_DROPOUT,
    "Aten.feature_dropout.default": _T_DROPOUT,
    **{
        f"VF.{n}": _T_DROPOUT
        for n in (
            "dropout",
            "dropout_",
            "feature_dropout",
            "feature_dropout_",
            "alpha_dropout",
            "alpha_dropout_",
            "feature_alpha_dropout",
            "feature_alpha_dropout_",
        )
    },
}
_ALWAYS = {
    "Functional.gumbel_softmax",
    "Functional.fractional_max_pool2d",
    "Functional.fractional_max_pool3d",
    "Functional.fractional_max_pool2d_with_indices",
    "Functional.fractional_max_pool3d_with_indices",
}


@functools.cache
def is_seeded(op: str) -> bool:
    """Whether the ATen operator ``op`` draws from the random generator (tag ``nondeterministic_seeded``: rand,
    bernoulli, normal, multinomial, rrelu_with_noise, ...), as the installed torch knows it. Asked per op and
    on first use: reading the tags of all 3,000 operators up front costs more than a second."""
    try:
        packet = getattr(torch.ops.aten, op)
        return any(torch.Tag.nondeterministic_seeded in getattr(packet, o).tags for o in packet.overloads())
    except (AttributeError, RuntimeError):
        return False


def randomness_of(key: str, base: str) -> RandomCheck | None:
    """The per-call rule of a dump name (``Functional.dropout``), given its base op name (``dropout``)."""
    if key in _PER_CALL:
        return _PER_CALL[key]
    if key in _ALWAYS:
        return always

    def seeded(args: tuple, kwargs: dict) -> str | None:
        return always(args, kwargs) if is_seeded(base) else None

    return seeded
