"""Realistic kernel precision bugs for the detection corpus, each a patch of one torch API installed before msprobe's
PrecisionDebugger wraps the API, so msprobe records what the buggy kernel computes.

A forward bug keeps the API's native autograd node and overwrites the values of its output (``out.data``), as a
buggy forward kernel next to an honest backward kernel would: the backward runs from the saved tensors, and msprobe's
backward hook (on the output's ``grad_fn``) records the same gradients as in a clean run. A backward bug is an
``autograd.Function`` whose node takes the API's differentiable inputs in the native node's order; its backward runs
on ``torch.ops.aten`` only, which msprobe does not wrap, so computing it adds no record to the dump.

Every patched call leaves its buggy and honest values in ``TRACE`` (by direction and call index), from which the
recorder writes the ground truth and checks that the dump holds exactly the buggy values.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

A = torch.ops.aten
TRACE: dict[str, dict[int, tuple[torch.Tensor, torch.Tensor]]] = {"forward": {}, "backward": {}}
Install = Callable[[str], None]


@dataclass(frozen=True)
class Bug:
    name: str
    split: str  # dev | holdout | holdout2: disjoint bugs, ops and models
    model: str
    api: str  # the record prefix msprobe writes, e.g. Functional.layer_norm
    direction: str  # forward | backward: which record of each patched call holds the bug
    kind: str
    description: str
    runs: tuple[tuple[str, float], ...]  # (dtype, loss scale)
    install: Install


def _owner(api: str) -> tuple[object, str]:
    prefix, name = api.split(".", 1)
    return {"Functional": F, "Tensor": torch.Tensor, "Torch": torch}[prefix], name


def _lowp(dt: torch.dtype) -> torch.dtype:
    """The precision a buggy kernel silently computes in: fp16 for an fp32 call, else the call's own dtype."""
    return torch.float16 if dt == torch.float32 else dt


def _seq_sum(t: torch.Tensor, dim: int, dt: torch.dtype) -> torch.Tensor:
    """Sum along ``dim`` one element after the other, rounding every partial sum to ``dt`` (keepdim)."""
    t = t.to(dt).movedim(dim, -1)
    acc = t[..., 0]
    for k in range(1, t.shape[-1]):
        acc = (acc + t[..., k]).to(dt)
    return acc.unsqueeze(-1).movedim(-1, dim)


def forward_bug(wrong: Callable, calls: set[int] | None = None) -> Install:
    """``wrong(honest, out, *args, **kwargs)`` gives the buggy output of the calls in ``calls`` (all when None)."""

    def install(api: str) -> None:
        owner, name = _owner(api)
        honest, count = getattr(owner, name), itertools.count()

        def patched(*args, **kwargs):
            out, i = honest(*args, **kwargs), next(count)
            if calls is None or i in calls:
                with torch.no_grad():
                    bad = wrong(honest, out.detach(), *args, **kwargs).to(out.dtype)
                TRACE["forward"][i] = (bad.clone(), out.detach().clone())
                out.data.copy_(bad)
            return out

        setattr(owner, name, patched)

    return install


def backward_bug(function: type[torch.autograd.Function], bind: Callable) -> Install:
    """``bind(i, *args, **kwargs)`` turns the API's arguments into ``function.apply``'s, with the call index."""

    def install(api: str) -> None:
        owner, name = _owner(api)
        count = itertools.count()
        setattr(owner, name, lambda *args, **kwargs: function.apply(*bind(next(count), *args, **kwargs)))

    return install


def _traced(i: int, bad: torch.Tensor, honest: torch.Tensor) -> torch.Tensor:
    TRACE["backward"][i] = (bad.clone(), honest.clone())
    return bad


def _f32(t: torch.Tensor) -> torch.Tensor:
    return A._to_copy.default(t, dtype=torch.float32)


class _Box:
    """A tensor passed to autograd.Function.apply without becoming one of its node's inputs."""

    def __init__(self, value: object) -> None:
        self.value = value


# --- forward bugs ------------------------------------------------------------------------------------------------


def _softmax_lowp(honest, out, x, dim=-1, **_):
    lowp = _lowp(out.dtype)
    e = torch.exp((x - x.amax(dim, keepdim=True)).to(lowp))
    return (e / _seq_sum(e, dim, lowp)).to(lowp)


