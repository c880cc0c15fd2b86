"""How the registry judges each API: its precision-standard class, and the names it never runs.

The registry runs every public function torch provides; these lists give each family the class that
``--standard auto`` grades it by (an API not listed is OTHER: the default or benchmark standard) and deny the
names that are not computations (file access, global state, hooks, quantised and vendor-library internals).
Nothing here is ever looked up by a string taken from a dump; the dump's name is only a key into the table.
"""

from __future__ import annotations

import re

# Class names used by `--standard auto` (grader issue): how a family of ops is best judged.
MATMUL = "matmul"  # accumulating products: ULP-style bound
CONV = "conv"  # thousandth standard
REDUCTION = "reduction"  # accumulative bound
BINARY = "binary"  # index / movement / compare ops: bit-exact
POINTWISE = "pointwise"  # absolute threshold with small-value regime
OTHER = "other"  # normalisation, softmax, losses, attention: benchmark or default

_POINTWISE_MATH = """
abs absolute acos acosh add addcdiv addcmul asin asinh atan atan2 atanh ceil clamp clamp_max clamp_min clip cos
cosh deg2rad digamma div divide erf erfc erfinv exp exp2 expm1 float_power floor floor_divide fmax fmin fmod frac
hypot i0 lerp lgamma log log10 log1p log2 logaddexp logaddexp2 logit maximum minimum mul multiply nan_to_num neg
negative pow rad2deg reciprocal remainder round rsqrt sgn sigmoid sign sin sinc sinh sqrt square sub subtract tan
tanh true_divide trunc xlogy copysign relu
"""
_MATMUL = "matmul mm bmm addmm addbmm baddbmm addmv addr mv dot vdot einsum outer inner tensordot kron chain_matmul"
_CONV = "conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d"
_REDUCTION = """
sum mean prod cumsum cumprod norm var std var_mean std_mean logsumexp nansum nanmean dist trace logcumsumexp
scatter_add index_add scatter_reduce index_reduce
"""
_BINARY = """
cat concat concatenate stack hstack vstack dstack split chunk narrow reshape flatten squeeze unsqueeze transpose
permute t flip fliplr flipud roll rot90 gather scatter index_select masked_select masked_fill take
tril triu repeat_interleave tile broadcast_to diag diagonal unbind movedim moveaxis swapaxes swapdims select
eq ne lt le gt ge equal isnan isinf isfinite isposinf isneginf isclose logical_and logical_or logical_not
logical_xor bitwise_and bitwise_or bitwise_xor bitwise_not argmax argmin max min amax amin aminmax sort argsort
topk unique nonzero where zeros_like ones_like full_like empty_like clone detach count_nonzero any all
index_put index_copy index_fill masked_scatter tensor_split kthvalue mode median nanmedian cummax cummin msort
argwhere unique_consecutive take_along_dim
"""
_OTHER = """
softmax log_softmax layer_norm group_norm batch_norm instance_norm embedding cross cdist cosine_similarity
cumulative_trapezoid trapezoid diff histc bincount searchsorted bucketize
"""
_LINALG = (
    "linalg.inv linalg.solve linalg.cholesky linalg.det linalg.slogdet linalg.matmul linalg.vector_norm "
    "linalg.matrix_norm linalg.norm linalg.pinv linalg.cross"
)
_SPECIAL = (
    "special.erf special.erfc special.erfinv special.expit special.logit special.xlogy special.log1p "
    "special.sinc special.i0 special.logsumexp special.softmax special.log_softmax special.entr"
)
_FFT = "fft.fft fft.ifft fft.rfft fft.irfft fft.fft2 fft.ifft2 fft.rfft2 fft.irfft2 fft.fftn fft.ifftn"

TORCH = {
    POINTWISE: _POINTWISE_MATH,
    MATMUL: _MATMUL + " linalg.matmul",
    CONV: _CONV,
    REDUCTION: _REDUCTION + " linalg.vector_norm linalg.matrix_norm linalg.norm special.logsumexp _foreach_norm",
    BINARY: _BINARY,
    OTHER: _OTHER + " " + _LINALG + " " + _SPECIAL + " " + _FFT + " dropout feature_dropout alpha_dropout "
    "rand rand_like randn randn_like randint randint_like randperm bernoulli normal multinomial poisson",
}

