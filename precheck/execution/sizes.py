"""How much memory one case needs, known before any of its tensors exists.

The recorded shapes bound the inputs, but not what the call makes of them: ``Tensor.repeat(x, 10**9)``,
``x.new_full((10**6, 10**6), 0)``, ``torch.zeros(10**6, 10**6)`` or ``torch.arange(10**12)`` turn a few integers
into terabytes, whatever output shape the dump claims. So the outputs count as the larger of the recorded ones and
what the call's number arguments make (api_registry.sizes), in tensor and statistics mode alike.
"""

from __future__ import annotations

from api_registry.sizes import output_elements
from precheck.dump.records import Case
from precheck.inputs.builder import iter_specs


def _bytes(numel: float, itemsize: int) -> float:
    """A tensor, its other side's copy, its float64 golden copy and that copy's gradient."""
    return numel * (2 * itemsize + 16)


def estimated_bytes(case: Case) -> float:
    """Memory a case needs, roughly: each input and incoming gradient as recorded, and its outputs, the larger of
    the recorded ones and the ones its number arguments make (inf when they overflow any count)."""
    inputs = sum(_bytes(s.numel, s.dtype.itemsize) for s in iter_specs((case.args, case.kwargs, case.grad_outputs)))
    outputs = list(iter_specs(case.outputs))
    recorded = sum(_bytes(s.numel, s.dtype.itemsize) for s in outputs)
    made = output_elements(case.api, case.args, case.kwargs)
    itemsize = max((s.dtype.itemsize for s in outputs), default=4)
    return inputs + max(recorded, _bytes(made, itemsize) if made is not None else 0)
