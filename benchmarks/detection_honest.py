"""Is a recorded output or gradient materially worse than an honest kernel in its dtype? Decided without precheck,
from the dump alone, to tell a grader's false errors on clean dumps from rows where the recording kernel (here the
CPU's) really loses precision.

The honest kernel is the same call computed in float32 from the recorded inputs (half-precision inputs widened) and
rounded to the recorded dtype: an fp32-accumulated kernel. The golden is the call in float64. Gradients are taken
where msprobe's hook takes them, at the autograd node that produced the API's first output, fed the recorded
incoming gradient. The measure is the worse of two ratios, recorded against honest: normwise errors
||x - golden||, and the worst element's error in rounding units of the dtype at max(|golden|, RMS of golden) (the
RMS floor keeps elements near zero, whose digits cancel, from deciding alone).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

MATERIAL = 1.5  # a recording more than this many times the honest kernel's error is really worse than honest
_FLOATS = {"torch.float32": torch.float32, "torch.float64": torch.float64}


@dataclass(frozen=True)
class Honesty:
    ratio: float | None  # recorded error / honest error; None when it cannot be measured
    note: str  # what was measured, or why not

    @property
    def worse(self) -> bool:
        return self.ratio is not None and self.ratio > MATERIAL


def decode(arg: Any, folder: Path) -> Any:
    """A dump argument as the call takes it: tensors loaded from their files (needing a gradient where the
    recording said so), dtypes and slices rebuilt, other values as recorded."""
    if isinstance(arg, list):
        return [decode(a, folder) for a in arg]
    if not isinstance(arg, dict):
        return arg
    kind = arg.get("type", "")
    if kind in ("torch.Tensor", "torch.nn.parameter.Parameter"):
        tensor = torch.load(folder / arg["data_name"], weights_only=True)
        return tensor.requires_grad_(bool(arg.get("requires_grad")) and tensor.is_floating_point())
    if kind == "torch.dtype":
        return getattr(torch, arg["value"].split(".")[-1])
    if kind == "slice":
        return slice(*arg["value"])
    return arg.get("value")


def _function(api: str):
    prefix, name = api.split(".")[0], ".".join(api.split(".")[1:-1])
    owner = {"Functional": F, "Torch": torch, "Tensor": torch.Tensor}.get(prefix)
    return None if owner is None else getattr(owner, name, None)


def _cast(value: Any, dtype: torch.dtype, grad: bool) -> Any:
    """Floating tensors in ``dtype``, needing a gradient where the recording said they did (when ``grad``)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype, grad) for v in value)
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(dtype).requires_grad_(grad and value.requires_grad)
    return value


def _run(fn, args: list, kwargs: dict, dtype: torch.dtype, grad_out: torch.Tensor | None) -> list[torch.Tensor]:
    """The call's first output in ``dtype`` (forward), or the gradients at its output's autograd node."""
    out = fn(*_cast(args, dtype, grad_out is not None), **_cast(kwargs, dtype, grad_out is not None))
    out = out[0] if isinstance(out, (tuple, list)) else out
    if grad_out is None:
        return [out.detach()]
    captured: list = []
    out.grad_fn.register_hook(lambda grad_inputs, _: captured.extend(grad_inputs))
    out.backward(grad_out.to(dtype))
    return [None if g is None else g.detach() for g in captured]


def honesty(dump_json: Path, api: str, direction: str) -> Honesty:
    """Measure one (API, direction) row of a dump against the honest kernel of its dtype."""
    data = json.loads(dump_json.read_text())["data"]
    folder = dump_json.parent / "dump_tensor_data"
    fn = _function(api)
    forward = data.get(f"{api}.forward")
    if fn is None or forward is None:
        return Honesty(None, "no torch function or forward record to replay")
    args = decode(forward["input_args"], folder)
    kwargs = {k: decode(v, folder) for k, v in forward["input_kwargs"].items()}
    grad_out = None
    if direction == "forward":
        recorded = [decode(forward["output"], folder)[0]]
    else:
        backward = data.get(f"{api}.backward", {})
        grad_out = decode(backward.get("input", [None]), folder)[0]
        recorded = decode(backward.get("output", []), folder)
        if not isinstance(grad_out, torch.Tensor):
            return Honesty(None, "no recorded incoming gradient")
    try:
        golden = _run(fn, args, kwargs, torch.float64, grad_out)
        honest = _run(fn, args, kwargs, torch.float32, grad_out)
    except Exception as exc:  # a call this simple replay cannot make is not judged
        return Honesty(None, f"replay failed: {type(exc).__name__}")
    return _ratio(recorded, golden, honest)


def _errors(value: torch.Tensor, golden: torch.Tensor, unit: float) -> tuple[float, float]:
    """Normwise error, and the worst element's error in units of the dtype's rounding at max(|golden|, RMS), over
    the positions finite on both sides; infinite where an inf/nan is not the golden's own (a mask that fails)."""
    value = value.detach().double()
    finite = torch.isfinite(value) & torch.isfinite(golden)
    same = (value == golden) | (torch.isnan(value) & torch.isnan(golden))
    if bool((~finite & ~same).any()):
        return math.inf, math.inf
    error, golden = (value - golden)[finite].abs(), golden[finite]
    scale = torch.clamp(golden.abs(), min=float(golden.pow(2).mean().sqrt())) * unit
    worst = float((error / scale.clamp_min(1e-300)).max()) if error.numel() else 0.0
    return float(torch.linalg.vector_norm(error)), worst


def _ratio(recorded: list, golden: list, honest: list) -> Honesty:
    """The worse of the normwise ratio and the worst-element ratio (the honest kernel's worst element counted as at
    least one rounding unit), over every gradient or output the record holds."""
    worst = None
    for r, g, h in zip(recorded, golden, honest):
        if not isinstance(r, torch.Tensor) or g is None or h is None or r.shape != g.shape or not r.numel():
            continue
        unit = torch.finfo(r.dtype).eps / 2  # unit roundoff
        mine, mine_max = _errors(r, g.double(), unit)
        theirs, theirs_max = _errors(h.to(r.dtype), g.double(), unit)  # the honest kernel rounds to the dtype
        if math.isinf(theirs):  # the honest kernel overflows too: the recording is worse only where it differs
            ratio = 1.0 if math.isinf(mine) else 0.0
        else:
            ratio = max(mine / max(theirs, 1e-300) if mine else 0.0, mine_max / max(theirs_max, 1.0))
        worst = ratio if worst is None else max(worst, ratio)
    if worst is None:
        return Honesty(None, "no recorded tensor matches the node's gradients")
    if math.isinf(worst):
        return Honesty(worst, "inf/nan where the golden and the honest kernel have finite values")
    if worst == 0:
        return Honesty(0.0, "recorded values equal the golden at the recorded node")
    return Honesty(worst, f"error {worst:.3g}x the honest fp32-accumulated kernel's")
