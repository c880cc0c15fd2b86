"""Compare one output (or a tree of outputs) against its float64 golden under a precision standard.

Integer and bool outputs must match exactly under every standard; Python floats are compared as one-element
float64 tensors (with a tolerance, never ``==``); other values must be equal. Float outputs get every metric of
the details CSV and the verdict of the chosen standard (standards.py). Any non-finite value that the golden does
not hold identically is an error, whatever the standard, but for an inf where the golden too is beyond the
target dtype's range: an overflow of the dtype (a warning), as a GradScaler's overflowed fp16 step has.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from precheck.core.comparison import Comparison
from precheck.core.reasons import Reason
from precheck.core.status import ERROR, PASS, WARNING, Status
from precheck.grader import honest as honest_kernel
from precheck.grader.limits import absolute_regime, accumulative_regime
from precheck.grader.metrics import Metrics, exact_metrics, float_metrics
from precheck.grader.standards import DEFAULT_COSINE, DEFAULT_MAX_ABS, STANDARDS, Context, resolve, rule


def grade(
    target: Any,
    golden: Any,
    *,
    standard: str = "default",
    target_dtype: torch.dtype | None = None,
    reference: Any = None,
    cosine: float = DEFAULT_COSINE,
    max_abs: float = DEFAULT_MAX_ABS,
    api_class: str | None = None,
    honest: honest_kernel.HonestSource = None,
) -> Comparison:
    """Compare one output leaf: a tensor, a Python number, or any other value compared for equality.

    ``target_dtype``: the precision the target was computed in, when ``target`` is held in another dtype (a
    bf16 result saved as fp32); ``reference``: the same output from a reference device in the target dtype,
    for the ``benchmark`` standard; ``api_class``: the API's class in api_registry, for ``auto``; ``honest``:
    the same output from an honest kernel in the target dtype (accurate accumulation, one rounding), or a
    function returning it, called only when the ``default`` standard needs it; without it that kernel is
    modeled (grader/honest.py).
    """
    resolve(standard, api_class, reference is not None)  # a misspelt standard fails for every kind of output
    if isinstance(target, torch.Tensor) and isinstance(golden, torch.Tensor):
        return _compare_tensors(target, golden, standard, target_dtype, reference, cosine, max_abs, api_class, honest)
    if isinstance(target, torch.Tensor) or isinstance(golden, torch.Tensor):
        return Comparison(
            ERROR,
            f"type mismatch: target is {_kind(target)}, golden is {_kind(golden)}",
            None,
            golden_dtype=_kind(golden),
            target_dtype=_kind(target),
            shape=None,
            reason=Reason.TYPE_MISMATCH,
        )
    if _is_real_number(target) and _is_real_number(golden) and (isinstance(target, float) or isinstance(golden, float)):
        ref = torch.tensor(float(reference), dtype=torch.float64) if _is_real_number(reference) else None
        # Judged as float32: an API's Python float mostly comes from a float32 tensor (``item``), whose honest
        # value is that tensor's, not a float64 computation's.
        result = _compare_tensors(
            torch.tensor(float(target), dtype=torch.float64),
            torch.tensor(float(golden), dtype=torch.float64),
            standard,
            torch.float32,
            ref,
            cosine,
            max_abs,
            api_class,
        )
        return replace(result, golden_dtype=str(type(golden)), target_dtype=str(type(target)), shape=None)
    same = target == golden and (type(target) is type(golden) or _is_real_number(target) and _is_real_number(golden))
    return Comparison(
        PASS if same else ERROR,
        "" if same else f"value {target!r} != golden {golden!r}",
        Metrics(binary_mismatch=0.0 if same else 1.0),
        golden_dtype=str(type(golden)),
        target_dtype=str(type(target)),
        shape=None,
        standard="exact",
        reason=Reason.PASSED if same else Reason.VALUE_MISMATCH,
    )


def grade_tree(target: Any, golden: Any, path: str = "output", **options: Any) -> list[tuple[str, Comparison]]:
    """Grade nested tuples / lists / dicts of outputs leaf by leaf; a structural difference is an error."""
    if (
        isinstance(target, (tuple, list))
        and not isinstance(target, torch.Size)
        and isinstance(golden, (tuple, list))
        and not isinstance(golden, torch.Size)
    ):
        if len(target) != len(golden):
            return [(path, _structure_error(f"target has {len(target)} items, golden {len(golden)}"))]
        refs = options.pop("reference", None)
        refs = refs if isinstance(refs, (tuple, list)) and len(refs) == len(target) else [None] * len(target)
        return [
            leaf
            for i, (t, g, r) in enumerate(zip(target, golden, refs))
            for leaf in grade_tree(t, g, f"{path}[{i}]", reference=r, **options)
        ]
    if isinstance(target, dict) and isinstance(golden, dict):
        if target.keys() != golden.keys():
            return [
                (
                    path,
                    _structure_error(
                        f"keys differ: target {sorted(map(str, target))}, golden {sorted(map(str, golden))}"
                    ),
                )
            ]
        refs = options.pop("reference", None)
        refs = refs if isinstance(refs, dict) else {}
        return [
            leaf
            for k in target
            for leaf in grade_tree(target[k], golden[k], f"{path}[{k!r}]", reference=refs.get(k), **options)
        ]
    return [(path, grade(target, golden, **options))]


def _structure_error(message: str) -> Comparison:
    return Comparison.failed(message, Reason.STRUCTURE_MISMATCH)


def _is_real_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _kind(x: Any) -> str:
    """A value's dtype as msprobe writes it: ``torch.float32`` or ``<class 'int'>``."""
    return str(x.dtype) if isinstance(x, torch.Tensor) else str(type(x))