def _linear_lowp(honest, out, x, w, b=None):
    acc = torch.zeros(out.shape, dtype=out.dtype)
    for k in range(x.shape[-1]):
        acc = (acc + (x[..., k : k + 1] * w[:, k]).to(out.dtype)).to(out.dtype)
    return acc if b is None else (acc + b).to(out.dtype)


def _masked_fill_last_column(honest, out, self, mask, value):
    mask = mask.clone()
    mask[..., -1] = False  # the broadcast kernel never reaches the mask's last column
    return honest(self, mask, value)


def _outlier(flat_index: int):
    def wrong(honest, out, *args, **kwargs):
        bad = out.clone().view(-1)
        rms = out.double().pow(2).mean().sqrt().item()
        bad[flat_index] += 8 * rms * (1 if bad[flat_index] >= 0 else -1)
        return bad.view(out.shape)

    return wrong


def _conv_bottom_band(honest, out, x, w, b=None, stride=1, padding=0, *rest):
    garbage = F.pad(x, (padding, padding, padding, 0))
    garbage = torch.cat([garbage, torch.ones_like(garbage[:, :, :padding])], 2)  # stale, not zero, padding below
    bad, wrong = out.clone(), honest(garbage, w, b, stride, 0)
    bad[-1, 8:, -1] = wrong[-1, 8:, -1]  # last image, last channel tile, bottom row: 64 of 12,288 outputs
    return bad


def _cross_entropy_no_shift(honest, out, logits, y, *args, **kwargs):
    h = logits.to(torch.float16)
    lse = torch.log(torch.exp(h).sum(-1))  # no max subtraction: exp overflows above 11.09 in fp16
    return (lse - h.gather(1, y[:, None])[:, 0]).mean()


def _cross_entropy_pad_mean(honest, out, logits, y, *args, ignore_index=-100, **kwargs):
    return honest(logits, y, ignore_index=ignore_index, reduction="sum") / y.numel()  # divides by padded length


def _pool_lowp(honest, out, x, output_size):
    return (_seq_sum(x.flatten(2), -1, out.dtype) / x[0, 0].numel()).view(out.shape)


def _layer_norm_one_pass(honest, out, x, shape, w=None, b=None, eps=1e-5):
    lowp = _lowp(out.dtype)
    h = x.to(lowp)
    mean = h.mean(-1, keepdim=True)
    var = (h * h).mean(-1, keepdim=True) - mean * mean  # E[x^2] - E[x]^2 in half precision
    return ((h - mean) * torch.rsqrt(var + eps) * w.to(lowp) + b.to(lowp)).to(lowp)


def _fast_exp(t: torch.Tensor) -> torch.Tensor:
    """2^(t log2 e) with the fraction's power from a quadratic (relative error up to ~2e-3)."""
    u = t.float() * math.log2(math.e)
    n = torch.floor(u)
    f = u - n
    return torch.ldexp(1 + f * (0.6565 + 0.3435 * f), n)


def _silu_fast(honest, out, x, inplace=False):
    return x.float() / (1 + _fast_exp(-x.float()))


def _sdpa_batch0_mask(honest, out, q, k, v, attn_mask=None, **kwargs):
    return honest(q, k, v, attn_mask=attn_mask[:1].expand_as(attn_mask), **kwargs)


def _head_tail_tile(honest, out, x, w, b=None):
    bad, half = out.clone(), x.shape[-1] // 2
    bad[1, 8:, -1] = x[1, 8:, :half] @ w[-1, :half] + b[-1]  # the last tile accumulates half of K
    return bad


def _group_norm_fp16(honest, out, x, groups, w=None, b=None, eps=1e-5):
    h = x.to(torch.float16).view(x.shape[0], groups, -1)
    mean = h.sum(-1, keepdim=True) / h.shape[-1]
    var = (h * h).sum(-1, keepdim=True) / h.shape[-1] - mean * mean  # overflows to inf above 65504
    y = ((h - mean) / torch.sqrt(var + eps)).view(x.shape)
    return y * w.view(1, -1, 1, 1) + b.view(1, -1, 1, 1)


