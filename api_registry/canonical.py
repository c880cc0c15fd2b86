"""Outputs that two correct runs may legitimately disagree on, put in a form they must agree on.

A sort of ``[1, 1]`` may return indices ``[0, 1]`` on one device and ``[1, 0]`` on another; an eigenvector is
only defined up to its sign; ``empty`` returns whatever the memory held. Comparing those raw would grade correct
devices as errors, so each side's outputs are rewritten, with that side's own inputs, before grading:

- indices of a selection (sort, topk, kthvalue, mode, median, max/min along a dim, cummax, argmax ...) become the
  input values they point at: tied indices select equal values, a wrong index selects a different one;
- unordered ``unique`` is sorted, its inverse becomes the values it reconstructs;
- eigen- and singular vectors get a fixed sign (the largest entry of each vector positive), Q of a QR a positive
  diagonal of R, complex eigenvectors a fixed phase;
- uninitialised outputs (``empty`` and friends) become their shape; a generator's seed and offset are dropped.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from api_registry.calls import arg

Canonical = Callable[[tuple, dict, list], list]


class IndexOutOfRange(IndexError):
    """An index output pointing outside the input it selects from: no value of the input is there to compare, and
    Python would read a negative one from the end (an argmax of -1 as the last element). ``output`` is its place
    among the outputs, so a caller can still grade the others."""

    def __init__(self, output: int, detail: str) -> None:
        super().__init__(f"output {output}: {detail}")
        self.output, self.detail = output, detail


def _within(index: torch.Tensor, size: int, output: int, what: str) -> None:
    """Raises IndexOutOfRange, naming the first offending index and where it sits, when any of ``index`` is
    outside [0, size)."""
    bad = (index < 0) | (index >= size)
    count = int(bad.sum())
    if not count:
        return
    where = tuple(int(k) for k in bad.nonzero()[0])
    share = f"{count} of {index.numel()} ({100 * count / index.numel():.1f}%)"
    raise IndexOutOfRange(
        output, f"{share} indices outside [0, {size}) ({what}): the first is {int(index[where])} at index {where}"
    )


def _input(args: tuple, kwargs: dict) -> torch.Tensor | None:
    x = arg(args, kwargs, 0, "input", None)
    if x is None:
        x = kwargs.get("self")
    return x if isinstance(x, torch.Tensor) else None


def _picked(x: torch.Tensor, dim: int, index: torch.Tensor, output: int) -> torch.Tensor:
    """The values of ``x`` that ``index`` (output number ``output``) selects along ``dim`` (index may have lost
    that dim: keepdim=False); IndexOutOfRange for an index no value of ``x`` is at."""
    x = x.detach()
    if x.dim() == 0:
        _within(index, 1, output, "a 0-dim input")
        return x.expand(index.shape).clone()
    if -x.dim() <= dim < x.dim():
        _within(index, x.shape[dim], output, f"the size of dim {dim % x.dim()} of the input, of shape {tuple(x.shape)}")
    squeezed = index.dim() < x.dim()
    index = index.unsqueeze(dim) if squeezed else index
    picked = x.gather(dim, index.to(device=x.device, dtype=torch.int64))
    return picked.squeeze(dim) if squeezed else picked


def selection(dim_pos: int, dim_default: int | None) -> Canonical:
    """(values, indices) outputs, or indices alone (argsort): indices become the values they select."""

    def canonical(args: tuple, kwargs: dict, outputs: list) -> list:
        x = _input(args, kwargs)
        dim = arg(args, kwargs, dim_pos, "dim", dim_default)
        index_at = [i for i, o in enumerate(outputs) if isinstance(o, torch.Tensor) and o.dtype == torch.int64]
        if x is None or not isinstance(dim, int) or len(index_at) != 1:
            return outputs  # the reduce-everything form (max(x)) has no index to rewrite
        i = index_at[0]
        return [*outputs[:i], _picked(x, dim, outputs[i], i), *outputs[i + 1 :]]

    return canonical


def arg_extreme(args: tuple, kwargs: dict, outputs: list) -> list:
    """argmax / argmin: the values at the returned positions (over the flattened input when dim is None)."""
    x = _input(args, kwargs)
    dim = arg(args, kwargs, 1, "dim", None)
    if x is None or len(outputs) != 1 or not isinstance(outputs[0], torch.Tensor):
        return outputs
    if dim is None:
        _within(outputs[0], x.numel(), 0, f"the {x.numel()} elements of the input, flattened")
        return [x.detach().reshape(-1)[outputs[0].to(x.device)]]
    return [_picked(x, dim, outputs[0], 0)]


def unique(args: tuple, kwargs: dict, outputs: list) -> list:
    """``unique(sorted=False)`` may list values in any order: sort them, and keep inverse and counts consistent
    (the inverse becomes the input it reconstructs)."""
    values = outputs[0]
    if not isinstance(values, torch.Tensor) or values.dim() != 1 or arg(args, kwargs, 1, "sorted", True):
        return outputs
    order = torch.argsort(values, stable=True)
    rest = []
    for k, extra in enumerate(outputs[1:], 1):
        if isinstance(extra, torch.Tensor) and extra.dim() == 1 and extra.shape == values.shape:
            rest.append(extra[order])  # counts follow the values
        elif isinstance(extra, torch.Tensor):
            _within(extra, len(values), k, f"the {len(values)} unique values")
            rest.append(values[extra])  # inverse: the reconstructed input
        else:
            rest.append(extra)
    return [values[order], *rest]


def _sign_of_columns(vectors: torch.Tensor) -> torch.Tensor:
    """+1 or -1 per column (last dim of the transposed view): the sign of its largest-magnitude entry."""
    if vectors.shape[-2] == 0:
        return torch.ones_like(vectors[..., :1, :])
    biggest = vectors.abs().argmax(dim=-2, keepdim=True)
    sign = torch.sign(vectors.gather(-2, biggest))
    return torch.where(sign == 0, torch.ones_like(sign), sign)


def eigh(args: tuple, kwargs: dict, outputs: list) -> list:
    """(eigenvalues, eigenvectors as columns): each vector's largest entry made positive."""
    if len(outputs) != 2 or not isinstance(outputs[1], torch.Tensor) or outputs[1].dim() < 2:
        return outputs
    vectors = outputs[1]
    if vectors.is_complex():
        return [outputs[0], _fixed_phase(vectors)]
    return [outputs[0], vectors * _sign_of_columns(vectors)]


