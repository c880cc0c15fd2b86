"""torch.autocast's op lists, as data: which ops autocast casts, to what, on the CPU and on CUDA (and NPU).

A call recorded under ``torch.autocast`` ran on inputs autocast cast first; replayed without that cast it runs in
another dtype, or fails (``linear`` of a bf16 activation and an fp32 weight). The dump says nothing of autocast,
so precheck infers it from a record's dtypes against these lists (precheck/dump/autocast.py, the one rule that
run_ut and compare share). Three kinds, as torch's aten/src/ATen/autocast_mode.cpp names them:

- ``lower``: cast every floating input (not float64) to autocast's dtype (bf16 or fp16) and run in it;
- ``fp32``: cast every floating input (not float64) to float32;
- ``promote``: cast every floating input (not float64) to the widest of their dtypes.

The sets are torch 2.13's kernels registered for the AutocastCPU and AutocastCUDA dispatch keys
(tests/test_autocast.py holds them against ``torch._C._dispatch_has_kernel_for_dispatch_key``), by their ATen
names, plus ``COMPOSITE``: ops with no autocast kernel of their own whose every path is one kind (CUDA's
``cross_entropy`` is log_softmax and nll_loss, both fp32). torch_npu registers CUDA's lists for AutocastPrivateUse1.
No torch here: the commands that only read CSVs may ask.
"""

from __future__ import annotations

LOWER, FP32, PROMOTE = "lower", "fp32", "promote"

_CONVOLUTIONS = frozenset(
    {"_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d"}
    | {"conv_transpose3d", "prelu"}
)
_PRODUCTS = frozenset({"addbmm", "addmm", "baddbmm", "bmm", "linalg_vecdot", "linear", "matmul", "mm"})
_CPU_FP32_LOSSES = frozenset(
    {"binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_embedding_loss", "cross_entropy_loss"}
    | {"ctc_loss", "hinge_embedding_loss", "huber_loss", "kl_div", "l1_loss", "margin_ranking_loss", "mse_loss"}
    | {"multi_margin_loss", "multilabel_margin_loss", "multilabel_margin_loss_forward", "nll_loss", "nll_loss2d"}
    | {"poisson_nll_loss", "smooth_l1_loss", "soft_margin_loss", "triplet_margin_loss"}
)
_FFTS = frozenset(f"fft_{kind}{suffix}" for kind in ("fft", "ifft", "rfft", "irfft") for suffix in ("", "2", "n"))
_CPU_LINALG = frozenset(
    {"_lu_with_info", "cholesky", "cholesky_inverse", "cholesky_solve", "geqrf", "inverse", "linalg_cholesky"}
    | {"linalg_cholesky_ex", "linalg_cond", "linalg_eig", "linalg_eigh", "linalg_eigvals", "linalg_eigvalsh"}
    | {"linalg_householder_product", "linalg_inv", "linalg_inv_ex", "linalg_lstsq", "linalg_matrix_rank"}
    | {"linalg_qr", "linalg_solve", "linalg_svd", "linalg_svdvals", "linalg_tensorinv", "linalg_tensorsolve"}
    | {"lu_solve", "orgqr", "ormqr", "pinverse", "qr", "svd", "triangular_solve"}
)
_CPU_POOLS = frozenset(
    {"adaptive_avg_pool3d", "adaptive_max_pool3d", "avg_pool3d", "fractional_max_pool2d", "fractional_max_pool3d"}
    | {"max_pool3d", "max_unpool2d", "max_unpool3d", "reflection_pad1d", "reflection_pad2d", "replication_pad1d"}
    | {"replication_pad2d", "replication_pad3d"}
)
_UPSAMPLES = frozenset(
    {"_upsample_bicubic2d_aa", "_upsample_bilinear2d_aa", "_upsample_nearest_exact1d", "_upsample_nearest_exact2d"}
    | {"_upsample_nearest_exact3d", "upsample_bicubic2d", "upsample_bilinear2d", "upsample_linear1d"}
    | {"upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_trilinear3d"}
)
_CUDA_LOSSES = (
    _CPU_FP32_LOSSES - {"binary_cross_entropy", "cross_entropy_loss", "ctc_loss"} - {"multilabel_margin_loss_forward"}
)

