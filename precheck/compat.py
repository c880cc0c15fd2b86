"""What the installed torch has, found by feature (never by its version string), for torch 2.1 to the newest:
the few places where an older torch lacks what precheck uses get the older spelling here, in one module.

The version range itself (the floor, the newest tested) is precheck.torch_range's, which needs no torch.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable
from typing import Any

import torch

__all__ = [
    "RECORDING_NEEDS",
    "is_compiling",
    "lacking",
    "nextafter",
    "one_compile_thread",
    "replay_function",
    "torch_feature",
]

# torch.compiler.is_compiling came in torch 2.3; torch._utils.is_compiling is what dynamo folds to True before it
_IS_COMPILING = ("torch.compiler:is_compiling", "torch._utils:is_compiling")

# What the recorder hooks into, by where torch defines it: a torch without one cannot record a training step.
RECORDING_NEEDS = (
    "torch.nn.modules.module:register_module_forward_pre_hook",
    "torch.nn.modules.module:register_module_forward_hook",
    "torch.nn.modules.module:register_module_parameter_registration_hook",
    "torch.nn.modules.module:register_module_buffer_registration_hook",
    "torch.nn.modules.module:register_module_module_registration_hook",
    "torch.optim.optimizer:register_optimizer_step_pre_hook",
    "torch.optim.optimizer:register_optimizer_step_post_hook",
    "torch.utils._pytree:tree_flatten",
    "torch.utils._pytree:tree_unflatten",
)


def torch_feature(where: str) -> Any:
    """The object at ``module:attribute`` (``torch.optim.optimizer:register_optimizer_step_pre_hook``), None
    where this torch has no such module or attribute."""
    module, _, name = where.partition(":")
    try:
        found: Any = importlib.import_module(module)
    except ImportError:
        return None
    for part in filter(None, name.split(".")):
        found = getattr(found, part, None)
    return found


def lacking(needs: tuple[str, ...]) -> list[str]:
    """The dotted names among ``needs`` this torch lacks (``torch.optim.optimizer.register_...``)."""
    missing = [where.replace(":", ".") for where in needs if torch_feature(where) is None]
    return missing + ([] if _found is not None else [_IS_COMPILING[0].replace(":", ".")])


def _first(*where: str) -> Any:
    return next((found for found in map(torch_feature, where) if found is not None), None)


_found = _first(*_IS_COMPILING)
# Whether dynamo is tracing the call (torch.compile), torch's own function: dynamo folds it to True as it traces.
is_compiling: Callable[[], bool] = _found if _found is not None else lambda: False  # a torch without is refused


@functools.cache
def _takes_enable_gqa() -> bool:
    q = torch.zeros(1, 1, 1)
    try:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, enable_gqa=False)
    except TypeError:  # torch before 2.5: "got an unexpected keyword argument"
        return False
    return True


def _attention_with_gqa(query: Any, key: Any, value: Any, *args: Any, enable_gqa: bool = False, **kwargs: Any) -> Any:
    """scaled_dot_product_attention's enable_gqa on a torch without it: each of the key's and value's heads
    repeated for its group of query heads, which is what the keyword does (its gradients sum back per head)."""
    if enable_gqa and key.size(-3) != query.size(-3):
        group = query.size(-3) // key.size(-3)
        key, value = key.repeat_interleave(group, -3), value.repeat_interleave(group, -3)
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, *args, **kwargs)


# An API a newer torch gave a keyword this one lacks: (whether this torch takes it, the call spelled without it). A
# call recorded under the newer torch (transformers passes enable_gqa) replays here with the same arithmetic.
_OLDER_SPELLINGS: dict[str, tuple[Callable[[], bool], Callable[..., Any]]] = {
    "Functional.scaled_dot_product_attention": (_takes_enable_gqa, _attention_with_gqa),
}


def replay_function(api: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """The function that replays ``api``'s recorded call on this torch: ``func`` itself, or where this torch lacks
    a keyword a newer one recorded, the same call spelled without it."""
    older = _OLDER_SPELLINGS.get(api)
    return func if older is None or older[0]() else older[1]


@functools.cache
def _has_nextafter(dtype: torch.dtype) -> bool:
    try:
        torch.nextafter(torch.zeros(1, dtype=dtype), torch.ones(1, dtype=dtype))
    except RuntimeError:  # torch 2.1 has no float16 or bfloat16 kernel for it on the CPU
        return False
    return True


def nextafter(x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """torch.nextafter on a torch whose CPU lacks it for a 16-bit float: the neighbour of each element towards
    ``other``, found on its bits (a 16-bit float's bits, read as an unsigned number, count its magnitude up)."""
    if _has_nextafter(x.dtype) or x.element_size() != 2:
        return torch.nextafter(x, other)
    other = other.to(x.dtype).expand_as(x)
    bits = x.view(torch.int16).to(torch.int32) & 0xFFFF
    wider = torch.where(x == 0, 1, bits + 1)  # away from zero (0 -> the smallest subnormal of other's sign)
    narrower = bits - 1
    up = torch.where(x > 0, wider, torch.where(x < 0, narrower, 1))
    down = torch.where(x > 0, narrower, torch.where(x < 0, wider, 0x8001))
    moved = torch.where(other > x, up, down)
    moved = torch.where(moved >= 0x8000, moved - 0x10000, moved).to(torch.int16).view(x.dtype)
    return torch.where(x.isnan() | other.isnan(), x + other, torch.where(other == x, other, moved))


def one_compile_thread() -> contextlib.AbstractContextManager:
    """inductor compiling in the calling thread for as long as the context lasts, its setting restored after: its
    pool of compile workers left two semaphores to the resource tracker at exit ("leaked semaphore objects"), a
    call's kernels are too small for it to pay, and on a torch without ``worker_start_method`` (before 2.4) its
    workers are multiprocessing children, which a daemonic process (precheck's pool worker) may not have."""
    config = torch_feature("torch._inductor.config:")
    return contextlib.nullcontext() if config is None else config.patch(compile_threads=1)
