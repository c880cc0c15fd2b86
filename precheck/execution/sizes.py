"""How much memory one case needs, known before any of its tensors exists.

The recorded shapes bound the inputs, but not what the call makes of them: ``Tensor.repeat(x, 10**9)``,
``torch.zeros(10**6, 10**6)``, ``bincount(x, minlength=3e8)``, ``hann_window(10**9)`` or ``outer`` of two 10^5
vectors turn a few numbers into gigabytes, whatever output shape the dump claims (a statistics record saves no
file that would show the lie). So the outputs count as the larger of the recorded ones and what the call's
arguments make (api_registry.sizes), in tensor and statistics mode alike, and a case needing more than
--max-memory is a SKIP row that says how much and why, before anything runs.
"""

from __future__ import annotations

from api_registry.sizes import output_elements
from precheck.dump.records import Case
from precheck.inputs.builder import iter_specs


def _bytes(numel: float, itemsize: int) -> float:
    """A tensor, its other side's copy, its float64 golden copy and that copy's gradient."""
    return numel * (2 * itemsize + 16)


def _outputs(case: Case, built: tuple[tuple, dict] | None) -> tuple[float, float | None, int]:
    """The recorded outputs' elements, the elements the call's arguments make (None: its tensors bound them), and
    the outputs' widest item size. ``built``: the arguments as rebuilt, whose tensors hold their values (a 0-dim
    size read from its file, not from the record's statistics, which a dump may forge)."""
    outputs = list(iter_specs(case.outputs))
    made = output_elements(case.api, *(built or (case.args, case.kwargs)))
    return float(sum(s.numel for s in outputs)), made, max((s.dtype.itemsize for s in outputs), default=4)


def estimated_bytes(case: Case, built: tuple[tuple, dict] | None = None) -> float:
    """Memory a case needs, roughly: each input and incoming gradient as recorded, and its outputs, the larger of
    the recorded ones and the ones its arguments make (inf when they overflow any count)."""
    inputs = sum(_bytes(s.numel, s.dtype.itemsize) for s in iter_specs((case.args, case.kwargs, case.grad_outputs)))
    recorded = sum(_bytes(s.numel, s.dtype.itemsize) for s in iter_specs(case.outputs))
    _, made, itemsize = _outputs(case, built)
    return inputs + max(recorded, _bytes(made, itemsize) if made is not None else 0)


def memory_problem(case: Case, limit: int | None, built: tuple[tuple, dict] | None = None) -> str | None:
    """The SKIP reason of a case needing more than ``limit`` bytes: how much, and the output its arguments ask
    for where that is more than the recorded one (a record's small output shape never hides it). Asked before the
    inputs are built, then with them (``built``), before the call."""
    need = estimated_bytes(case, built)
    if limit is None or need <= limit:
        return None
    recorded, made, _ = _outputs(case, built)
    why = f"needs about {need / 2**30:.3g} GiB, above --max-memory {limit / 2**30:.3g} GiB"
    if made is not None and made > recorded:
        why += f": its arguments ask for an output of {made:.3g} elements (the record says {recorded:.3g})"
    return why
