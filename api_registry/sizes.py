"""How many elements a call makes when its arguments, not its recorded outputs, set the size of what it makes.

Two kinds of call turn a small record into gigabytes, whatever output shape (or statistics) a dump records:
- plain numbers set the size: ``Tensor.repeat(x, 10**9)``, ``torch.zeros(10**6, 10**6)``, ``torch.arange(10**12)``,
  ``bincount(x, minlength=3e8)``, ``hann_window(10**9)``, ``one_hot(x, 10**6)``, ``histc(x, bins=10**9)``;
- the output is a product of the inputs' sizes: ``outer`` of two 10^5 vectors, ``kron``, ``cdist``, ``einsum`` or
  ``matmul`` with broadcast batches, ``diag`` of a vector, ``add`` of a column and a row.
These rules read the arguments the way the API does, without running anything (a meta-device run would be exact
but imports torch's Python decompositions: seconds per process). A statistics record's integer tensor counts by its
recorded Max (``bincount``'s length, ``one_hot``'s classes) and Mean (``repeat_interleave``'s repeats), as the
generated tensor will hold them. Every other API's outputs are bounded by its tensors.

Tensors are read by duck typing (``.shape``, ``.stats``), so the rules work on recorded specs as well as on tensors.
Rules are keyed by the dump name, or by its name without prefix (``bincount`` serves Torch., Tensor., VF. and
Aten.bincount.default alike, whose arguments come in the same order).
"""

from __future__ import annotations

import math
from typing import Any

from api_registry import catalogue, sizes_nn
from api_registry.classes import api_class, base_name
from api_registry.size_args import (
    Rule,
    arg_at,
    broadcast_shape,
    count_of,
    number_in,
    numel_of,
    shape_of,
    size_product,
    stat_of,
    tensors_in,
)

__all__ = ["output_elements"]

# ------------------------------------------------------------------------------------- sizes from plain numbers


def _factory(args: tuple, kwargs: dict) -> float:
    return size_product(args or (kwargs.get("size", ()),))


def _sized_at(place: int) -> Rule:
    """full(size, value), new_full(self, size, value), as_strided(self, size, stride): the size at ``place``."""

    def rule(args: tuple, kwargs: dict) -> float:
        return size_product((arg_at(args, kwargs, place, "size", ()),))

    return rule


def _after_self(args: tuple, kwargs: dict) -> float:
    """new_zeros(self, *size), expand(self, *sizes), resize_(self, *sizes)."""
    return size_product(args[1:] or (kwargs.get("size", ()),))


def _repeat(args: tuple, kwargs: dict) -> float:
    counts = args[1:] or (kwargs.get("repeats", kwargs.get("dims", ())),)
    return numel_of(arg_at(args, kwargs, 0, "input")) * size_product(counts)


def _arange(args: tuple, kwargs: dict) -> float:
    numbers = [a for a in map(number_in, args) if not hasattr(a, "shape")]
    start, end, step = 0.0, 0.0, 1.0
    if len(numbers) == 1:
        end = count_of(numbers[0])
    elif len(numbers) >= 2:
        start, end = count_of(numbers[0]), count_of(numbers[1])
        step = count_of(numbers[2]) if len(numbers) > 2 else count_of(kwargs.get("step", 1))
    else:
        end = count_of(kwargs.get("end", 0))
    return abs(end - start) / max(step, 1e-300) + 1


def _count(place: int, name: str, default: Any = 1) -> Rule:
    """linspace's steps, randperm's n, a window's length, histc's bins: one number at ``place``."""

    def rule(args: tuple, kwargs: dict) -> float:
        return count_of(arg_at(args, kwargs, place, name, default))

    return rule


def _eye(args: tuple, kwargs: dict) -> float:
    n = count_of(arg_at(args, kwargs, 0, "n", 1))
    m = arg_at(args, kwargs, 1, "m")
    return n * (count_of(m) if m is not None else n)


def _size_arg(args: tuple, kwargs: dict) -> float:
    """randint(high, size) / randint(low, high, size) / normal(mean, std, size): the list argument."""
    lists = [a for a in args if isinstance(a, (tuple, list))]
    return size_product((lists[0] if lists else kwargs.get("size", ()),))


