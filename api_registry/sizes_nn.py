"""Size rules (api_registry.sizes) for the calls of networks, signals and linear algebra whose outputs or
intermediates their numbers or the product of their tensors set: a convolution's padding and stride, a fold's
output_size, an FFT's ``n``, attention's L x S weights, a complete QR's Q, an advanced index broadcast from small
index tensors. Each reads its arguments as the API does (api_registry.size_args) and returns the elements made,
an upper estimate within a small factor.
"""

from __future__ import annotations

import math
from typing import Any

from api_registry.size_args import Rule, arg_at, broadcast_shape, count_of, numel_of, shape_of, tensors_in
from precheck.core.older_python import zip_strict

__all__ = ["RULES"]


def _per_dim(value: Any, dims: int) -> list[float]:
    """A kernel size, stride, padding or dilation: one number for every spatial dimension, or one each."""
    if isinstance(value, (list, tuple)):
        return [count_of(v) for v in value][:dims] or [1.0] * dims
    return [count_of(value)] * dims


def _windows(spatial: tuple, kernel: Any, stride: Any, padding: Any, dilation: Any) -> list[float]:
    """The positions a kernel takes along each spatial dimension (a convolution's, an unfold's)."""
    dims = len(spatial)
    if padding == "same":
        return [float(n) for n in spatial]
    pads = [0.0] * dims if padding == "valid" else _per_dim(padding, dims)
    return [
        max((n + 2 * p - d * (k - 1) - 1) // max(s, 1.0) + 1, 0.0)
        for n, k, s, p, d in zip_strict(
            spatial, _per_dim(kernel, dims), _per_dim(stride, dims), pads, _per_dim(dilation, dims)
        )
    ]


def _conv(args: tuple, kwargs: dict) -> float:
    """conv1d/2d/3d(input, weight, bias, stride, padding, dilation): padding and stride set the output's length."""
    x, w = shape_of(arg_at(args, kwargs, 0, "input")), shape_of(arg_at(args, kwargs, 1, "weight"))
    if not x or not w or len(w) < 3:
        return 1.0
    dims = len(w) - 2
    stride, padding = arg_at(args, kwargs, 3, "stride", 1), arg_at(args, kwargs, 4, "padding", 0)
    out = _windows(x[-dims:], w[2:], stride, padding, arg_at(args, kwargs, 5, "dilation", 1))
    return math.prod(x[: -dims - 1]) * w[0] * math.prod(out)


def _conv_transpose(args: tuple, kwargs: dict) -> float:
    """conv_transpose1d/2d/3d(input, weight, bias, stride, padding, output_padding, groups, dilation): each input
    position spreads ``stride`` apart, so a stride of 10^4 makes 10^4 times the input."""
    x, w = shape_of(arg_at(args, kwargs, 0, "input")), shape_of(arg_at(args, kwargs, 1, "weight"))
    if not x or not w or len(w) < 3:
        return 1.0
    dims = len(w) - 2
    groups = count_of(arg_at(args, kwargs, 6, "groups", 1))
    stride, padding = _per_dim(arg_at(args, kwargs, 3, "stride", 1), dims), arg_at(args, kwargs, 4, "padding", 0)
    extra, dilation = arg_at(args, kwargs, 5, "output_padding", 0), arg_at(args, kwargs, 7, "dilation", 1)
    lengths = [
        max((n - 1) * s - 2 * p + d * (k - 1) + e + 1, 0.0)
        for n, k, s, p, d, e in zip_strict(
            x[-dims:], w[2:], stride, _per_dim(padding, dims), _per_dim(dilation, dims), _per_dim(extra, dims),
        )
    ]  # fmt: skip
    return math.prod(x[: -dims - 1]) * w[1] * groups * math.prod(lengths)


def _convolution(args: tuple, kwargs: dict) -> float:
    """convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)."""
    if arg_at(args, kwargs, 6, "transposed", False) is not True:
        return _conv(args[:6], kwargs)
    order = (*args[:5], arg_at(args, kwargs, 7, "output_padding", 0), arg_at(args, kwargs, 8, "groups", 1))
    return _conv_transpose((*order, arg_at(args, kwargs, 5, "dilation", 1)), {})


def _im2col(args: tuple, kwargs: dict) -> float:
    """Functional.unfold(input, kernel_size, dilation, padding, stride): a column of C x kernel per position."""
    x = shape_of(arg_at(args, kwargs, 0, "input")) or (1, 1, 1)
    kernel = _per_dim(arg_at(args, kwargs, 1, "kernel_size", 1), 2)
    dilation, padding = arg_at(args, kwargs, 2, "dilation", 1), arg_at(args, kwargs, 3, "padding", 0)
    blocks = _windows(x[-2:], kernel, arg_at(args, kwargs, 4, "stride", 1), padding, dilation)
    return math.prod(x[:-2]) * math.prod(kernel) * math.prod(blocks)


def _fold(args: tuple, kwargs: dict) -> float:
    """Functional.fold(input, output_size, kernel_size): each (N, C x kernel) column summed into output_size."""
    x = shape_of(arg_at(args, kwargs, 0, "input")) or (1, 1)
    kernel = _per_dim(arg_at(args, kwargs, 2, "kernel_size", 1), 2)
    channels = x[-2] / max(math.prod(kernel), 1.0)
    return math.prod(x[:-2]) * channels * math.prod(_per_dim(arg_at(args, kwargs, 1, "output_size", 1), 2))


def _max_unpool(dims: int) -> Rule:
    """max_unpool1d/2d/3d(input, indices, kernel_size, stride, padding, output_size)."""

    def rule(args: tuple, kwargs: dict) -> float:
        x = shape_of(arg_at(args, kwargs, 0, "input")) or (1,) * (dims + 1)
        size = arg_at(args, kwargs, 5, "output_size")
        if isinstance(size, (list, tuple)) and size:
            return math.prod(x[:-dims]) * math.prod(count_of(n) for n in list(size)[-dims:])
        kernel = _per_dim(arg_at(args, kwargs, 2, "kernel_size", 1), dims)
        stride = arg_at(args, kwargs, 3, "stride")
        stride = kernel if stride is None else _per_dim(stride, dims)
        pads = _per_dim(arg_at(args, kwargs, 4, "padding", 0), dims)
        lengths = [(n - 1) * s - 2 * p + k for n, s, p, k in zip_strict(x[-dims:], stride, pads, kernel)]
        return math.prod(x[:-dims]) * math.prod(max(n, 0.0) for n in lengths)

    return rule


def _grid_sample(args: tuple, kwargs: dict) -> float:
    """grid_sample(input (N, C, ...), grid (N, ..., 2 or 3)): every channel sampled at every point of the grid."""
    x, grid = shape_of(arg_at(args, kwargs, 0, "input")), shape_of(arg_at(args, kwargs, 1, "grid"))
    if not x or not grid:
        return 1.0
    return x[1] * math.prod(grid[:-1]) if len(x) > 1 else math.prod(grid[:-1])


def _affine_grid(args: tuple, kwargs: dict) -> float:
    """affine_grid(theta, size (N, C, H, W) or (N, C, D, H, W)): a point of 2 or 3 coordinates per position."""
    size = arg_at(args, kwargs, 1, "size", ())
    size = [count_of(n) for n in size] if isinstance(size, (list, tuple)) else []
    return size[0] * math.prod(size[2:]) * (len(size) - 2) if len(size) > 2 else 1.0


def _attention(args: tuple, kwargs: dict) -> float:
    """scaled_dot_product_attention(q, k, v): the L x S weights of every batch and head (the float64 golden
    computes them whole) and the output."""
    q, k, v = (shape_of(arg_at(args, kwargs, i, name)) for i, name in enumerate(("query", "key", "value")))
    if not q or not k or not v:
        return 1.0
    batch = math.prod(broadcast_shape(q[:-2], k[:-2], v[:-2]))
    return float(batch * q[-2] * (k[-2] + v[-1]))


def _fft(half: bool, inverse_half: bool) -> Rule:
    """fft/ifft/rfft/irfft/hfft/ihfft(input, n, dim): ``n`` points along ``dim`` (rfft keeps n // 2 + 1)."""

    def rule(args: tuple, kwargs: dict) -> float:
        x = shape_of(arg_at(args, kwargs, 0, "input")) or (1,)
        dim = arg_at(args, kwargs, 2, "dim", -1)
        length = x[dim] if isinstance(dim, int) and x else 1
        n = arg_at(args, kwargs, 1, "n")
        points = count_of(n) if n is not None else (2.0 * length if inverse_half else float(length))
        per_row = points // 2 + 1 if half else points
        return math.prod(x) / max(length, 1) * per_row

    return rule


def _fftn(inverse_half: bool) -> Rule:
    """fft2/fftn and their inverses and real forms (input, s, dim): ``s`` points along the last len(s) dims."""

    def rule(args: tuple, kwargs: dict) -> float:
        x = shape_of(arg_at(args, kwargs, 0, "input")) or (1,)
        s = arg_at(args, kwargs, 1, "s")
        if not isinstance(s, (list, tuple)) or not s:
            return math.prod(x) * (2.0 if inverse_half else 1.0)
        kept = math.prod(x[: max(len(x) - len(s), 0)])
        return kept * math.prod(count_of(n) for n in s) * (2.0 if inverse_half else 1.0)

    return rule


def _stft(args: tuple, kwargs: dict) -> float:
    """stft(input, n_fft, hop_length): n_fft // 2 + 1 bins (up to n_fft without onesided) per frame, hop_length
    apart."""
    x = shape_of(arg_at(args, kwargs, 0, "input")) or (1,)
    n_fft = count_of(arg_at(args, kwargs, 1, "n_fft", 1))
    hop = arg_at(args, kwargs, 2, "hop_length")
    hop = max(count_of(hop) if hop is not None else n_fft // 4, 1.0)
    frames = (x[-1] + (n_fft if kwargs.get("center", True) is not False else 0) - n_fft) // hop + 1
    return math.prod(x[:-1]) * max(frames, 0.0) * (n_fft // 2 + 1) * 2  # one-sided or not


def _istft(args: tuple, kwargs: dict) -> float:
    """istft(input (freq, frames), n_fft, hop_length, ..., length): ``length`` samples, or frames x hop."""
    x = shape_of(arg_at(args, kwargs, 0, "input")) or (1, 1)
    n_fft = count_of(arg_at(args, kwargs, 1, "n_fft", 1))
    hop = arg_at(args, kwargs, 2, "hop_length")
    hop = max(count_of(hop) if hop is not None else n_fft // 4, 1.0)
    length = kwargs.get("length", args[8] if len(args) > 8 else None)
    samples = count_of(length) if length is not None else (x[-1] - 1) * hop + n_fft
    return math.prod(x[:-2]) * samples


def _cov(args: tuple, kwargs: dict) -> float:
    """cov/corrcoef(input (variables, observations)): a variables x variables matrix."""
    x = shape_of(arg_at(args, kwargs, 0, "input")) or (1,)
    return float(x[0] ** 2) if len(x) == 2 else 1.0


def _inner(args: tuple, kwargs: dict) -> float:
    """inner(a, b): every row of one with every row of the other (a scalar scales the other whole)."""
    a, b = shape_of(arg_at(args, kwargs, 0, "input")), shape_of(arg_at(args, kwargs, 1, "other"))
    if a is None or b is None:
        return 1.0
    if not a or not b:
        return float(math.prod(a) * math.prod(b))
    return float(math.prod(a[:-1]) * math.prod(b[:-1]))


def _take_along_dim(args: tuple, kwargs: dict) -> float:
    """take_along_dim(input, indices, dim): the two broadcast, the indices' length along ``dim``."""
    x, i = shape_of(arg_at(args, kwargs, 0, "input")), shape_of(arg_at(args, kwargs, 1, "indices"))
    dim = arg_at(args, kwargs, 2, "dim")
    if x is None or i is None:
        return 1.0
    if not isinstance(dim, int) or len(x) != len(i) or not x:
        return numel_of(arg_at(args, kwargs, 1, "indices"))
    x = tuple(n if d != dim % len(x) else i[d] for d, n in enumerate(x))
    return float(math.prod(broadcast_shape(x, i)))


def _index_select(args: tuple, kwargs: dict) -> float:
    """index_select(input, dim, index): the input with ``dim`` as long as the index."""
    x = shape_of(arg_at(args, kwargs, 0, "input")) or (1,)
    dim = arg_at(args, kwargs, 1, "dim", 0)
    length = x[dim] if isinstance(dim, int) and x else 1
    return math.prod(x) / max(length, 1) * numel_of(arg_at(args, kwargs, 2, "index"))


def _getitem(args: tuple, kwargs: dict) -> float:
    """``x[index]``: a slice makes at most ``x``; index tensors broadcast together, one element of the rest of
    ``x`` per index (x[rows, cols] of a (30, 1) and a (1, 40) index: 1200 of any ``x``)."""
    x = arg_at(args, kwargs, 0, "self")
    index = arg_at(args, kwargs, 1, "indices")
    indexes = tensors_in(index if isinstance(index, (list, tuple)) else [index])
    if not indexes:
        return numel_of(x)
    shape = shape_of(x) or (1,)
    taken = math.prod(shape[: len(indexes)]) if len(shape) >= len(indexes) else 1
    made = math.prod(broadcast_shape(*(shape_of(t) for t in indexes))) * math.prod(shape) / max(taken, 1)
    return max(numel_of(x), made)


def _decomposition(args: tuple, kwargs: dict, complete: bool) -> tuple[float, float, float, float]:
    """(batch, m, n, k) of a (..., m, n) matrix, k = m where ``complete`` else min(m, n)."""
    a = shape_of(arg_at(args, kwargs, 0, "A", kwargs.get("input"))) or (1, 1)
    m, n = (a[-2], a[-1]) if len(a) >= 2 else (1, 1)
    return math.prod(a[:-2]), m, n, (m if complete else min(m, n))


def _qr(args: tuple, kwargs: dict) -> float:
    """linalg.qr(A, mode) / qr(A, some): Q is m x m when complete (an 8000 x 1 column makes 64M)."""
    mode = arg_at(args, kwargs, 1, "mode", "reduced")
    complete = mode == "complete" or kwargs.get("some", args[1] if len(args) > 1 else True) is False
    batch, m, n, k = _decomposition(args, kwargs, complete)
    return batch * (m * k + k * n)


def _svd(full_default: bool) -> Rule:
    """linalg.svd(A, full_matrices=True) / svd(A, some=True): U m x m and Vh n x n when full."""

    def rule(args: tuple, kwargs: dict) -> float:
        flag = arg_at(args, kwargs, 1, "full_matrices" if full_default else "some", True)
        full = flag is not False if full_default else flag is False
        batch, m, n, k = _decomposition(args, kwargs, full)
        return batch * (m * k + min(m, n) + (n if full else k) * n)

    return rule


def _embedding_bag(args: tuple, kwargs: dict) -> float:
    """embedding_bag(input, weight, offsets): a row of the weight per bag (per offset, or per row of a 2-D input)."""
    x, w = shape_of(arg_at(args, kwargs, 0, "input")), shape_of(arg_at(args, kwargs, 1, "weight"))
    offsets = arg_at(args, kwargs, 2, "offsets")
    bags = numel_of(offsets) if offsets is not None else (x[0] if x and len(x) == 2 else 1)
    return bags * (w[-1] if w else 1) * 2  # the output and, in max mode, the index of each of its elements


def _ctc_loss(args: tuple, kwargs: dict) -> float:
    """ctc_loss(log_probs (T, N, C), targets (N, S)): the alphas (and betas) of T x N x (2S + 1)."""
    lp, targets = shape_of(arg_at(args, kwargs, 0, "log_probs")), shape_of(arg_at(args, kwargs, 1, "targets"))
    if not lp or targets is None:
        return 1.0
    batch = lp[1] if len(lp) == 3 else 1
    longest = targets[-1] if len(targets) == 2 else math.prod(targets)
    return 2.0 * lp[0] * batch * (2 * longest + 1) + math.prod(lp)


RULES: dict[str, Rule] = {
    **dict.fromkeys(("conv1d", "conv2d", "conv3d"), _conv),
    **dict.fromkeys(("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"), _conv_transpose),
    **dict.fromkeys(("convolution", "_convolution"), _convolution),
    "Functional.unfold": _im2col,
    **dict.fromkeys(("Functional.fold", "Torch.col2im", "Aten.col2im"), _fold),
    **{f"max_unpool{d}d": _max_unpool(d) for d in (1, 2, 3)},
    "grid_sample": _grid_sample,
    "affine_grid": _affine_grid,
    "scaled_dot_product_attention": _attention,
    **dict.fromkeys(("fft.fft", "fft.ifft", "fft.ihfft"), _fft(half=False, inverse_half=False)),
    "fft.rfft": _fft(half=True, inverse_half=False),
    **dict.fromkeys(("fft.irfft", "fft.hfft"), _fft(half=False, inverse_half=True)),
    **dict.fromkeys(("fft.fft2", "fft.ifft2", "fft.fftn", "fft.ifftn", "fft.rfft2", "fft.rfftn"), _fftn(False)),
    **dict.fromkeys(("fft.irfft2", "fft.irfftn", "fft.hfft2", "fft.hfftn"), _fftn(True)),
    "stft": _stft,
    "istft": _istft,
    **dict.fromkeys(("cov", "corrcoef"), _cov),
    "inner": _inner,
    "take_along_dim": _take_along_dim,
    "index_select": _index_select,
    "__getitem__": _getitem,
    **dict.fromkeys(("linalg.qr", "qr"), _qr),
    "linalg.svd": _svd(full_default=True),
    "svd": _svd(full_default=False),
    "embedding_bag": _embedding_bag,
    "ctc_loss": _ctc_loss,
}