def _compare_tensors(
    target: torch.Tensor,
    golden: torch.Tensor,
    standard: str,
    target_dtype: torch.dtype | None,
    reference: Any,
    cosine: float,
    max_abs: float,
    api_class: str | None,
    honest: honest_kernel.HonestSource = None,
) -> Comparison:
    shape = tuple(target.shape)
    dtypes: dict[str, Any] = dict(golden_dtype=str(golden.dtype), target_dtype=str(target.dtype), shape=shape)
    if tuple(golden.shape) != shape:
        message = f"shape mismatch: target {shape} vs golden {tuple(golden.shape)}"
        return Comparison(ERROR, message, None, **dtypes, reason=Reason.SHAPE_MISMATCH)
    is_float = target.dtype.is_floating_point or target.dtype.is_complex
    if is_float != (golden.dtype.is_floating_point or golden.dtype.is_complex):  # msprobe's check_dtype_comparable
        message = f"golden dtype is {golden.dtype} but target dtype is {target.dtype}, cannot compare"
        return Comparison(ERROR, message, None, **dtypes, reason=Reason.DTYPE_KIND)
    if target.numel() == 0:
        return Comparison(PASS, "empty output", Metrics(), **dtypes, reason=Reason.EMPTY)
    if not is_float and not (golden.dtype.is_floating_point or golden.dtype.is_complex):
        m = exact_metrics(target, golden)
        if m.binary_mismatch == 0:
            return Comparison(PASS, "", m, **dtypes, standard="exact", reason=Reason.PASSED)
        k = round((m.binary_mismatch or 0.0) * target.numel())
        where = _at(shape, m.worst_index, target, golden, "largest difference")
        message = f"{k}/{target.numel()} elements differ from the golden{where}"
        return Comparison(ERROR, message, m, **dtypes, standard="exact", reason=Reason.EXACT_MISMATCH)
    dtype = target_dtype or (target.dtype if is_float else torch.float64)
    has_reference = isinstance(reference, torch.Tensor) and tuple(reference.shape) == shape
    name = resolve(standard, api_class, has_reference)
    regime = accumulative_regime(dtype) if name == "accumulative" else absolute_regime(dtype)
    m = float_metrics(target, golden, dtype, regime)
    ref = float_metrics(reference, golden, dtype, regime) if has_reference else None
    if name == "default" and m.max_abs_err is not None:
        ctx = Context(dtype=dtype, cosine=cosine, max_abs=max_abs)
        status, message, reason, ratio, clause = honest_kernel.verdict(target, golden, m, rule(m, ctx), dtype, honest)
    else:
        status, message = judge(m, dtype, name, cosine=cosine, max_abs=max_abs, reference=ref, api_class=api_class)
        reason, ratio, clause = _rule_reason(m, status), None, ""
    said = _overflowed(status, m, dtype)
    if said is not None:
        status, reason, clause = said
        message = "; ".join(part for part in (clause, message) if part)
    place = ""
    if status != PASS:
        place = (
            _at(shape, m.worst_index, target, golden)
            if m.nonfinite_mismatches == 0
            else _at(shape, m.first_nonfinite_mismatch, target, golden, "first")
        )
    clause = clause or message
    return Comparison(
        status, message + place, m, **dtypes, standard=name, reason=reason, ratio=ratio, clause=clause, place=place
    )


