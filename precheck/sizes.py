"""How much memory one case needs, known before any of its tensors exists.

The recorded shapes bound the inputs, but not what the call makes of them: ``Tensor.repeat(x, 10**9)``,
``x.new_full((10**6, 10**6), 0)``, ``torch.zeros(10**6, 10**6)`` or ``torch.arange(10**12)`` turn a few integers
into terabytes, whatever output shape the dump claims. So the call is also made once on the meta device, where
torch works out every output's shape and dtype without allocating a byte; what those outputs would need counts
too. A call the meta device cannot run (data-dependent shapes, ops without a meta kernel) is estimated from the
recorded shapes alone, as before.
"""

from __future__ import annotations

import torch

from api_registry import ApiEntry
from precheck.dump import Case, TensorSpec
from precheck.inputs import iter_specs, map_specs
from precheck.runner import run_side
from precheck.targets import Side

# Outputs in the recorded dtypes, so an honest record is estimated as its recorded outputs are.
_META = Side(name="meta", device="meta", golden=False)


def _bytes(numel: int, itemsize: int) -> int:
    """A tensor, its other side's copy, its float64 golden copy and that copy's gradient."""
    return numel * (2 * itemsize + 16)


def estimated_bytes(case: Case, entry: ApiEntry | None = None) -> int:
    """Memory a case needs, roughly: each input and incoming gradient as recorded, and its outputs, the larger of
    the recorded ones and (with ``entry``) the ones its call makes on the meta device."""
    inputs = sum(_bytes(s.numel, s.dtype.itemsize) for s in iter_specs((case.args, case.kwargs, case.grad_outputs)))
    recorded = sum(_bytes(s.numel, s.dtype.itemsize) for s in iter_specs(case.outputs))
    made = meta_output_bytes(entry, case) if entry is not None else None
    return inputs + max(recorded, made or 0)


def meta_output_bytes(entry: ApiEntry, case: Case) -> int | None:
    """What the outputs of the call would need, from a run on the meta device; None when it cannot run there.

    A meta run costs milliseconds (many meta kernels are Python), so it is made only for calls with a number
    argument that can scale an output (a count of 2 or more, or a call with no tensor at all), and once per
    signature: the outputs' sizes depend on nothing else."""
    if not _scalable(case):
        return None
    key = case.signature()
    if key not in _MEMO:
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = _meta_run(entry, case)
    return _MEMO[key]


_MEMO: dict[tuple, int | None] = {}
_MEMO_SIZE = 4096


def _scalable(case: Case) -> bool:
    """Whether a number argument can make this call's output larger than its tensors: any number of magnitude 2
    or more, or no tensor argument at all (a factory call)."""
    found = {"tensor": False, "number": False}

    def visit(tree: object) -> None:
        if isinstance(tree, TensorSpec):
            found["tensor"] = True
        elif isinstance(tree, (tuple, list)):
            for v in tree:
                visit(v)
        elif isinstance(tree, dict):
            for v in tree.values():
                visit(v)
        elif isinstance(tree, (int, float)) and not isinstance(tree, bool) and not abs(tree) < 2:
            found["number"] = True

    visit((case.args, case.kwargs))
    return found["number"] or not found["tensor"]


def _meta_run(entry: ApiEntry, case: Case) -> int | None:

    def meta(spec: TensorSpec) -> torch.Tensor:
        return torch.empty(spec.shape, dtype=spec.dtype, device="meta")

    kwargs = dict(case.kwargs)
    if isinstance(kwargs.get("device"), str):  # a device named as text would allocate on it for real
        kwargs["device"] = "meta"
    try:
        args, loaded_kwargs = map_specs(case.args, meta), map_specs(kwargs, meta)
        with torch.device("meta"):  # factory calls without a device argument
            run = run_side(entry, case.args, kwargs, args, loaded_kwargs, None, _META)
    except Exception:  # a shape torch refuses even on meta: the real call fails the same way, later
        return None
    if run.error:
        return None
    return sum(_bytes(o.numel(), o.dtype.itemsize) for o in run.outputs if isinstance(o, torch.Tensor))
