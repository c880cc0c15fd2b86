"""The default standard's verdict: is the target worse than an honest implementation of the call in its dtype?

The user's rule (cosine and max abs error) says what passes. What it cannot say is whether a failure is a bug:
a bf16 output of magnitude 1 carries 4e-3 of rounding against a float64 golden, and a gradient of magnitude 1e-5
passes max-abs 1e-4 whatever its kernel does. So the line between warning and error is drawn against an honest
kernel: one that accumulates accurately (float32 for bf16/fp16) and rounds its results to the target dtype once.
``check.py`` runs it (the same call from the same inputs, ``precheck.execution.honest_run``); where it cannot
(the target is that very run, or it failed) the honest kernel is modeled: correctly rounded in bf16/fp16, a few
roundings off in fp32/fp64.

Errors are measured in units of the dtype's rounding u (2^-8 for bf16, 2^-11 fp16, 2^-24 fp32), which makes every
measure independent of the output's scale (a loss scale of 1 or 1024 gives the same verdict):
- normwise: ||x - g|| / ||g||;
- worst element: |x_i - g_i| / max(|g_i|, rms(g)), so elements near zero, whose error an honest kernel carries at
  the scale of the output (cancellation), are judged at that scale, not by their own magnitude;
- lean (half precision): |sum of errors| / ||errors||, a z-score: rounding errors do not lean one way, a kernel
  that rounds a per-channel scale or shift before applying it does (the CPU's bf16 batch_norm).
The target is an error when one of them is materially worse than the honest kernel's: a multiple of it, with
floors for what any honest kernel may show (_FLOORS). An output within one rounding at every element is never an
error and needs no honest run; any other output is measured against the honest kernel, a passing one too.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple, Optional, Union

import torch

from precheck.core.reasons import Reason
from precheck.core.status import ERROR, PASS, WARNING, Status
from precheck.grader.choices import NORMWISE_FACTOR
from precheck.grader.limits import limits_for
from precheck.grader.metrics import Metrics

__all__ = ["Error", "HonestSource", "Verdict", "honest_run", "measure", "verdict", "modeled", "unit", "short_name"]

# NORMWISE_FACTOR (grader/choices.py) error: normwise error above this multiple of the honest kernel's, which
# counts as at least ...
WORST_FACTOR = 4.0  # error: an element beyond this multiple of the honest kernel's worst element, or beyond a floor
BIAS_FACTOR = 3.0  # half precision, error: errors leaning one way, a z-score above this multiple of the honest ...
BIAS_FLOOR = 8.0  # ... kernel's and above 8 (rounding errors lean by chance: z < 5 on every bundled clean output)


@dataclass(frozen=True)
class _Floors:
    normwise: float  # the honest kernel's normwise error counts as at least this, and as 1/sqrt(n) ...
    worst: float  # an element within this many roundings at its scale is never an outlier
    model: tuple[float, float]  # the honest kernel's (normwise, worst) where none was run


# Half precision: the honest kernel accumulates in fp32 and rounds once, so its error is one rounding (0.3-0.6
# normwise, under 1 at every element), whatever the order of its sums; 8 roundings = 4 ULPs. fp32/fp64: kernels
# accumulate in their own dtype and their error depends on the order of their sums (CPU threads, GPU blocks), up
# to a few roundings normwise and tens at an element (msprobe's fp32 ULP standard allows 32 ULPs).
_FLOORS = {"half": _Floors(0.3, 8.0, (1.0, 1.0)), "wide": _Floors(2.0, 64.0, (16.0, 64.0))}

HonestSource = Optional[Union[torch.Tensor, Callable[[], Optional[torch.Tensor]]]]


class Verdict(NamedTuple):
    """The default standard's verdict on one output: what the details row says, what decided it, and the
    normwise multiple of an honest kernel's error where the message states one."""

    status: Status
    message: str
    reason: Reason
    ratio: float | None = None
    clause: str = ""  # the part of the message that decided it, where a rule it overruled comes before


@dataclass(frozen=True)
class Error:
    """One side's error against the golden, in units of the dtype's rounding u."""

    normwise: float  # ||x - g|| / ||g||, in u
    worst: float  # max |x_i - g_i| / max(|g_i|, rms(g)), in u
    lean: float = 0.0  # |sum of errors| / sqrt(sum of squared errors): a z-score, ~|N(0, 1)| for rounding
    count: int = 0  # elements measured
    measured: bool = True  # False: a model of the honest kernel, not a run of it