def _fixed_phase(vectors: torch.Tensor) -> torch.Tensor:
    if vectors.shape[-2] == 0:
        return vectors
    biggest = vectors.abs().argmax(dim=-2, keepdim=True)
    pivot = vectors.gather(-2, biggest)
    phase = pivot / pivot.abs().clamp_min(torch.finfo(pivot.real.dtype).tiny)
    return vectors / phase


def svd(vh_is_transposed: bool) -> Canonical:
    """(U, S, Vh) of linalg.svd, or (U, S, V) of torch.svd: U's columns get a fixed sign and V follows."""

    def canonical(args: tuple, kwargs: dict, outputs: list) -> list:
        if len(outputs) != 3 or not all(isinstance(o, torch.Tensor) for o in outputs) or outputs[0].dim() < 2:
            return outputs
        u, s, v = outputs
        if u.is_complex():
            return outputs  # complex singular vectors are defined up to a phase per pair: kept as they are
        sign = _sign_of_columns(u)  # (..., 1, k)
        k = sign.shape[-1]
        u = u * sign
        v = v * sign.transpose(-2, -1)[..., :k, :] if vh_is_transposed else v * sign[..., :k]
        return [u, s, v]

    return canonical


def qr(args: tuple, kwargs: dict, outputs: list) -> list:
    """(Q, R): signs chosen so that R's diagonal is non-negative."""
    if (
        len(outputs) != 2
        or not all(isinstance(o, torch.Tensor) and o.dim() >= 2 for o in outputs)
        or outputs[0].is_complex()
    ):
        return outputs
    q, r = outputs
    k = min(q.shape[-1], r.shape[-2])
    diag = torch.diagonal(r, dim1=-2, dim2=-1)[..., :k]
    sign = torch.where(diag < 0, -torch.ones_like(diag), torch.ones_like(diag))
    return [q[..., :k] * sign.unsqueeze(-2), r[..., :k, :] * sign.unsqueeze(-1)]