def _overflowed(status: Status, m: Metrics, dtype: torch.dtype) -> tuple[Status, Reason, str] | None:
    """The target's inf where the golden too is beyond the dtype's range is said to be what it is, an overflow
    of the dtype and not an error: a warning (an fp16 step's scaled gradients overflow so, and a GradScaler then
    skips its optimizer step). None where there is none, or where the rest of the output is an error anyway.
    (Inf/nan the golden holds itself, carried from the inputs, agree: the rule grades the rest.)"""
    if status == ERROR or not m.overflows:
        return None
    top = torch.finfo(dtype.to_real() if dtype.is_complex else dtype).max
    return (
        WARNING,
        Reason.OVERFLOW,
        f"overflow: inf at {m.overflows} position(s), where the golden too is beyond "
        f"{honest_kernel.short_name(dtype)}'s range ({top:.6g}): the step overflowed (a GradScaler then skips "
        "its optimizer step)",
    )


def _rule_reason(m: Metrics, status: Status) -> Reason:
    """The code of ``judge``'s verdict: its first test is the non-finite one, then the standard's rule."""
    if m.nonfinite_mismatches > m.overflows:
        return Reason.NONFINITE_MISMATCH
    return Reason.PASSED if status == PASS else Reason.RULE_FAILED


def judge(
    m: Metrics,
    dtype: torch.dtype,
    standard: str = "default",
    *,
    cosine: float = DEFAULT_COSINE,
    max_abs: float = DEFAULT_MAX_ABS,
    reference: Metrics | None = None,
    api_class: str | None = None,
) -> tuple[Status, str]:
    """A standard's verdict on computed metrics: (status, reason); the reason is empty on pass."""
    if m.nonfinite_mismatches > m.overflows:
        return ERROR, f"inf/nan mismatch at {m.nonfinite_mismatches} position(s)"
    if m.max_abs_err is None:
        return PASS, ""  # every position holds the same non-finite value on both sides
    name = resolve(standard, api_class, reference is not None)
    ctx = Context(dtype=dtype, cosine=cosine, max_abs=max_abs, reference=reference, api_class=api_class)
    return STANDARDS[name](m, ctx)


def _at(
    shape: tuple[int, ...], flat: int | None, target: torch.Tensor, golden: torch.Tensor, which: str = "worst"
) -> str:
    """Where the worst element is, and both values there, as assert_close reports it."""
    if flat is None:
        return ""
    t, g = target.detach().cpu(), golden.detach().cpu()
    if t.is_complex():
        t, g = torch.view_as_real(t.resolve_conj()), torch.view_as_real(g.to(torch.complex128).resolve_conj())
        shape = tuple(t.shape)
    index = unravel(flat, shape)
    return f" ({which} at index {index}: target {t.reshape(-1)[flat].item()!r}, golden {g.reshape(-1)[flat].item()!r})"


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Flat index to a multi-index (torch.unravel_index imports sympy on first use: half a second)."""
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        index.append(i)
    return tuple(reversed(index))


# The grader's names before "compare" came to mean only two dumps compared (``precheck compare``): kept so that
# code written against them still runs; ``grade`` and ``grade_tree`` are the names to use.
compare = grade
compare_tree = grade_tree
