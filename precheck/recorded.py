"""``--target recorded``: grade what the device really produced during training.

The target side is not re-run: its outputs are the output files of the forward record, its gradients the files
of the backward record's ``output`` list, and the golden is computed on the CPU from the recorded inputs. No
accelerator is needed at check time, so an NPU dump can be pre-checked on a laptop or in CI.

msprobe records the gradients its autograd hook saw, which are not always numbered like the API's inputs (for
``Functional.linear`` it saves addmm's: bias, input, weight transposed). Each recorded gradient is therefore
matched to the input whose golden gradient has its shape (the same position first, then the only input of that
shape, then the only input of the transposed shape); one that matches nothing is reported, never guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from precheck.dump import Case, TensorSpec
from precheck.grader.limits import limits_for
from precheck.grader.status import PASS, WARNING
from precheck.inputs import InputBuilder
from precheck.runner import SideRun, flatten


class StatisticsOnly(Exception):
    """The record saved statistics, not data: only its statistics can be graded."""


def recorded_run(case: Case, builder: InputBuilder, golden: SideRun) -> tuple[SideRun, list[str]]:
    """The recorded outputs and gradients as a target run, and notes on gradients that could not be matched.

    Raises StatisticsOnly when the forward outputs were not saved."""
    outputs = flatten(case.outputs)
    if any(isinstance(o, TensorSpec) and o.data_name is None for o in outputs):
        raise StatisticsOnly()
    loaded = flatten(builder.load(case.outputs, "output"))
    notes: list[str] = []
    grads = None
    if golden.grads is not None and case.grad_inputs is not None:
        recorded = flatten(case.grad_inputs)
        if any(isinstance(g, TensorSpec) and g.data_name is None for g in recorded):
            notes.append("backward: recorded gradients are statistics only, not graded")
        else:
            grads, unmatched = _match_grads(flatten(builder.load(case.grad_inputs, "backward.output")), golden.grads)
            notes += unmatched
    return SideRun(outputs=loaded, grads=grads), notes


def _match_grads(recorded: list, golden: dict[int, torch.Tensor | None]) -> tuple[dict, list[str]]:
    available = {i: g for i, g in golden.items() if g is not None}
    by_position = list(golden)  # golden's indices in argument order
    matched: dict[int, torch.Tensor | None] = {}  # only inputs whose recorded gradient was found
    notes = []
    for k, grad in enumerate(recorded):
        if not isinstance(grad, torch.Tensor):
            continue
        same = [i for i, g in available.items() if g.shape == grad.shape]
        flipped = [i for i, g in available.items() if grad.dim() == 2 and g.shape == grad.t().shape]
        if k < len(by_position) and by_position[k] in same:
            i, value = by_position[k], grad
        elif len(same) == 1:
            i, value = same[0], grad
        elif not same and len(flipped) == 1:
            i, value = flipped[0], grad.t()
        else:
            notes.append(
                f"backward: recorded gradient {k} of shape {tuple(grad.shape)} matches "
                f"{'no' if not same else 'more than one'} input gradient; not graded"
            )
            continue
        matched[i] = value
        del available[i]
    return matched, notes


@dataclass(frozen=True)
class StatisticsVerdict:
    status: str
    message: str


def grade_statistics(spec: TensorSpec, golden: torch.Tensor) -> StatisticsVerdict:
    """A statistics-only record: its recorded Max/Min/Mean/Norm against the golden's. Four numbers can raise a
    suspicion but not prove an error, so the status is capped at warning."""
    g = golden.detach().to(torch.float64)
    if g.is_complex():
        g = torch.view_as_real(g)
    finite = g[torch.isfinite(g)]
    if finite.numel() == 0:
        return StatisticsVerdict(WARNING, "statistics only: the golden has no finite value to compare")
    ours = {
        "Max": float(finite.max()),
        "Min": float(finite.min()),
        "Mean": float(finite.mean()),
        "Norm": float(torch.linalg.vector_norm(finite)),
    }
    theirs = {"Max": spec.stats.max, "Min": spec.stats.min, "Mean": spec.stats.mean, "Norm": spec.stats.norm}
    scale = max(ours["Norm"] / math.sqrt(finite.numel()), 1e-30)
    tolerance = max(4 * limits_for(spec.dtype).rtol, 1e-3) if spec.dtype.is_floating_point else 0.0
    off = []
    for name, value in theirs.items():
        if value is None or not math.isfinite(value):
            continue
        error = abs(value - ours[name]) / max(abs(ours[name]), scale)
        if error > tolerance:
            off.append(f"{name} {value:.6g} vs golden {ours[name]:.6g}")
    prefix = "statistics only (graded on Max/Min/Mean/Norm, never worse than warning)"
    if off:
        return StatisticsVerdict(WARNING, f"{prefix}: " + "; ".join(off))
    return StatisticsVerdict(PASS, prefix)
