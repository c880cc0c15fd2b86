"""Which law checks which API: the forward check of each random API, and the backward check of the dropout family."""

from __future__ import annotations

from api_registry.dropouts import DROPOUTS
from precheck.grader.laws.attention import mha_law, mha_shapes, sdpa_law, sdpa_shapes
from precheck.grader.laws.base import BackwardCheck, Check, ShapeCheck
from precheck.grader.laws.dropout import dropout_checks, per_channel, per_channel_1d, per_channel_3d, per_element_unit
from precheck.grader.laws.layers import fractional_max_pool_law, gumbel_softmax_law, rrelu_law
from precheck.grader.laws.samplers import (
    bernoulli_inplace_law,
    bernoulli_law,
    cauchy_inplace_law,
    exponential_inplace_law,
    geometric_inplace_law,
    log_normal_inplace_law,
    multinomial_law,
    normal_inplace_law,
    normal_law,
    poisson_law,
    rand_law,
    randint_law,
    randint_like_law,
    randn_law,
    random_inplace_law,
    randperm_law,
    uniform_inplace_law,
)

_UNITS = {"element": per_element_unit, "channel": per_channel, "channel1d": per_channel_1d, "channel3d": per_channel_3d}
_DROPOUTS = {
    name: dropout_checks(d.train_name, d.train_default, d.alpha, _UNITS[d.unit]) for name, d in DROPOUTS.items()
}

CHECKS: dict[str, Check] = {
    **{name: forward for name, (forward, _) in _DROPOUTS.items()},
    "Functional.rrelu": rrelu_law,
    "Functional.rrelu_": rrelu_law,
    "Functional.gumbel_softmax": gumbel_softmax_law,
    "Functional.fractional_max_pool2d": fractional_max_pool_law(2),
    "Functional.fractional_max_pool3d": fractional_max_pool_law(3),
    "Functional.scaled_dot_product_attention": sdpa_law,
    "Functional.multi_head_attention_forward": mha_law,
    "Torch.rand": rand_law,
    "Torch.rand_like": rand_law,
    "Torch.randn": randn_law,
    "Torch.randn_like": randn_law,
    "Torch.randint": randint_law,
    "Torch.randint_like": randint_like_law,
    "Torch.randperm": randperm_law,
    "Torch.normal": normal_law,
    "Torch.bernoulli": bernoulli_law,
    "Tensor.bernoulli": bernoulli_law,
    "Tensor.bernoulli_": bernoulli_inplace_law,
    "Torch.poisson": poisson_law,
    "Torch.multinomial": multinomial_law,
    "Tensor.multinomial": multinomial_law,
    "Tensor.uniform_": uniform_inplace_law,
    "Tensor.normal_": normal_inplace_law,
    "Tensor.exponential_": exponential_inplace_law,
    "Tensor.random_": random_inplace_law,
    "Tensor.cauchy_": cauchy_inplace_law,
    "Tensor.log_normal_": log_normal_inplace_law,
    "Tensor.geometric_": geometric_inplace_law,
}

BACKWARD_CHECKS: dict[str, BackwardCheck] = {name: backward for name, (_, backward) in _DROPOUTS.items()}

# The part of a forward check that reads only shapes, which its law runs too: apis --check runs it on the recorded
# shapes to predict the SKIP row of a call the law will refuse.
SHAPE_CHECKS: dict[str, ShapeCheck] = {
    "Functional.scaled_dot_product_attention": sdpa_shapes,
    "Functional.multi_head_attention_forward": mha_shapes,
}