def unit(dtype: torch.dtype) -> float:
    """The dtype's unit roundoff: the largest relative error of rounding to nearest."""
    return limits_for(dtype).unit


def short_name(dtype: torch.dtype) -> str:
    names = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}
    return names.get(dtype.to_real() if dtype.is_complex else dtype, str(dtype).removeprefix("torch."))


def _half(dtype: torch.dtype) -> bool:
    return limits_for(dtype).mantissa_bits <= 10


def _floors(dtype: torch.dtype) -> _Floors:
    return _FLOORS["half" if _half(dtype) else "wide"]


def modeled(dtype: torch.dtype) -> Error:
    """The honest kernel's error where none was run: correctly rounded in half precision (fp32 accumulation then
    one rounding), a few roundings off in fp32/fp64 (their kernels accumulate in their own dtype)."""
    normwise, worst = _floors(dtype).model
    return Error(normwise, worst, measured=False)


def rounded_once(golden: torch.Tensor, dtype: torch.dtype) -> Error:
    """The honest kernel of a half-precision output modeled as tightly as a run of it: the golden rounded once to
    ``dtype``, which is what a kernel that computes in fp32 and rounds its result once gives (an elementwise
    output exactly; a sum or product in fp32 to within fp32's rounding, 2^-16 of bf16's). Used where the caller
    gave no honest kernel at all (the importable grader); a run that could not make one keeps the bound."""
    flat = _flat64(golden)
    keep = torch.isfinite(flat)
    return replace(_measure(_flat64(flat.to(dtype)), flat, dtype, keep), lean=0.0, measured=False)


def _model(golden: torch.Tensor, target: torch.Tensor, dtype: torch.dtype, given: bool) -> Error:
    """The honest kernel where none ran: with none given (the importable grader), the golden rounded once where its
    rounding is what the floors assume (a golden of values the dtype holds exactly rounds to itself, and a model
    cannot tell a kernel's faithful rounding, one ULP, from a bug there); else the bound."""
    if not given and _half(dtype) and golden.shape == target.shape:
        tight = rounded_once(golden, dtype)
        if tight.normwise >= _floors(dtype).normwise:
            return tight
    return modeled(dtype)


def honest_run(func: Callable[..., object], *args: object, **kwargs: object) -> Callable[[], object]:
    """The honest kernel of ``func`` on these inputs, for :func:`precheck.grade`'s ``honest``: run when a verdict
    needs it, with every bf16/fp16 tensor raised to float32 (the grader rounds its result once to the target's
    dtype), as run_ut's honest run is. Give it where the golden rounded once is no model of an honest kernel (a
    sum whose fp32 accumulation cancels), or to be graded exactly as run_ut grades the same call."""

    def raised(value: object) -> object:
        if isinstance(value, torch.Tensor) and value.is_floating_point() and _half(value.dtype):
            return value.detach().float()
        if isinstance(value, (tuple, list)):
            return type(value)(raised(v) for v in value)
        return value

    def run() -> object:
        with torch.no_grad():
            return func(*(raised(a) for a in args), **{k: raised(v) for k, v in kwargs.items()})

    return run