def _pad(args: tuple, kwargs: dict) -> float:
    shape = list(shape_of(arg_at(args, kwargs, 0, "input")) or ())
    pad = arg_at(args, kwargs, 1, "pad", ())
    pad = tuple(pad) if isinstance(pad, (tuple, list)) else ()
    for i in range(min(len(pad) // 2, len(shape))):
        shape[-1 - i] = max(shape[-1 - i] + count_of(pad[2 * i]) + count_of(pad[2 * i + 1]), 0)
    return float(math.prod(shape))


def _repeat_interleave(args: tuple, kwargs: dict) -> float:
    """Each element repeated: a number of times, or by a tensor of counts (its recorded Mean, its Max where no
    Mean was recorded); ``repeat_interleave(counts)`` alone makes the sum of its counts."""
    x, repeats = arg_at(args, kwargs, 0, "input"), arg_at(args, kwargs, 1, "repeats")
    if repeats is None:
        x, repeats = None, x
    if shape_of(repeats) is None:
        return numel_of(x) * max(count_of(repeats), 1.0)
    per = stat_of(repeats, "mean") or stat_of(repeats, "max") or 1.0
    return max(numel_of(x) if x is not None else 0.0, numel_of(repeats)) * max(per, 1.0)


def _one_hot(args: tuple, kwargs: dict) -> float:
    """num_classes, or (-1) the input's Max + 1."""
    x = arg_at(args, kwargs, 0, "input")
    classes = arg_at(args, kwargs, 1, "num_classes", -1)
    if isinstance(classes, int) and classes < 0:
        top = stat_of(x, "max")
        classes = top + 1 if top is not None else 1
    return numel_of(x) * max(count_of(classes), 1.0)


def _bincount(args: tuple, kwargs: dict) -> float:
    """max(minlength, the input's Max + 1)."""
    top = stat_of(arg_at(args, kwargs, 0, "input"), "max")
    return max(count_of(arg_at(args, kwargs, 2, "minlength", 0)), (top + 1) if top is not None else 1.0)


def _histogram(args: tuple, kwargs: dict) -> float:
    """The counts and the edges: bins, or a tensor of edges."""
    bins = arg_at(args, kwargs, 1, "bins", 100)
    return 2 * (numel_of(bins) if shape_of(bins) is not None else count_of(bins)) + 1


def _histogramdd(args: tuple, kwargs: dict) -> float:
    dims = (shape_of(arg_at(args, kwargs, 0, "input")) or (1,))[-1]
    bins = arg_at(args, kwargs, 1, "bins", 10)
    return math.prod(count_of(b) for b in bins) if isinstance(bins, (list, tuple)) else count_of(bins) ** dims


def _indices(args: tuple, kwargs: dict) -> float:
    """tril/triu_indices(row, col, offset): two rows of at most row * min(row + |offset|, col) indices."""
    row, col = count_of(arg_at(args, kwargs, 0, "row", 1)), count_of(arg_at(args, kwargs, 1, "col", 1))
    return 2 * row * min(row + count_of(arg_at(args, kwargs, 2, "offset", 0)), col)


def _vander(args: tuple, kwargs: dict) -> float:
    x = arg_at(args, kwargs, 0, "x")
    n = arg_at(args, kwargs, 1, "N")
    return numel_of(x) * (count_of(n) if n is not None else (shape_of(x) or (1,))[-1])


def _combinations(args: tuple, kwargs: dict) -> float:
    """C(n, r) r-tuples (with replacement C(n + r - 1, r)), counted in logarithms so 10^5 choose 10^3 is inf."""
    n = numel_of(arg_at(args, kwargs, 0, "input"))
    r = count_of(arg_at(args, kwargs, 1, "r", 2))
    if arg_at(args, kwargs, 2, "with_replacement", False) is True:
        n = n + r - 1
    if r > n:
        return 0.0
    try:
        return r * math.exp(math.lgamma(n + 1) - math.lgamma(r + 1) - math.lgamma(n - r + 1))
    except OverflowError:
        return math.inf


def _multinomial(args: tuple, kwargs: dict) -> float:
    shape = shape_of(arg_at(args, kwargs, 0, "input")) or (1,)
    return math.prod(shape[:-1]) * count_of(arg_at(args, kwargs, 1, "num_samples", 1))


def _nonzero_static(args: tuple, kwargs: dict) -> float:
    return count_of(kwargs.get("size", args[1] if len(args) > 1 else 1)) * len(shape_of(args[0]) or (1,))


def _resized(args: tuple, kwargs: dict) -> float:
    """interpolate/upsample(input, size, scale_factor) and adaptive pools(input, output_size): the batch and
    channels times the asked spatial size (None in a size keeps that dimension)."""
    shape = shape_of(arg_at(args, kwargs, 0, "input")) or ()
    size = arg_at(args, kwargs, 1, "size", kwargs.get("output_size"))
    spatial = shape[2:] if len(shape) > 2 else shape[1:]
    outer = math.prod(shape) / max(math.prod(spatial), 1)
    if size is None:
        scale = arg_at(args, kwargs, 2, "scale_factor", 1)
        scales = scale if isinstance(scale, (list, tuple)) else [scale] * len(spatial)
        return math.prod(shape) * math.prod(count_of(s) for s in scales)
    sizes = size if isinstance(size, (list, tuple)) else [size] * len(spatial)
    return outer * math.prod(count_of(s) if s is not None else d for s, d in zip(sizes, spatial))


def _unfold(args: tuple, kwargs: dict) -> float:
    """Tensor.unfold(dimension, size, step): every window of ``size`` elements ``step`` apart."""
    shape = shape_of(args[0]) or (1,)
    dim, size = int(arg_at(args, kwargs, 1, "dimension", 0)), count_of(arg_at(args, kwargs, 2, "size", 1))
    step = max(count_of(arg_at(args, kwargs, 3, "step", 1)), 1.0)
    return math.prod(shape) / max(shape[dim], 1) * ((max(shape[dim] - size, 0)) // step + 1) * size


# ------------------------------------------------------------------------- outputs that are products of inputs


def _product(*places: tuple[int, str]) -> Rule:
    """outer/ger(a, b), kron(a, b), addr(input, vec1, vec2): the product of the tensors' sizes."""

    def rule(args: tuple, kwargs: dict) -> float:
        return math.prod(numel_of(arg_at(args, kwargs, i, name)) for i, name in places)

    return rule


def _all_products(args: tuple, kwargs: dict) -> float:
    """cartesian_prod(*tensors), meshgrid(*tensors): every combination, one element per tensor."""
    tensors = tensors_in(args)
    return math.prod(numel_of(t) for t in tensors) * len(tensors)


def _broadcast_rule(args: tuple, kwargs: dict) -> float:
    """An elementwise call (add, where, eq, mse_loss ...): its tensors broadcast together."""
    tensors = tensors_in(args) + tensors_in(list(kwargs.values()))
    return float(math.prod(broadcast_shape(*(shape_of(t) for t in tensors))))


def _broadcast_each(args: tuple, kwargs: dict) -> float:
    """broadcast_tensors(*tensors): each one broadcast to their common shape."""
    return _broadcast_rule(args, kwargs) * len(tensors_in(args))


def _matmul_shape(left: tuple, right: tuple) -> tuple:
    """The output shape of ``left @ right`` (1-D operands as torch.matmul reads them, batches broadcast)."""
    a = (1, *left) if len(left) == 1 else left
    b = (*right, 1) if len(right) == 1 else right
    batch = broadcast_shape(a[:-2], b[:-2])
    rows = () if len(left) == 1 else (a[-2],)
    cols = () if len(right) == 1 else (b[-1],)
    return (*batch, *rows, *cols)


def _matmul(a: int, b: int) -> Rule:
    """matmul, mm, bmm (0, 1), addmm/baddbmm/addbmm (1, 2), __rmatmul__ (1, 0): the product's shape."""

    def rule(args: tuple, kwargs: dict) -> float:
        shapes = [shape_of(args[i]) if len(args) > i else None for i in (a, b)]
        return float(math.prod(_matmul_shape(*shapes))) if None not in shapes else 1.0

    return rule


def _chain(args: tuple, kwargs: dict) -> float:
    """chain_matmul(*matrices), multi_dot(tensors): the first's rows by the last's columns (at least)."""
    shapes = [shape_of(t) for t in tensors_in(args)]
    return float(math.prod(_matmul_shape(shapes[0], shapes[-1]))) if shapes else 1.0


def _linear(args: tuple, kwargs: dict) -> float:
    x, w = shape_of(arg_at(args, kwargs, 0, "input")), shape_of(arg_at(args, kwargs, 1, "weight"))
    return float(math.prod(x[:-1]) * (w[0] if len(w) > 1 else 1)) if x and w else 1.0


def _embedding(indices: int, weight: int) -> Rule:
    """Functional.embedding(input, weight), Torch.embedding(weight, input): a row per index."""

    def rule(args: tuple, kwargs: dict) -> float:
        rows = shape_of(arg_at(args, kwargs, weight, "weight")) or (1,)
        return numel_of(arg_at(args, kwargs, indices, "input")) * rows[-1]

    return rule


def _cdist(args: tuple, kwargs: dict) -> float:
    a, b = shape_of(arg_at(args, kwargs, 0, "x1")), shape_of(arg_at(args, kwargs, 1, "x2"))
    return float(math.prod(broadcast_shape(a[:-2], b[:-2])) * a[-2] * b[-2]) if a and b else 1.0


def _pdist(args: tuple, kwargs: dict) -> float:
    n = (shape_of(arg_at(args, kwargs, 0, "input")) or (1,))[0]
    return n * (n - 1) / 2


def _tensordot(args: tuple, kwargs: dict) -> float:
    a, b = shape_of(arg_at(args, kwargs, 0, "a")), shape_of(arg_at(args, kwargs, 1, "b"))
    dims = arg_at(args, kwargs, 2, "dims", 2)
    if not a or not b:
        return 1.0
    if isinstance(dims, (list, tuple)) and len(dims) == 2:
        left, right = ([d] if isinstance(d, int) else d for d in dims)
        kept_a = math.prod(n for i, n in enumerate(a) if i not in {int(d) % len(a) for d in left})
        return kept_a * math.prod(n for i, n in enumerate(b) if i not in {int(d) % len(b) for d in right})
    k = int(count_of(dims))
    return float(math.prod(a[: len(a) - k]) * math.prod(b[k:]))


def _einsum(args: tuple, kwargs: dict) -> float:
    """The output subscripts' sizes (``i,j->ij`` of two 10^5 vectors: 10^10), an ellipsis its broadcast dims."""
    equation = args[0] if args and isinstance(args[0], str) else ""
    shapes = [shape_of(t) for t in tensors_in(args[1:])]
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    sizes: dict[str, int] = {}
    ellipses = []
    for term, shape in zip(inputs.split(","), shapes):
        letters = term.replace("...", "")
        split = len(shape) - len(letters) if "..." in term else 0
        head, _, tail = term.partition("...")
        ellipses.append(shape[len(head) : len(head) + split])
        named = zip(head + tail, shape[: len(head)] + shape[len(head) + split :])
        for letter, n in named:
            sizes[letter] = max(sizes.get(letter, 1), n)
    if not arrow:  # implicit output: the letters used once, and the ellipsis
        output = "..." + "".join(sorted(c for c in sizes if inputs.count(c) == 1))
    batch = math.prod(broadcast_shape(*ellipses)) if "..." in output and ellipses else 1
    return float(batch * math.prod(sizes.get(c, 1) for c in output.replace("...", "")))


def _block_diag(args: tuple, kwargs: dict) -> float:
    shapes = [shape_of(t) or () for t in tensors_in(args)]
    rows = sum(s[0] if len(s) == 2 else 1 for s in shapes)
    return float(rows * sum(s[-1] if s else 1 for s in shapes))


def _diag(flat: bool) -> Rule:
    """diag of a vector, diagflat of anything (flattened): a square of its length plus the offset."""

    def rule(args: tuple, kwargs: dict) -> float:
        x = arg_at(args, kwargs, 0, "input")
        offset = abs(count_of(arg_at(args, kwargs, 1, "diagonal", kwargs.get("offset", 0))))
        return (numel_of(x) + offset) ** 2 if flat or len(shape_of(x) or ()) <= 1 else numel_of(x)

    return rule


def _diag_embed(args: tuple, kwargs: dict) -> float:
    x = arg_at(args, kwargs, 0, "input")
    last = (shape_of(x) or (1,))[-1] or 1
    return numel_of(x) / last * (last + abs(count_of(arg_at(args, kwargs, 1, "offset", 0)))) ** 2


def _quantile(args: tuple, kwargs: dict) -> float:
    """quantile(input, q, dim): a value per q for each slice along ``dim`` (a scalar per q without one)."""
    x, q = arg_at(args, kwargs, 0, "input"), arg_at(args, kwargs, 1, "q")
    dim = arg_at(args, kwargs, 2, "dim")
    shape = shape_of(x) or (1,)
    per_q = math.prod(shape) / max(shape[int(dim)], 1) if isinstance(dim, int) and shape else 1
    return numel_of(q) * per_q


_ELEMENTWISE = """
where eq ne lt le gt ge logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor masked_fill
mse_loss l1_loss smooth_l1_loss huber_loss cosine_similarity pairwise_distance masked_select masked_scatter cross
linalg.cross complex polar isclose
__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __and__ __or__ __xor__ __rand__ __ror__ __rxor__
""".split()
_WINDOWS = "bartlett_window blackman_window hamming_window hann_window kaiser_window".split()

_BOUNDED_CLASSES = (catalogue.POINTWISE, catalogue.REDUCTION, catalogue.BINARY, catalogue.MATMUL)
# Calls of no class above whose outputs their tensors bound (the products and the windows among them have rules).
_BOUNDED = set(
    """
softmax softmin log_softmax layer_norm group_norm batch_norm instance_norm rms_norm local_response_norm normalize
dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout feature_dropout rrelu gumbel_softmax
avg_pool1d avg_pool2d avg_pool3d lp_pool1d lp_pool2d lp_pool3d fractional_max_pool2d fractional_max_pool3d
cumulative_trapezoid trapezoid trapz diff searchsorted bucketize embedding_renorm
linalg.inv linalg.solve linalg.cholesky linalg.det linalg.slogdet linalg.vector_norm linalg.matrix_norm linalg.norm
linalg.pinv linalg.eigh linalg.eigvalsh linalg.matrix_exp matrix_exp linalg.matrix_power matrix_power
rand_like randn_like randint_like bernoulli poisson tensor as_tensor new_tensor scalar_tensor
""".split()
)

_RULES: dict[str, Rule] = {
    **sizes_nn.RULES,
    **dict.fromkeys(("zeros", "ones", "empty", "rand", "randn"), _factory),
    **dict.fromkeys(("full", "empty_strided", "empty_permuted"), _sized_at(0)),
    **dict.fromkeys(("new_full", "new_empty_strided", "as_strided", "as_strided_copy"), _sized_at(1)),
    **dict.fromkeys(("new_zeros", "new_ones", "new_empty", "expand", "expand_copy", "resize", "resize_"), _after_self),
    **dict.fromkeys(("broadcast_to",), _sized_at(1)),
    **dict.fromkeys(("repeat", "tile"), _repeat),
    **dict.fromkeys(("arange", "range"), _arange),
    **dict.fromkeys(("linspace", "logspace"), _count(2, "steps")),
    **dict.fromkeys(_WINDOWS, _count(0, "window_length")),
    "eye": _eye,
    "randperm": _count(0, "n"),
    **dict.fromkeys(("randint", "normal"), _size_arg),
    **dict.fromkeys(("pad", "constant_pad_nd"), _pad),
    "repeat_interleave": _repeat_interleave,
    "one_hot": _one_hot,
    "bincount": _bincount,
    "histc": _count(1, "bins", 100),
    "histogram": _histogram,
    "histogramdd": _histogramdd,
    **dict.fromkeys(("tril_indices", "triu_indices"), _indices),
    **dict.fromkeys(("vander", "linalg.vander"), _vander),
    "combinations": _combinations,
    "multinomial": _multinomial,
    "nonzero_static": _nonzero_static,
    **dict.fromkeys(("interpolate", "upsample", "upsample_nearest", "upsample_bilinear"), _resized),
    **{f"adaptive_{kind}_pool{d}d": _resized for kind in ("avg", "max") for d in (1, 2, 3)},
    **dict.fromkeys(("Tensor.unfold", "Aten.unfold"), _unfold),
    **dict.fromkeys(("outer", "ger", "kron"), _product((0, "input"), (1, "vec2"))),
    "addr": _product((1, "vec1"), (2, "vec2")),
    **dict.fromkeys(("cartesian_prod", "meshgrid"), _all_products),
    **dict.fromkeys(_ELEMENTWISE, _broadcast_rule),
    "broadcast_tensors": _broadcast_each,
    **dict.fromkeys(("matmul", "linalg.matmul", "mm", "bmm", "__matmul__"), _matmul(0, 1)),
    **dict.fromkeys(("addmm", "baddbmm", "addbmm"), _matmul(1, 2)),
    "__rmatmul__": _matmul(1, 0),
    **dict.fromkeys(("chain_matmul", "multi_dot", "linalg.multi_dot"), _chain),
    "linear": _linear,
    "Functional.embedding": _embedding(0, 1),
    **dict.fromkeys(("Torch.embedding", "VF.embedding", "Aten.embedding"), _embedding(1, 0)),
    "cdist": _cdist,
    "pdist": _pdist,
    "tensordot": _tensordot,
    "einsum": _einsum,
    "block_diag": _block_diag,
    "diag": _diag(flat=False),
    "diagflat": _diag(flat=True),
    "diag_embed": _diag_embed,
    **dict.fromkeys(("quantile", "nanquantile"), _quantile),
}


def _rule(api: str) -> Rule | None:
    """The API's own rule, its name's without prefix, or (a pointwise op) its tensors broadcast together."""
    prefix, base = base_name(api)
    found = _RULES.get(api) or _RULES.get(f"{prefix}.{base}") or _RULES.get(base)
    if found is None and api_class(api) == catalogue.POINTWISE:
        return _broadcast_rule
    return found


def _bounded(api: str) -> bool:
    """Whether ``api`` is known to make no more than its tensors hold (a few copies at most): an index, movement,
    compare, reduction or pointwise op of the catalogue, a product the rules above do not size, or one of
    _BOUNDED. Every other API's outputs are estimated from its arguments (``_unknown``)."""
    prefix, base = base_name(api)
    if prefix == "NPU":
        return base in catalogue.NPU
    listed = catalogue.listed_class(prefix, base)
    name = base.removeprefix("native_").strip("_")
    return listed in _BOUNDED_CLASSES or name in _BOUNDED or name.startswith("special.")


def _whole_numbers(values: Any) -> list[float]:
    """The positive whole numbers of an argument list, looking into lists and tuples (sizes given as lists)."""
    if isinstance(values, (list, tuple)):
        return [n for v in values for n in _whole_numbers(v)]
    values = number_in(values)
    return [count_of(values)] if isinstance(values, int) and not isinstance(values, bool) and values > 0 else []


def _unknown(args: tuple, kwargs: dict) -> float:
    """An API not known to bound its outputs by its tensors: its largest tensor times every whole number of its
    arguments that no dimension of its tensors reaches (a size it may be asked to make: an FFT's ``n``, a window's
    length, a fold's output_size). A record's output shape is never believed: it is the dump's word, and a
    statistics dump saves no file that would show the lie."""
    values = [*args, *kwargs.values()]
    shapes = [shape_of(t) or () for t in tensors_in(values)]
    top = max((n for shape in shapes for n in shape), default=0)
    largest = max((float(math.prod(shape)) for shape in shapes), default=1.0)
    return largest * math.prod(n for n in _whole_numbers(values) if n > top)


def output_elements(api: str, args: tuple, kwargs: dict) -> float | None:
    """The elements a call of ``api`` makes from its arguments (an upper estimate, may be inf); None for APIs
    whose outputs their tensors bound. An API with neither a rule nor a place among the bounded is estimated
    from its arguments (fails closed): an unsized API never lets a forged small output shape pass."""
    rule = _rule(api)
    if rule is None:
        return None if _bounded(api) else _unknown(args, kwargs)
    try:
        return rule(args, kwargs)
    except (TypeError, ValueError, OverflowError, IndexError, ZeroDivisionError):  # arguments the API would refuse
        return _unknown(args, kwargs)