FUNCTIONAL = {
    POINTWISE: """
        relu relu6 relu_ elu elu_ selu selu_ celu celu_ leaky_relu leaky_relu_ gelu silu mish sigmoid tanh
        hardsigmoid hardswish hardtanh hardtanh_ hardshrink softshrink tanhshrink softsign softplus logsigmoid
        threshold threshold_ glu prelu
    """,
    MATMUL: "linear bilinear",
    CONV: _CONV + " conv_tbc",
    REDUCTION: """
        l1_loss mse_loss smooth_l1_loss huber_loss kl_div nll_loss cross_entropy binary_cross_entropy
        binary_cross_entropy_with_logits poisson_nll_loss gaussian_nll_loss soft_margin_loss margin_ranking_loss
        hinge_embedding_loss cosine_embedding_loss multilabel_soft_margin_loss triplet_margin_loss
    """,
    BINARY: """
        pad one_hot pixel_shuffle pixel_unshuffle channel_shuffle unfold fold max_pool1d max_pool2d max_pool3d
        adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d max_unpool1d max_unpool2d max_unpool3d
    """,
    OTHER: """
        softmax softmin log_softmax layer_norm group_norm batch_norm instance_norm rms_norm local_response_norm
        normalize embedding embedding_bag scaled_dot_product_attention avg_pool1d avg_pool2d avg_pool3d
        adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d lp_pool1d lp_pool2d interpolate upsample
        upsample_nearest upsample_bilinear grid_sample affine_grid cosine_similarity pairwise_distance pdist
        dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout rrelu rrelu_ gumbel_softmax
        fractional_max_pool2d fractional_max_pool3d
    """,
}

_DUNDERS = """
__add__ __radd__ __iadd__ __sub__ __rsub__ __isub__ __mul__ __rmul__ __imul__ __truediv__ __rtruediv__
__itruediv__ __div__ __rdiv__ __idiv__ __floordiv__ __rfloordiv__ __ifloordiv__ __mod__ __rmod__ __imod__ __pow__
__rpow__ __ipow__ __neg__ __abs__
"""
TENSOR = {
    POINTWISE: _POINTWISE_MATH
    + _DUNDERS
    + """
        add_ sub_ mul_ div_ clamp_ clamp_min_ clamp_max_ pow_ exp_ log_ sqrt_ rsqrt_ sigmoid_ tanh_ neg_ abs_
        reciprocal_ addcmul_ addcdiv_ lerp_ relu_ masked_fill masked_fill_ fill_ zero_ float half bfloat16 double
        type_as to type
    """,
    MATMUL: _MATMUL.replace("chain_matmul", "") + " __matmul__ __rmatmul__ addmm_ baddbmm_",
    REDUCTION: _REDUCTION + " cumsum_ index_add_ scatter_add_ scatter_reduce_ index_reduce_",
    BINARY: _BINARY
    + """
        __getitem__ __setitem__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ __and__ __or__ __xor__ __rand__ __ror__
        __rxor__ __iand__ __ior__ __ixor__ __invert__ __lshift__ __rshift__ __ilshift__ __irshift__
        view view_as reshape_as contiguous expand expand_as repeat copy_ int long bool short byte char
        masked_scatter_ index_put_ index_copy_ index_fill_ scatter_ tril_ triu_
        transpose_ squeeze_ unsqueeze_ t_ item size dim numel
    """,
    OTHER: """
        softmax log_softmax cross cdist diff histc bincount
        bernoulli bernoulli_ normal_ uniform_ exponential_ random_ cauchy_ log_normal_ geometric_ multinomial
    """,
}

# Python-level torch functions outside torch._VF that compute something, and the private functions msprobe wraps
# that a training step calls: clip_grad_norm_'s ``_foreach_norm`` (one norm per tensor of a list of gradients).
TORCH_PYTHON = ["broadcast_shapes", "unique", "unravel_index", "lu", "_foreach_norm"]
TENSOR_DUNDERS = (
    _DUNDERS
    + """
    __matmul__ __rmatmul__ __getitem__ __setitem__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ __and__ __or__ __xor__
    __rand__ __ror__ __rxor__ __iand__ __ior__ __ixor__ __invert__ __lshift__ __rshift__ __ilshift__ __irshift__
    __rlshift__ __rrshift__ __imatmul__ __pos__ __bool__ __float__ __int__ __index__ __len__
"""
)