# device -> kind -> ATen op names with an autocast kernel of that kind on the device
LISTS: dict[str, dict[str, frozenset[str]]] = {
    "cpu": {
        LOWER: _CONVOLUTIONS
        | _PRODUCTS
        | {"_addmm_activation", "_native_multi_head_attention", "mkldnn_rnn_layer", "scaled_dot_product_attention"},
        FP32: _CPU_FP32_LOSSES
        | _FFTS
        | _CPU_LINALG
        | _CPU_POOLS
        | {"_grid_sampler_2d_cpu_fallback", "grid_sampler", "grid_sampler_2d", "grid_sampler_3d", "cdist", "polar"}
        | {"fake_quantize_per_tensor_affine", "fft_hfft", "fft_ihfft", "nanquantile", "prod", "quantile", "stft"}
        | {"trace", "view_as_complex"},
        PROMOTE: frozenset({"cat", "index_copy", "stack"}),
    },
    "cuda": {
        LOWER: _CONVOLUTIONS
        | _PRODUCTS
        | {"_scaled_dot_product_flash_attention", "_thnn_fused_gru_cell", "_thnn_fused_lstm_cell", "addmv", "addr"}
        | {"chain_matmul", "convolution", "cudnn_convolution", "cudnn_convolution_transpose", "einsum", "gru_cell"}
        | {"linalg_multi_dot", "lstm_cell", "mv", "rnn_relu_cell", "rnn_tanh_cell", "scaled_dot_product_attention"},
        FP32: _CUDA_LOSSES
        | _UPSAMPLES
        | {"acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log1p", "log2", "reciprocal", "rsqrt"}
        | {"sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm", "rms_norm"}
        | {"frobenius_norm", "nuclear_norm", "cosine_similarity", "dist", "pdist", "cdist", "renorm", "logsumexp"}
        | {"prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm", "linalg_matrix_norm"}
        | {"sum", "norm"},
        PROMOTE: frozenset(
            {"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put", "scatter_add"}
            | {"tensordot", "vdot"}
        ),
    },
}
# Ops with no autocast kernel whose every path autocast casts one way: (device, kind) -> names
COMPOSITE: dict[tuple[str, str], frozenset[str]] = {
    ("cuda", FP32): frozenset({"cross_entropy_loss"}),  # log_softmax then nll_loss
}
# Ops that do part of their work in their half-precision input's dtype: CUDA's cross_entropy under autocast calls
# log_softmax with the logits' own dtype named (autocast leaves a call that names its dtype alone), so its fp32
# loss carries bf16/fp16 rounding (seen on an H200, torch 2.11: 1.48046875 against fp32's 1.4817938); the norms'
# mixed-dtype kernels (a bf16/fp16 input with fp32 weight and bias, autocast or not) compute the weight's and
# bias's fp32 gradients from half-precision intermediates (the CPU's fp16 layer_norm: 1.55e4x an honest fp32
# kernel, about 2 fp16 roundings). A record does not say which kernel ran, so such an op's outputs are held to
# its half input's dtype.
PARTLY_HALF = frozenset({"cross_entropy_loss", "layer_norm", "group_norm", "batch_norm"})

# Ops whose autocast kernel raises (CUDA's binary_cross_entropy: "unsafe to autocast"): never replayed cast
BANNED: dict[str, frozenset[str]] = {"cuda": frozenset({"binary_cross_entropy"})}

# A dump's Python name of an op whose ATen name differs (Functional.cross_entropy, Tensor.__matmul__)
ALIASES = {
    "__matmul__": "matmul",
    "__rmatmul__": "matmul",
    "__pow__": "pow",
    "__rpow__": "pow",
    "cross_entropy": "cross_entropy_loss",
    "interpolate": "upsample_nearest2d",  # CUDA's fp32 list holds every upsampling mode interpolate may call
}


def op_name(api: str) -> str:
    """The ATen name of a dump's API (``Functional.linear`` -> linear, ``Aten.mm.default`` -> mm)."""
    parts = api.split(".")
    name = parts[1] if len(parts) > 1 else api
    return ALIASES.get(name, name)


def kinds(api: str) -> frozenset[str]:
    """How autocast may have cast ``api``'s inputs, on any device (an op may be fp32 on one and promote on another:
    grid_sampler); empty for an op autocast leaves alone."""
    name = op_name(api)
    found = {kind for device in LISTS.values() for kind, names in device.items() if name in names}
    found |= {kind for (_, kind), names in COMPOSITE.items() if name in names}
    return frozenset(found)
