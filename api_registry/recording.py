"""What msprobe's PyTorch L1 dumper records, so that ``precheck record`` records the same calls under the same
names: the APIs it wraps (msprobe_wrap_ops.yaml, copied from msprobe 26.2) and its risk-level filter.

msprobe leaves out the calls its risk level calls low unless its config says otherwise (no ``risk_level`` key is
"FOCUS"): a view, a cast, a concatenation. Such a call still runs inside the dumper (its counter advances, and
the calls nested in it stay hidden), it is only not written. The sets below are msprobe's
(msprobe/pytorch/dump/api_dump/api_risk_level.py, Mulan PSL v2, https://license.coscl.org.cn/MulanPSL2), copied
as they are: CORE_API_SET's missing comma, which fuses "chain_matmul" and "linear", included. Torch-free.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = [
    "ALSO_PATCHED",
    "BEYOND_MSPROBE",
    "LEVELS",
    "PATCHED",
    "RISK_LEVELS",
    "TASKS",
    "Unwritten",
    "kept_by_risk",
    "unwritten",
    "wrapped_names",
]

TASKS = ("tensor", "statistics")  # msprobe's config "task" values a recording takes
LEVELS = ("L1", "mix")  # mix: module (L0) records and construct.json beside the API records
RISK_LEVELS = ("FOCUS", "ALL", "CORE")
# yaml section -> (the object msprobe patches, as a dotted path, and the record name's prefix)
PATCHED = {
    "functional": ("torch.nn.functional", "Functional"),
    "tensor": ("torch.Tensor", "Tensor"),
    "torch": ("torch", "Torch"),
    "distributed": ("torch.distributed", "Distributed"),
}
# yaml section -> the other modules msprobe patches its names in, with the same function as the first: torch's own
# code calls distributed_c10d's globals, and P2POp(dist.isend, ...) checks its op is distributed_c10d's isend
ALSO_PATCHED = {"distributed": ("torch.distributed.distributed_c10d",)}

_LOW_RISK = frozenset(
    """
    squeeze unsqueeze reshape reshape_as view view_as flatten unflatten expand expand_as repeat repeat_interleave
    tile transpose permute moveaxis movedim swapaxes swapdims chunk unsafe_chunk split split_with_sizes unsafe_split
    unsafe_split_with_sizes tensor_split hsplit vsplit dsplit unbind stack cat concat concatenate hstack vstack
    dstack column_stack row_stack align_as align_to atleast_1d atleast_2d atleast_3d ravel clamp unfold type_as to
    float double int long half bfloat16 byte char bool cfloat numpy empty empty_like zeros zeros_like ones
    ones_like full full_like arange linspace logspace eye identity diag diagflat diag_embed triu tril triu_indices
    tril_indices clone __bool__ stride
    """.split()
)
_CORE = frozenset(
    """
    _fused_adamw_ _fused_adam_ matmul __matmul__ bmm addmm addmm_ addbmm addbmm_ baddbmm baddbmm_ mm mv addmv addmv_
    addr addr_ conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d conv_tbc convolution
    _convolution chain_matmullinear bilinear linalg.matmul linalg.multi_dot linalg.vecdot batch_norm instance_norm
    layer_norm group_norm local_response_norm _batch_norm_impl_index batch_norm_elemt batch_norm_stats
    batch_norm_update_stats batch_norm_gather_stats batch_norm_gather_stats_with_counts batch_norm_backward_elemt
    batch_norm_backward_reduce embedding embedding_bag multi_head_attention_forward scaled_dot_product_attention
    """.split()
)

# msprobe's builtin_ignore_ops.yaml (its Distributed section): the arguments of a collective it writes as null, a
# buffer the call fills (all_gather's list before the call is memory nobody has written yet), by position in the
# call's input_args or its output (a collective's output is its arguments after the call) and by keyword
_UNWRITTEN_INPUT: dict[str, tuple[int | str, ...]] = {
    "recv": (0,), "irecv": (0, "tensor"), "all_gather": (0,), "gather": (1,), "scatter": (0,),
    "reduce_scatter": (0,), "_reduce_scatter_base": (0,), "_all_gather_base": (0,), "all_to_all_single": (0,),
    "all_to_all": (0,), "all_gather_into_tensor": (0,), "reduce_scatter_tensor": (0,),
    "all_gather_single": (0,), "reduce_scatter_single": (0,),  # BEYOND_MSPROBE's: their output buffer first too
}  # fmt: skip
_UNWRITTEN_OUTPUT: dict[str, tuple[int, ...]] = {"isend": (0,)}


@dataclass(frozen=True)
class Unwritten:
    """What msprobe writes as null in a call's record: input_args positions, input_kwargs keys, output positions."""

    args: frozenset[int] = frozenset()
    kwargs: frozenset[str] = frozenset()
    output: frozenset[int] = frozenset()


_NOTHING = Unwritten()


@functools.cache
def unwritten(prefix: str, api: str) -> Unwritten:
    """The arguments msprobe writes as null in a record of ``prefix.api`` (``Distributed``, ``all_gather``)."""
    if prefix != "Distributed" or (api not in _UNWRITTEN_INPUT and api not in _UNWRITTEN_OUTPUT):
        return _NOTHING
    inputs = _UNWRITTEN_INPUT.get(api, ())
    return Unwritten(
        frozenset(i for i in inputs if isinstance(i, int)),
        frozenset(k for k in inputs if isinstance(k, str)),
        frozenset(_UNWRITTEN_OUTPUT.get(api, ())),
    )


# The collectives precheck records past msprobe 26.2's list, named in its style (``Distributed.all_gather_single.0``):
# torch 2.13's FSDP2 gathers parameters and reduce-scatters gradients through them (FSDP1 reduce-scatters so too),
# and its all_gather_into_tensor/reduce_scatter_tensor became their deprecated aliases, so msprobe's dump of an
# FSDP2 step holds no Distributed record. A torch without them (before 2.13: FSDP calls the aliases, which both
# lists hold) has nothing more wrapped.
BEYOND_MSPROBE = {"distributed": ("all_gather_single", "reduce_scatter_single")}


@functools.cache
def wrapped_names() -> dict[str, tuple[str, ...]]:
    """yaml section -> the API names precheck record wraps there (``linalg.vector_norm``: an attribute of an
    attribute): msprobe's, and BEYOND_MSPROBE's."""
    text = (Path(__file__).parent / "msprobe_wrap_ops.yaml").read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's: 0.14 s less per recording than Python's
    doc = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    names = {section: tuple(names or ()) for section, names in doc.items() if section in PATCHED}
    for section, more in BEYOND_MSPROBE.items():
        names[section] = names.get(section, ()) + tuple(n for n in more if n not in names.get(section, ()))
    return names


def kept_by_risk(api: str, risk_level: str) -> bool:
    """Whether msprobe writes a call of ``api`` (its bare name: ``float``, ``linalg.vector_norm``) at
    ``risk_level``."""
    if risk_level == "ALL":
        return True
    core = api in _CORE or api.rsplit(".", 1)[-1] in _distributed_names()
    if risk_level == "CORE":
        return core
    return core or api not in _LOW_RISK


@functools.cache
def _distributed_names() -> frozenset[str]:
    """msprobe counts every distributed API as core (the yaml's distributed section)."""
    return frozenset(name.rsplit(".", 1)[-1] for name in wrapped_names().get("distributed", ()))