def _log_softmax_lowp(honest, out, x, dim=None, **_):
    lowp = _lowp(out.dtype)
    shifted = x - x.amax(dim, keepdim=True)
    return (shifted.to(lowp) - torch.log(_seq_sum(torch.exp(shifted.to(lowp)), dim, lowp))).to(lowp)


def _mean_lowp(honest, out, self, dim=None, *args, **kwargs):
    return (_seq_sum(self.flatten(2), -1, out.dtype) / self[0, 0].numel()).to(out.dtype).view(out.shape)


def _all_bf16(honest, out, *args, **kwargs):
    return honest(*[a.to(torch.bfloat16) if isinstance(a, torch.Tensor) else a for a in args], **kwargs)


def _sum_lowp(honest, out, self, dim=None, keepdim=False, dtype=None):
    return _seq_sum(self, dim, _lowp(out.dtype))  # every partial sum rounded to lowp (keepdim, as the model asks)


def _bmm_tail_band(honest, out, a, b):
    bad, k = out.clone(), a.shape[-1] * 3 // 4
    bad[-1, -4:, -1] = a[-1, -4:, :k] @ b[-1, :k, -1]  # the last tile of the last batch drops the K tail
    return bad


def _all_fp16(honest, out, *args, **kwargs):
    return honest(*[a.to(torch.float16) if isinstance(a, torch.Tensor) else a for a in args], **kwargs)


def _cross_entropy_lowp_logsumexp(honest, out, logits, y, *args, **kwargs):
    lowp = _lowp(out.dtype)
    top = logits.amax(-1, keepdim=True)
    lse = torch.log(_seq_sum(torch.exp((logits - top).to(lowp)), -1, lowp)) + top
    return (lse[:, 0] - logits.gather(1, y[:, None])[:, 0]).mean()


def _mse_lowp(honest, out, input, target, *args, **kwargs):
    d = (input - target).to(out.dtype)
    return _seq_sum((d * d).flatten(), 0, out.dtype)[0] / d.numel()


def _instance_norm_unbiased(honest, out, x, running_mean=None, running_var=None, weight=None, bias=None, *a, **k):
    h = x.float()
    mean, var = h.mean((2, 3), keepdim=True), h.var((2, 3), keepdim=True, unbiased=True)  # N-1 where N is meant
    y = (h - mean) * torch.rsqrt(var + 1e-5)
    return y * weight.float().view(1, -1, 1, 1) + bias.float().view(1, -1, 1, 1)


def _conv_transpose_last_tap(honest, out, x, w, *args, **kwargs):
    bad, lame = out.clone(), w.clone()
    lame[..., -1] = 0
    bad[-1, -1, :, -1] = honest(x, lame, *args, **kwargs)[-1, -1, :, -1]  # 16 of 4,096 outputs lose a tap
    return bad


def _interpolate_align_corners(honest, out, x, size=None, scale_factor=None, mode="nearest", align_corners=None, **_):
    return honest(x, size=size, scale_factor=scale_factor, mode=mode, align_corners=True)


def _sigmoid_fast(honest, out, x):
    return 1 / (1 + _fast_exp(-x.float()))


# --- backward bugs (torch.ops.aten only) -------------------------------------------------------------------------


class _LayerNormNoProjection(torch.autograd.Function):
    """Layer norm whose input gradient misses the term ``- xhat * mean(g * w * xhat)``."""

    @staticmethod
    def forward(ctx, x, w, b, box):
        shape, eps, i = box.value
        out, mean, rstd = A.native_layer_norm.default(x, shape, w, b, eps)
        ctx.save_for_backward(x, w, b, mean, rstd)
        ctx.meta = shape, i
        return out

    @staticmethod
    def backward(ctx, g):
        x, w, b, mean, rstd = ctx.saved_tensors
        shape, i = ctx.meta
        gx, gw, gb = A.native_layer_norm_backward.default(g, x, shape, mean, rstd, w, b, [True, True, True])
        gwx = A.mul.Tensor(_f32(g), _f32(w))
        bad = A.mul.Tensor(A.sub.Tensor(gwx, A.mean.dim(gwx, [-1], True)), _f32(rstd))
        return _traced(i, A._to_copy.default(bad, dtype=x.dtype), gx), gw, gb, None