def eig(args: tuple, kwargs: dict, outputs: list) -> list:
    """(eigenvalues, eigenvectors) of a general matrix: no order is promised, so both are sorted by eigenvalue
    (real part, then imaginary), and each vector gets a fixed phase."""
    if len(outputs) != 2 or not all(isinstance(o, torch.Tensor) for o in outputs) or outputs[1].dim() < 2:
        return outputs
    values, vectors = outputs
    order = _complex_order(values)
    vectors = vectors.gather(-1, order.unsqueeze(-2).expand(vectors.shape))
    return [values.gather(-1, order), _fixed_phase(vectors)]


def eigvals(args: tuple, kwargs: dict, outputs: list) -> list:
    if len(outputs) != 1 or not isinstance(outputs[0], torch.Tensor) or outputs[0].dim() < 1:
        return outputs
    return [outputs[0].gather(-1, _complex_order(outputs[0]))]


def _complex_order(values: torch.Tensor) -> torch.Tensor:
    """Order by real part, then imaginary part, on values rounded to float32 so that the two sides' rounding does
    not reorder near-equal eigenvalues differently."""
    real = values.real.float() if values.is_complex() else values.float()
    imag = values.imag.float() if values.is_complex() else torch.zeros_like(real)
    by_imag = torch.argsort(imag, dim=-1, stable=True)
    return by_imag.gather(-1, torch.argsort(real.gather(-1, by_imag), dim=-1, stable=True))


def uninitialised(args: tuple, kwargs: dict, outputs: list) -> list:
    """``empty`` and friends promise a shape, never values (the dtype is the golden's float64 by design)."""
    return [tuple(o.shape) if isinstance(o, torch.Tensor) else o for o in outputs]


def generator_state(*places: int) -> Canonical:
    """Outputs that report the random generator's seed and offset (npu_fusion_attention) are not results."""

    def canonical(args: tuple, kwargs: dict, outputs: list) -> list:
        return [None if i in places else o for i, o in enumerate(outputs)]

    return canonical


# Base API name (without prefix and overload) -> canonicaliser, for every prefix.
_VALUES_AND_INDICES = {
    "sort": selection(1, -1),
    "argsort": selection(1, -1),
    "topk": selection(2, -1),
    "kthvalue": selection(2, -1),
    "mode": selection(1, -1),
    "median": selection(1, None),
    "nanmedian": selection(1, None),
    "max": selection(1, None),
    "min": selection(1, None),
    "cummax": selection(1, None),
    "cummin": selection(1, None),
}
CANONICAL: dict[str, Canonical] = {
    **_VALUES_AND_INDICES,
    "argmax": arg_extreme,
    "argmin": arg_extreme,
    "unique": unique,
    "linalg.eigh": eigh,
    "linalg.svd": svd(True),
    "svd": svd(False),
    "linalg.qr": qr,
    "qr": qr,
    "linalg.eig": eig,
    "linalg.eigvals": eigvals,
    "npu_fusion_attention": generator_state(4, 5),
    **{
        name: uninitialised
        for name in ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted")
    },
}


def canonical_for(base: str) -> Canonical | None:
    """The rewrite for an API's base name (``sort``, ``linalg.eigh``), None when its outputs are unambiguous."""
    return CANONICAL.get(base)