# Never run, whatever a dump holds: they touch files, global or autograd state, or a vendor library's internals.
_DENIED = {
    "Torch": re.compile(
        r"(from_file|from_numpy|frombuffer|from_dlpack|to_dlpack|fbgemm_.*|mkldnn_.*|miopen_.*"
        r"|cudnn_.*|quantize.*|q_.*|sparse_.*|sym_.*|is_vulkan_available|set_.*|get_.*|seed"
        r"|manual_seed|initial_seed|load|save)"
    ),
    "Tensor": re.compile(
        r"(apply_|map_|map2_|backward|register_.*|retain_grad|record_stream|share_memory_"
        r"|pin_memory|storage|untyped_storage|storage_type|data_ptr|const_data_ptr|numpy|tolist"
        r"|module_load|as_subclass|reinforce|set_|new|q_.*|int_repr|dequantize|to_mkldnn"
        r"|sparse_resize_.*|resize_as_sparse_)"
    ),
    "Functional": re.compile(r"(handle_torch_function|has_torch_function.*|boolean_dispatch|assert_int_or_pair)"),
}
_DENIED["VF"] = _DENIED["Torch"]
_DENIED["Aten"] = re.compile(
    r"(_.*|from_file|set_.*|record_stream|copy_sparse_to_sparse_|.*quantize.*|q_.*"
    r"|fbgemm_.*|mkldnn_.*|miopen_.*|cudnn_.*|lift.*|sym_.*)"
)

# Results built by atomic accumulation on accelerators: a rerun may differ in the last bits.
NONDETERMINISTIC = set(
    """
index_add scatter_add scatter_reduce index_reduce index_put put embedding_bag bincount histc cumsum
""".split()
)


# NPU fused ops (npu.py holds their CPU references) and their classes.
NPU = {
    "npu_fusion_attention": OTHER,
    "npu_rms_norm": OTHER,
    "npu_swiglu": POINTWISE,
    "npu_rotary_mul": POINTWISE,
    "npu_fast_gelu": POINTWISE,
    "npu_scaled_masked_softmax": OTHER,
    "npu_linear": MATMUL,
    "npu_confusion_transpose": BINARY,
    "npu_apply_adam": POINTWISE,
    "npu_apply_adam_w": POINTWISE,
    "npu_layer_norm_eval": OTHER,
    "npu_group_norm_silu": OTHER,
    "npu_mish": POINTWISE,
    "npu_moe_gating_top_k_softmax": OTHER,
    "npu_sort_v2": BINARY,
}


def denied(prefix: str, name: str) -> bool:
    pattern = _DENIED.get(prefix)
    return bool(pattern and pattern.fullmatch(name))


def _classes(table: dict[str, str]) -> dict[str, str]:
    return {name: cls for cls, names in table.items() for name in names.split()}


_BY_PREFIX = {"Torch": _classes(TORCH), "Functional": _classes(FUNCTIONAL), "Tensor": _classes(TENSOR)}
_ANY = {**_BY_PREFIX["Functional"], **_BY_PREFIX["Tensor"], **_BY_PREFIX["Torch"]}


def listed_class(prefix: str, name: str) -> str | None:
    """The class these lists give a dump name's base (``linear``, ``add_``, ``native_layer_norm``); None for a
    name they do not list. VF and ATen names share torch's spelling: ``_softmax`` and ``native_layer_norm`` are
    softmax and layer_norm."""
    own = _BY_PREFIX.get(prefix, {})
    for candidate in (name, name.rstrip("_"), name.lstrip("_"), name.removeprefix("native_").rstrip("_")):
        if candidate in own or candidate in _ANY:
            return own.get(candidate) or _ANY[candidate]
    return None


def class_of(prefix: str, name: str) -> str:
    """The class of a dump name's base; OTHER when unknown (a ``convolution`` of any spelling is CONV)."""
    return listed_class(prefix, name) or (CONV if "convolution" in name else OTHER)