def _pointwise_backward_bug(op: Callable, honest: Callable, wrong: Callable, doc: str) -> type:
    """An autograd.Function computing ``op(x)`` whose backward returns ``wrong(g, x)`` instead of ``honest(g, x)``."""

    class Bugged(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, box):
            ctx.save_for_backward(x)
            ctx.i = box.value
            return op(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return _traced(ctx.i, wrong(g, x), honest(g, x)), None

    Bugged.__doc__ = doc
    return Bugged


_GeluTanhGrad = _pointwise_backward_bug(
    A.gelu.default,
    A.gelu_backward.default,
    lambda g, x: A.gelu_backward.default(g, x, approximate="tanh"),
    "Exact (erf) GELU whose backward is the derivative of the tanh approximation.",
)


class _LogSoftmaxTailSum(torch.autograd.Function):
    """log_softmax whose backward sums the incoming gradient over the first 32 classes only (a dropped tail tile)."""

    @staticmethod
    def forward(ctx, x, box):
        dim, i = box.value
        y = A._log_softmax.default(x, dim, False)
        ctx.save_for_backward(y)
        ctx.meta = dim, i
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        dim, i = ctx.meta
        honest = A._log_softmax_backward_data.default(g, y, dim, y.dtype)
        part = A.sum.dim_IntList(A.slice.Tensor(_f32(g), dim, 0, 32), [dim], True)
        bad = A.sub.Tensor(_f32(g), A.mul.Tensor(A.exp.default(_f32(y)), part))
        return _traced(i, A._to_copy.default(bad, dtype=y.dtype), honest), None


class _EmbeddingOverwrite(torch.autograd.Function):
    """Embedding whose weight gradient writes each token's row instead of adding it: repeated tokens keep one."""

    @staticmethod
    def forward(ctx, w, box):
        ids, padding_idx, i = box.value
        ctx.meta = ids, padding_idx, w.shape[0], i
        return A.embedding.default(w, ids, padding_idx)

    @staticmethod
    def backward(ctx, g):
        ids, padding_idx, rows, i = ctx.meta
        honest = A.embedding_backward.default(g, ids, rows, padding_idx, False, False)
        flat = A.reshape.default(g, [-1, g.shape[-1]])
        bad = A.index_put.default(A.zeros_like.default(honest), [A.reshape.default(ids, [-1])], flat, False)
        bad = A.index_fill.int_Scalar(bad, 0, A.scalar_tensor.default(padding_idx, dtype=torch.long), 0.0)
        return _traced(i, bad, honest), None


_SiluNoCurvature = _pointwise_backward_bug(
    A.silu.default,
    A.silu_backward.default,
    lambda g, x: A._to_copy.default(A.mul.Tensor(_f32(g), A.sigmoid.default(_f32(x))), dtype=x.dtype),
    "SiLU whose backward is g * sigmoid(x): it drops the x * s * (1 - s) term of the derivative.",
)


class _MseHalfGradient(torch.autograd.Function):
    """Mean squared error whose input gradient is (x - y) / N, without the factor 2."""

    @staticmethod
    def forward(ctx, x, box):
        y, i = box.value
        ctx.save_for_backward(x, y)
        ctx.i = i
        return A.mse_loss.default(x, y, 1)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        honest = A.mse_loss_backward.default(g, x, y, 1)
        bad = A.div.Scalar(A.mul.Tensor(_f32(g), A.sub.Tensor(_f32(x), _f32(y))), x.numel())
        return _traced(ctx.i, A._to_copy.default(bad, dtype=x.dtype), honest), None


def _bind_layer_norm(i, x, shape, w=None, b=None, eps=1e-5):
    return x, w, b, _Box((tuple(shape), eps, i))


def _bind_gelu(i, x, approximate="none"):
    return x, _Box(i)


def _bind_log_softmax(i, x, dim=None, *rest, **kwargs):
    return x, _Box((dim, i))


def _bind_embedding(i, ids, w, padding_idx=None, *rest, **kwargs):
    return w, _Box((ids, -1 if padding_idx is None else padding_idx, i))


def _bind_silu(i, x, inplace=False):
    return x, _Box(i)


def _bind_mse(i, x, y, *rest, **kwargs):
    return x, _Box((y, i))


ALL3 = (("fp32", 1.0), ("bf16", 1.0), ("fp16", 1.0))
LN, SM, LIN = "Functional.layer_norm", "Functional.softmax", "Functional.linear"
BUGS = [
    # dev: the gpt and cnn models
    Bug("softmax_half_accumulation", "dev", "gpt", SM, "forward", "low-precision accumulation",
        "attention softmax exponentiates and sums in fp16 (bf16 in a bf16 step), one rounding per addition",
        ALL3, forward_bug(_softmax_lowp)),
    Bug("layer_norm_eps_1e-2", "dev", "gpt", LN, "forward", "wrong eps",
        "every layer norm uses eps 1e-2 instead of the requested 1e-5",
        (("fp32", 1.0), ("bf16", 1.0)), forward_bug(lambda h, o, x, s, w, b, eps: h(x, s, w, b, 1e-2))),
    Bug("gelu_tanh_approximation", "dev", "gpt", "Functional.gelu", "forward", "approximation",
        "GELU computes the tanh approximation where the exact erf form is requested",
        (("fp32", 1.0),), forward_bug(lambda h, o, x, approximate="none": h(x, approximate="tanh"))),
    Bug("linear_half_accumulation", "dev", "gpt", LIN, "forward", "low-precision accumulation",
        "every linear accumulates its dot products in the input dtype, one rounding per term",
        (("bf16", 1.0), ("fp16", 1.0)), forward_bug(_linear_lowp)),
    Bug("causal_mask_last_column", "dev", "gpt", "Tensor.masked_fill", "forward", "mask error",
        "masked_fill with a broadcast mask skips the mask's last column: the causal mask lets every query see "
        "the last position", ALL3, forward_bug(_masked_fill_last_column)),
    Bug("layer_norm_backward_missing_term", "dev", "gpt", LN, "backward", "missing backward term",
        "layer-norm input gradient misses -xhat*mean(g*w*xhat); at loss scale 1 and 1024",
        (*ALL3, ("fp32", 1024.0), ("fp16", 1024.0)), backward_bug(_LayerNormNoProjection, _bind_layer_norm)),
    Bug("conv_outlier_1_in_12k", "dev", "cnn", "Functional.conv2d", "forward", "intermittent outlier",
        "the first convolution gets one output element (of 12,288) off by 8x the output's RMS",
        ALL3, forward_bug(_outlier(5000), {0})),
    Bug("conv_bottom_edge_band", "dev", "cnn", "Functional.conv2d", "forward", "edge band",
        "the first convolution's bottom row of the last image's last channel tile (0.5% of outputs) reads "
        "stale padding (ones) instead of zeros", (("fp32", 1.0), ("bf16", 1.0)), forward_bug(_conv_bottom_band, {0})),
    Bug("cross_entropy_fp16_overflow", "dev", "cnn", "Functional.cross_entropy", "forward", "overflow",
        "cross entropy takes logsumexp without subtracting the max: exp of a logit above 11.09 overflows fp16",
        (("fp16", 1.0),), forward_bug(_cross_entropy_no_shift)),
    Bug("gelu_backward_tanh_derivative", "dev", "gpt", "Functional.gelu", "backward", "wrong backward term",
        "exact GELU whose backward uses the tanh approximation's derivative; at loss scale 1 and 1024",
        (("fp32", 1.0), ("fp32", 1024.0)), backward_bug(_GeluTanhGrad, _bind_gelu)),
    Bug("attention_matmul_bf16_downcast", "dev", "gpt", "Torch.matmul", "forward", "silent down-cast",
        "fp32 attention matmuls run in bf16 and are widened back", (("fp32", 1.0),), forward_bug(_all_bf16)),
    Bug("cross_entropy_padded_mean", "dev", "gpt", "Functional.cross_entropy", "forward", "padding error",
        "cross entropy divides by every token, padding (ignore_index) included, instead of the counted ones",
        ALL3, forward_bug(_cross_entropy_pad_mean)),
    Bug("adaptive_pool_half_accumulation", "dev", "cnn", "Functional.adaptive_avg_pool2d", "forward",
        "low-precision accumulation", "global average pooling sums its 64 elements in the input dtype",
        (("bf16", 1.0), ("fp16", 1.0)), forward_bug(_pool_lowp)),
    # holdout: the encoder and resnet models, other ops
    Bug("layer_norm_one_pass_half_variance", "holdout", "encoder", LN, "forward", "low-precision accumulation",
        "layer norm takes the variance as E[x^2]-E[x]^2 in fp16 (bf16 in a bf16 step)",
        ALL3, forward_bug(_layer_norm_one_pass)),
    Bug("group_norm_eps_1e-2", "holdout", "resnet", "Functional.group_norm", "forward", "wrong eps",
        "the second group norm uses eps 1e-2 instead of 1e-5", (("fp32", 1.0), ("bf16", 1.0)),
        forward_bug(lambda h, o, x, g, w, b, eps=1e-5: h(x, g, w, b, 1e-2), {1})),
    Bug("silu_fast_exp", "holdout", "resnet", "Functional.silu", "forward", "approximation",
        "SiLU's sigmoid uses a fast exp (quadratic fraction polynomial, relative error ~2e-3)",
        (("fp32", 1.0), ("fp16", 1.0)), forward_bug(_silu_fast)),
    Bug("sdpa_padding_mask_batch0", "holdout", "encoder", "Functional.scaled_dot_product_attention", "forward",
        "mask error", "attention applies the first sequence's key-padding mask to every sequence of the batch",
        ALL3, forward_bug(_sdpa_batch0_mask)),
    Bug("log_softmax_backward_tail_tile", "holdout", "encoder", "Functional.log_softmax", "backward",
        "wrong backward term", "log_softmax backward sums the incoming gradient over the first 32 of 40 classes; "
        "at loss scale 1 and 1024", (*ALL3, ("fp32", 1024.0)), backward_bug(_LogSoftmaxTailSum, _bind_log_softmax)),
    Bug("conv_bf16_downcast", "holdout", "resnet", "Functional.conv2d", "forward", "silent down-cast",
        "fp32 convolutions run in bf16 and are widened back", (("fp32", 1.0),), forward_bug(_all_bf16)),
    Bug("group_norm_fp16_overflow", "holdout", "resnet", "Functional.group_norm", "forward", "overflow",
        "the first group norm (raw 0..255 pixels) sums x^2 in fp16, which overflows to inf",
        (("fp16", 1.0),), forward_bug(_group_norm_fp16, {0})),
    Bug("linear_outlier_1_in_10k", "holdout", "encoder", LIN, "forward", "intermittent outlier",
        "the MLP's first linear gets one output element (of 10,240) off by 8x the output's RMS",
        ALL3, forward_bug(_outlier(7777), {4})),
    Bug("lm_head_tail_tile_band", "holdout", "encoder", LIN, "forward", "edge band",
        "the LM head's last vocabulary column for the last 8 rows (0.6% of outputs) accumulates half of K",
        ALL3, forward_bug(_head_tail_tile, {6})),
    Bug("embedding_backward_overwrite", "holdout", "encoder", "Functional.embedding", "backward",
        "wrong backward term", "embedding backward writes each token's gradient row instead of adding it; at "
        "loss scale 1 and 1024", (*ALL3, ("fp16", 1024.0)), backward_bug(_EmbeddingOverwrite, _bind_embedding)),
    Bug("log_softmax_half_accumulation", "holdout", "resnet", "Functional.log_softmax", "forward",
        "low-precision accumulation", "the classifier's log_softmax sums exp in fp16 (bf16 in a bf16 step)",
        ALL3, forward_bug(_log_softmax_lowp)),
    Bug("spatial_mean_half_accumulation", "holdout", "resnet", "Tensor.mean", "forward",
        "low-precision accumulation", "the spatial mean sums its 100 elements in the input dtype",
        (("bf16", 1.0), ("fp16", 1.0)), forward_bug(_mean_lowp)),
]  # fmt: skip
BUGS += [
    # holdout2: written after the grader was final, on the mixer and unet models, ops no other split uses
    Bug("sum_of_squares_half_accumulation", "holdout2", "mixer", "Tensor.sum", "forward",
        "low-precision accumulation", "the RMS norms' sum of squares accumulates in fp16 (bf16 in a bf16 step), one "
        "rounding per addition", ALL3, forward_bug(_sum_lowp)),
    Bug("bmm_k_tail_band", "holdout2", "mixer", "Torch.bmm", "forward", "edge band",
        "token mixing's last 4 rows of the last sequence, last feature (0.4% of outputs), drop the last quarter "
        "of the reduction", ALL3, forward_bug(_bmm_tail_band, {0})),
    Bug("bmm_fp16_downcast", "holdout2", "mixer", "Torch.bmm", "forward", "silent down-cast",
        "fp32 token mixing runs in fp16 and is widened back", (("fp32", 1.0),), forward_bug(_all_fp16)),
    Bug("silu_backward_no_curvature", "holdout2", "mixer", "Functional.silu", "backward", "missing backward term",
        "SiLU backward is g*sigmoid(x), missing g*x*s*(1-s); at loss scale 1 and 1024",
        (*ALL3, ("fp32", 1024.0), ("fp16", 1024.0)), backward_bug(_SiluNoCurvature, _bind_silu)),
    Bug("silu_outlier_1_in_2k", "holdout2", "mixer", "Functional.silu", "forward", "intermittent outlier",
        "the SwiGLU gate gets one element (of 2,048) off by 8x its RMS", ALL3, forward_bug(_outlier(1500), {0})),
    Bug("cross_entropy_half_logsumexp", "holdout2", "mixer", "Functional.cross_entropy", "forward",
        "low-precision accumulation", "cross entropy sums the exponentials of its 40 classes in fp16 (bf16 in a "
        "bf16 step; the scalar loss rounds the same there, so fp32 only)", (("fp32", 1.0),),
        forward_bug(_cross_entropy_lowp_logsumexp)),
    Bug("mse_half_accumulation", "holdout2", "unet", "Functional.mse_loss", "forward", "low-precision accumulation",
        "the mean squared error sums its 512 terms in the input dtype", (("bf16", 1.0), ("fp16", 1.0)),
        forward_bug(_mse_lowp)),
    Bug("mse_backward_missing_factor_2", "holdout2", "unet", "Functional.mse_loss", "backward",
        "wrong backward term", "mean squared error backward drops the factor 2; at loss scale 1 and 1024",
        (*ALL3, ("fp32", 1024.0)), backward_bug(_MseHalfGradient, _bind_mse)),
    Bug("instance_norm_unbiased_variance", "holdout2", "unet", "Functional.instance_norm", "forward",
        "wrong formula", "instance norm divides the variance by N-1 instead of N (N = 256)",
        (("fp32", 1.0), ("fp16", 1.0)), forward_bug(_instance_norm_unbiased)),
    Bug("conv_transpose_last_tap_band", "holdout2", "unet", "Functional.conv_transpose2d", "forward", "edge band",
        "the transposed conv's last output column of the last image's last channel (0.4%) drops the kernel's "
        "last tap", ALL3, forward_bug(_conv_transpose_last_tap)),
    Bug("interpolate_align_corners", "holdout2", "unet", "Functional.interpolate", "forward", "wrong parameter",
        "bilinear upsampling aligns corners where align_corners=False is requested", ALL3,
        forward_bug(_interpolate_align_corners)),
    Bug("sigmoid_fast_exp", "holdout2", "unet", "Torch.sigmoid", "forward", "approximation",
        "sigmoid uses a fast exp (quadratic fraction polynomial, relative error ~2e-3)",
        (("fp32", 1.0), ("fp16", 1.0)), forward_bug(_sigmoid_fast)),
]  # fmt: skip
CLEAN_RUNS = {"dev": {"gpt": (*ALL3, ("fp32", 1024.0), ("fp16", 1024.0)), "cnn": ALL3},
              "holdout": {"encoder": (*ALL3, ("fp32", 1024.0), ("fp16", 1024.0)), "resnet": ALL3},
              "holdout2": {"mixer": (*ALL3, ("fp32", 1024.0), ("fp16", 1024.0)), "unet": ALL3}}  # fmt: skip