def _flat64(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu()
    if t.is_complex():
        t = torch.view_as_real(t.to(torch.complex128).resolve_conj())
    return t.to(torch.float64).reshape(-1)


def measure(x: torch.Tensor, golden: torch.Tensor, dtype: torch.dtype, keep: torch.Tensor | None = None) -> Error:
    """``x``'s error against ``golden`` over the positions ``keep`` (default: where both are finite)."""
    return _measure(_flat64(x), _flat64(golden), dtype, keep)


def _measure(xs: torch.Tensor, gs: torch.Tensor, dtype: torch.dtype, keep: torch.Tensor | None) -> Error:
    diff = xs - gs
    if keep is None and not bool(torch.isfinite(diff).all()):
        keep = torch.isfinite(xs) & torch.isfinite(gs)  # inf - inf is nan: a finite diff means both finite
    if keep is not None:
        diff, gs = diff[keep], gs[keep]
    n = gs.numel()
    if n == 0:
        return Error(0.0, 0.0)
    u = unit(dtype)
    tiny = math.sqrt(n) * 2.0 ** limits_for(dtype).min_eb  # below the smallest normal the spacing is absolute
    norm_e, norm_g = float(torch.linalg.vector_norm(diff)), max(float(torch.linalg.vector_norm(gs)), tiny)
    lean = abs(float(diff.sum())) / norm_e if norm_e else 0.0
    worst = float((diff.abs_() / gs.abs().clamp_(min=norm_g / math.sqrt(n))).max()) if norm_e else 0.0
    return Error(norm_e / norm_g / u, worst / u, lean, n)


def _within_rounding(e: Error) -> bool:
    """Every element within one rounding at its scale, and the whole no worse: what the dtype explains."""
    return e.normwise <= 1.0 and e.worst <= 1.0 + 2**-10


def _floored(normwise: float, count: int, dtype: torch.dtype) -> float:
    return max(normwise, _floors(dtype).normwise, 1 / math.sqrt(max(count, 1)))


def _worse(e: Error, honest: Error, dtype: torch.dtype) -> list[tuple[Reason, str]]:
    """Why the target is materially worse than the honest kernel, each measure's code and clause (empty: it is
    not)."""
    if _within_rounding(e):
        return []
    who = "the honest kernel's" if honest.measured else "an honest kernel's (modeled, not run)"
    why = []
    base = _floored(honest.normwise, e.count, dtype)
    if e.normwise > NORMWISE_FACTOR * base:
        ratio = above(e.normwise / base, NORMWISE_FACTOR)
        why.append((Reason.HONEST_NORMWISE, f"error {ratio}x {who} (normwise, {NORMWISE_FACTOR:g}x allowed)"))
    limit = max(WORST_FACTOR * honest.worst, _floors(dtype).worst)
    if e.worst > limit:
        why.append(
            (
                Reason.HONEST_WORST_ELEMENT,
                f"an element off by {above(e.worst, limit)} roundings at its scale, {who} worst "
                f"{honest.worst:.3g} ({limit:.3g} allowed)",
            )
        )
    lean = max(BIAS_FACTOR * honest.lean, BIAS_FLOOR)
    if _half(dtype) and honest.measured and e.lean > lean:
        why.append(
            (
                Reason.HONEST_LEAN,
                f"errors lean one way (z-score {above(e.lean, lean)}, {who} {honest.lean:.3g}, {lean:.3g} allowed)",
            )
        )
    return why


def above(value: float, limit: float) -> str:
    """``value`` (above ``limit``) with the fewest significant digits, three at least, that still read above the
    limit as it is printed: "2x allowed" beside an error of "2x" reads as a bug, "2.0004x" does not."""
    shown = f"{limit:.3g}"
    for digits in range(3, 17):
        text = f"{value:.{digits}g}"
        if float(text) > float(shown):
            return text
    return repr(value)


def verdict(
    target: torch.Tensor,
    golden: torch.Tensor,
    m: Metrics,
    rule: list[str],
    dtype: torch.dtype,
    honest: HonestSource = None,
) -> Verdict:
    """The default standard's verdict. ``rule``: why the user's rule failed (empty: it held);
    ``honest``: the honest kernel's output in the target dtype, or a function returning it (called only when
    the verdict needs it), or None to model it."""
    name = short_name(dtype)
    flat = _Flat(target, golden)
    h = keep = None
    if m.nonfinite_mismatches > m.overflows:  # the golden in the dtype overflows too: not the kernel's doing
        h = _get(honest)
        keep = _shared_range(flat.t, flat.g, h)
        if keep is None:
            return Verdict(
                ERROR, f"inf/nan mismatch at {m.nonfinite_mismatches} position(s)", Reason.NONFINITE_MISMATCH
            )
        rule = [*rule, f"inf/nan at {m.nonfinite_mismatches} position(s) where the honest {name} kernel has them too"]
    e = (keep is None and _from_metrics(m, dtype)) or _measure(flat.t, flat.g, dtype, keep)
    # Within one rounding everywhere needs no honest run; nor does a pass without an honest kernel to refute it
    # (library use: the model never turns the user's pass into an error). Anything else is measured against
    # the honest kernel, a passing output too: whether the rule holds depends on the loss scale, the verdict not.
    if _within_rounding(e) or not rule and honest is None:
        if not rule:
            return Verdict(PASS, "", Reason.PASSED)
        explained = f"what {name} explains: within its rounding ({e.normwise:.2g} of one rounding, normwise)"
        return Verdict(WARNING, "; ".join([*rule, explained]), Reason.WITHIN_ROUNDING)
    h = h if h is not None else _get(honest)
    if isinstance(h, torch.Tensor) and h.is_floating_point() and h.dtype != dtype and h.shape == target.shape:
        h = h.to(dtype)  # an honest run in float32 (honest_run): its result rounded once, as the target's
    if h is not None and _same_values(h, target):
        ref = e  # the target's own run is the honest one (fp32 on the CPU): measuring it again would cost passes
    elif h is not None and h.shape == target.shape:
        h64 = _flat64(h)
        if keep is None and not bool(torch.isfinite(h64).all()):
            keep = torch.isfinite(flat.t) & torch.isfinite(flat.g) & torch.isfinite(h64)
            e = _measure(flat.t, flat.g, dtype, keep)
        ref = _measure(h64, flat.g, dtype, keep)
    else:
        ref = _model(golden, target, dtype, given=honest is not None)
    ratio = e.normwise / _floored(ref.normwise, e.count, dtype)
    worse = _worse(e, ref, dtype)
    if worse:
        clause = f"worse than an honest {name} kernel: " + "; ".join(w for _, w in worse)
        stated = ratio if worse[0][0] == Reason.HONEST_NORMWISE else None  # the message states it only then
        return Verdict(ERROR, "; ".join([*rule, clause]), worse[0][0], stated, clause)
    if not rule:
        return Verdict(PASS, "", Reason.PASSED)
    who = "the honest" if ref.measured else "a modeled honest"
    explained = f"what {name} explains: error {ratio:.2g}x {who} {name} kernel's"
    return Verdict(WARNING, "; ".join([*rule, explained]), Reason.HONEST_EXPLAINS, ratio)


class _Flat:
    """The target and golden as flat float64 tensors, made on first use: the metrics' pass already measured the
    target where every position is finite, so most verdicts never need these full-size copies."""

    def __init__(self, target: torch.Tensor, golden: torch.Tensor) -> None:
        self._target, self._golden = target, golden

    @functools.cached_property
    def t(self) -> torch.Tensor:
        return _flat64(self._target)

    @functools.cached_property
    def g(self) -> torch.Tensor:
        return _flat64(self._golden)


def _from_metrics(m: Metrics, dtype: torch.dtype) -> Error | None:
    """``_measure``'s Error from the sums the metrics' pass took (None where it took none: an inf or nan)."""
    if m.scaled_worst is None or m.error_norm is None or m.golden_norm is None or m.error_sum is None or not m.count:
        return None
    tiny = math.sqrt(m.count) * 2.0 ** limits_for(dtype).min_eb
    norm_e, norm_g, u = m.error_norm, max(m.golden_norm, tiny), unit(dtype)
    lean = abs(m.error_sum) / norm_e if norm_e else 0.0
    worst = m.scaled_worst if norm_e else 0.0
    return Error(norm_e / norm_g / u, worst / u, lean, m.count)


def _same_values(h: torch.Tensor, target: torch.Tensor) -> bool:
    """``h`` views the very memory ``target`` does (the honest run was the target run), not an equal copy."""
    return h is target or (
        h.shape == target.shape
        and h.dtype == target.dtype
        and h.device == target.device
        and h.stride() == target.stride()
        and h.data_ptr() == target.data_ptr()
    )


def _get(honest: HonestSource) -> torch.Tensor | None:
    return honest() if callable(honest) else honest


def _shared_range(t: torch.Tensor, g: torch.Tensor, h: torch.Tensor | None) -> torch.Tensor | None:
    """Where the target's inf/nan disagree with the golden's (flat float64 ``t``, ``g``), does the honest kernel
    hold the same value (an overflow of the dtype's range, not of the kernel)? The positions to measure the rest
    on, or None."""
    if h is None or h.numel() != t.numel():
        return None
    hs = _flat64(h)
    same = (t == hs) | (torch.isnan(t) & torch.isnan(hs))
    finite = torch.isfinite(t) & torch.isfinite(g)
    bad = ~finite & ~((t == g) | (torch.isnan(t) & torch.isnan(g)))
    if bool((bad & ~same).any()):
        return None
    return finite & torch.isfinite(hs)
