"""CPU references for the Ascend NPU fused ops (``torch_npu.npu_*``) that show up in an NPU dump.

An NPU dump records fused ops that plain torch does not have, so they cannot be replayed on the CPU by name. Each
function here recomputes one of them from ordinary differentiable torch ops, with the same name, parameter order,
keyword names and defaults as the torch_npu API (its ``self`` argument is ``input``, as torch_npu's Python binding
names it) and the same output structure, so the dump's recorded call runs unchanged against a CPU float64 golden.
Every function computes in the dtype of its inputs (float64 in, float64 out) and never rounds to a lower precision.

``REFERENCES`` maps each op name to its function; its precision-standard class is in ``catalogue.NPU``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

_MAX_TOKENS = 2147483647
_LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")


def _to_bnsd(t: Tensor, layout: str, heads: int | None) -> Tensor:
    """(B, N, S, D) view of a query/key/value in ``layout``; ``heads`` splits the H of BSH and SBH."""
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BSH":
        return t.unflatten(2, (heads, -1)).transpose(1, 2)
    return t.unflatten(2, (heads, -1)).permute(1, 2, 0, 3)  # SBH


def _from_bnsd(t: Tensor, layout: str) -> Tensor:
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BSH":
        return t.transpose(1, 2).flatten(2)
    return t.permute(2, 0, 1, 3).flatten(2)  # SBH


def _sparse_mask(
    sparse_mode: int,
    atten_mask: Tensor | None,
    sq: int,
    skv: int,
    pre_tockens: int,
    next_tockens: int,
    device: torch.device,
) -> Tensor | None:
    """Boolean mask, True = masked out. Modes 2-4 ignore the (compressed 2048x2048) mask passed and build their own:
    2 causal from the top-left corner, 3 causal from the bottom-right corner, 4 the band
    -pre_tockens <= j - i - (skv - sq) <= next_tockens (origin at the bottom-right corner)."""
    if atten_mask is None:  # torch_npu: without a mask sparse_mode and the tockens have no effect
        return None
    if sparse_mode in (0, 1):
        return atten_mask.bool()
    if sparse_mode not in (2, 3, 4):
        raise ValueError(f"npu_fusion_attention: sparse_mode {sparse_mode} (prefix / varlen split) is not supported")
    rel = torch.arange(skv, device=device)[None, :] - torch.arange(sq, device=device)[:, None]
    if sparse_mode == 2:
        return rel > 0
    rel = rel - (skv - sq)
    if sparse_mode == 3:
        return rel > 0
    return (rel > next_tockens) | (rel < -pre_tockens)


def _attention(
    q: Tensor, k: Tensor, v: Tensor, pse: Tensor | None, masked: Tensor | None, scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    """softmax(mask((q k^T + pse) * scale)) v on (B, N, S, D) tensors, kv heads shared by groups of q heads.

    Returns the output and the per-row softmax max and sum, each (B, N, Sq, 1). A row with every key masked out
    gives output 0, max -inf and sum 0."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1)
    if pse is not None:
        scores = scores + pse
    scores = scores * scale
    if masked is not None:
        scores = scores.masked_fill(masked, -math.inf)
    row_max = scores.amax(-1, keepdim=True)
    shift = torch.where(row_max == -math.inf, 0, row_max).detach()  # softmax does not depend on the shift
    e = torch.exp(scores - shift)
    row_sum = e.sum(-1, keepdim=True)
    probs = e / torch.where(row_sum > 0, row_sum, 1)
    return probs @ v, row_max, row_sum


def _eight(t: Tensor) -> Tensor:
    """torch_npu's softmax_max / softmax_sum layout: the row value repeated over a last dim of 8."""
    return t.expand(*t.shape[:-1], 8).contiguous()


def npu_fusion_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    head_num: int,
    input_layout: str,
    pse: Tensor | None = None,
    padding_mask: Tensor | None = None,
    atten_mask: Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = _MAX_TOKENS,
    next_tockens: int = _MAX_TOKENS,
    inner_precise: int = 0,
    prefix: Sequence[int] | None = None,
    actual_seq_qlen: Sequence[int] | None = None,
    actual_seq_kvlen: Sequence[int] | None = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
    softmax_layout: str = "",
    sink: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, int, int, int]:
    """Flash attention ``softmax(mask(scale * (q k^T + pse), atten_mask)) v`` (torch_npu's default pse_type 1: pse is
    added before scaling; ``scale`` defaults to 1, not 1/sqrt(d)).

    Layouts BSH, SBH, BSND, BNSD and TND (varlen: ``actual_seq_qlen`` / ``actual_seq_kvlen`` are cumulative lengths,
    an SS mask is cut to each sequence's top-left corner). ``atten_mask`` True means masked out; with no mask the
    sparse mode and tockens have no effect. GQA: query heads ``i`` use key/value head ``i // (Nq / Nkv)``.
    Returns (attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels): max and sum in the
    (B, N, Sq, 8) layout ((T, N, 8) for TND), softmax_out empty as torch_npu leaves it, seed and offset 0 (no dropout
    mask is drawn), numels the B * N * Sq * Skv size of a dropout mask. padding_mask (unused by torch_npu),
    inner_precise, gen_mask_parallel and sync do not change the values. Dropout (keep_prob < 1), prefix sparse
    modes 5-8, an attention sink and pse with TND are not supported."""
    if keep_prob < 1:
        raise ValueError("random: keep_prob < 1 draws a dropout mask")
    if input_layout not in _LAYOUTS:
        raise ValueError(f"npu_fusion_attention: input_layout {input_layout!r} is not one of {', '.join(_LAYOUTS)}")
    if sink is not None or softmax_layout:
        raise ValueError("npu_fusion_attention: sink and softmax_layout are not supported")
    if input_layout == "TND":
        return _varlen_attention(
            query,
            key,
            value,
            head_num,
            pse,
            atten_mask,
            scale,
            pre_tockens,
            next_tockens,
            actual_seq_qlen,
            actual_seq_kvlen,
            sparse_mode,
        )
    q = _to_bnsd(query, input_layout, head_num)
    kv_heads = key.shape[-1] // q.shape[-1] if input_layout in ("BSH", "SBH") else None
    k, v = (_to_bnsd(t, input_layout, kv_heads) for t in (key, value))
    _check_heads(q.shape[1], k.shape[1], head_num)
    b, n, sq, _ = q.shape
    skv = k.shape[2]
    masked = _sparse_mask(sparse_mode, atten_mask, sq, skv, pre_tockens, next_tockens, query.device)
    out, row_max, row_sum = _attention(q, k, v, pse, masked, scale)
    return (_from_bnsd(out, input_layout), _eight(row_max), _eight(row_sum), query.new_empty(0), 0, 0, b * n * sq * skv)


def _check_heads(nq: int, nkv: int, head_num: int) -> None:
    if nq != head_num or nkv == 0 or nq % nkv:
        raise ValueError(
            f"npu_fusion_attention: {nq} query heads and {nkv} key/value heads do not fit "
            f"head_num={head_num} (query heads must be head_num and a multiple of key/value heads)"
        )


def _varlen_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    head_num: int,
    pse: Tensor | None,
    atten_mask: Tensor | None,
    scale: float,
    pre_tockens: int,
    next_tockens: int,
    actual_seq_qlen: Sequence[int] | None,
    actual_seq_kvlen: Sequence[int] | None,
    sparse_mode: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor, int, int, int]:
    """TND: each sequence attends on its own; trailing zero lengths are batches left out (their rows stay 0)."""
    if actual_seq_qlen is None or actual_seq_kvlen is None or len(actual_seq_qlen) != len(actual_seq_kvlen):
        raise ValueError(
            "npu_fusion_attention: input_layout TND needs actual_seq_qlen and actual_seq_kvlen of one length"
        )
    if pse is not None:
        raise ValueError("npu_fusion_attention: pse with input_layout TND is not supported")
    _check_heads(query.shape[1], key.shape[1], head_num)
    q_ends, kv_ends = [int(c) for c in actual_seq_qlen], [int(c) for c in actual_seq_kvlen]
    outs, maxes, sums = [], [], []
    q0 = kv0 = 0
    for q1, kv1 in zip(q_ends, kv_ends):
        if q1 < q0:  # a trailing 0: this and the later batches take no part
            break
        sq, skv = q1 - q0, kv1 - kv0
        mask = atten_mask[..., :sq, :skv] if atten_mask is not None and sparse_mode in (0, 1) else atten_mask
        masked = _sparse_mask(sparse_mode, mask, sq, skv, pre_tockens, next_tockens, query.device)
        q, k, v = (
            t[lo:hi].transpose(0, 1)[None] for t, lo, hi in ((query, q0, q1), (key, kv0, kv1), (value, kv0, kv1))
        )
        out, row_max, row_sum = _attention(q, k, v, None, masked, scale)
        outs.append(out[0].transpose(0, 1))
        maxes.append(row_max[0].transpose(0, 1))
        sums.append(row_sum[0].transpose(0, 1))
        q0, kv0 = q1, kv1
    rest = query.shape[0] - q0
    outs.append(query.new_zeros(rest, query.shape[1], value.shape[2]))
    maxes.append(query.new_zeros(rest, query.shape[1], 1))
    sums.append(query.new_zeros(rest, query.shape[1], 1))
    numels = query.shape[1] * sum(
        (qe - qs) * (kve - kvs) for qs, qe, kvs, kve in zip([0] + q_ends, q_ends, [0] + kv_ends, kv_ends)
    )
    return (torch.cat(outs), _eight(torch.cat(maxes)), _eight(torch.cat(sums)), query.new_empty(0), 0, 0, numels)


def npu_rms_norm(input: Tensor, gamma: Tensor, epsilon: float = 1e-6) -> tuple[Tensor, Tensor]:
    """``y = x * rsqrt(mean(x^2) + eps) * gamma`` over the last ``gamma.dim()`` dims; returns (y, rstd), rstd keeping
    those dims as size 1 (torch_npu returns it for the backward)."""
    dims = tuple(range(-gamma.dim(), 0))
    rstd = torch.rsqrt(input.pow(2).mean(dims, keepdim=True) + epsilon)
    return (input * rstd * gamma).to(input.dtype), rstd


def npu_swiglu(input: Tensor, dim: int = -1) -> Tensor:
    """``a, b = chunk(x, 2, dim)``; ``silu(a) * b``."""
    a, b = input.chunk(2, dim)
    return a * torch.sigmoid(a) * b


def npu_rotary_mul(input: Tensor, r1: Tensor, r2: Tensor, rotary_mode: str = "half") -> Tensor:
    """RoPE ``r1 * x + r2 * rotate(x)``: 'half' rotates ``cat(-x2, x1)`` with ``x1, x2 = chunk(x, 2, -1)``,
    'interleave' rotates each pair (x[2i], x[2i+1]) to (-x[2i+1], x[2i])."""
    if rotary_mode == "half":
        x1, x2 = input.chunk(2, -1)
        rotated = torch.cat((-x2, x1), dim=-1)
    elif rotary_mode == "interleave":
        rotated = torch.stack((-input[..., 1::2], input[..., ::2]), dim=-1).flatten(-2)
    else:
        raise ValueError(f"npu_rotary_mul: rotary_mode {rotary_mode!r} is not supported (half, interleave)")
    return r1 * input + r2 * rotated


def npu_fast_gelu(input: Tensor) -> Tensor:
    """``x * sigmoid(1.702 x)`` (the NPU's ``x / (1 + exp(-1.702|x|)) * exp(0.851 (x - |x|))`` is the same)."""
    return input * torch.sigmoid(1.702 * input)


def npu_scaled_masked_softmax(x: Tensor, mask: Tensor, scale: float = 1, fixed_triu_mask: bool = False) -> Tensor:
    """``softmax(masked_fill(x * scale, mask, -10000), -1)``: the NPU fills masked places with -10000, not -inf, so a
    fully masked row is uniform. ``fixed_triu_mask`` replaces ``mask`` with the strict upper triangle of the last
    two dims."""
    if fixed_triu_mask:
        mask = torch.ones(x.shape[-2:], dtype=torch.bool, device=x.device).triu(1)
    return torch.softmax((x * scale).masked_fill(mask.bool(), -10000), dim=-1)


def npu_linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight^T + bias``."""
    out = input @ weight.transpose(-2, -1)
    return out if bias is None else out + bias


def npu_confusion_transpose(input: Tensor, perm: Sequence[int], shape: Sequence[int], transpose_first: bool) -> Tensor:
    """``permute(perm)`` then ``reshape(shape)`` when ``transpose_first``, else ``reshape(shape)`` then
    ``permute(perm)``."""
    if transpose_first:
        return input.permute(*perm).reshape(shape)
    return input.reshape(shape).permute(*perm)


def _out_state(name: str, out: Sequence[Tensor] | None) -> Sequence[Tensor]:
    if out is None or len(out) != 3:
        raise ValueError(f"{name}: needs out=(var, m, v), the state it updates")
    return out


def npu_apply_adam(
    beta1_power: float,
    beta2_power: float,
    lr: float,
    beta1: float,
    beta2: float,
    epsilon: float,
    grad: Tensor,
    use_locking: bool | None,
    use_nesterov: bool | None,
    *,
    out: Sequence[Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """One Adam step in TensorFlow's ApplyAdam form on ``out=(var, m, v)``, which is read, not written:
    ``m' = m + (1 - b1)(g - m)``, ``v' = v + (1 - b2)(g^2 - v)``, ``lr' = lr sqrt(1 - b2_power) / (1 - b1_power)``,
    ``var' = var - lr' m' / (eps + sqrt(v'))`` (nesterov: ``b1 m' + (1 - b1) g`` in place of ``m'``).
    ``beta*_power`` are the powers for this step; eps is added outside the bias correction. Returns
    (var', m', v'); use_locking does not change the values."""
    var, m, v = _out_state("npu_apply_adam", out)
    m_t = m + (1 - beta1) * (grad - m)
    v_t = v + (1 - beta2) * (grad * grad - v)
    lr_t = lr * (1 - beta2_power) ** 0.5 / (1 - beta1_power)
    step = beta1 * m_t + (1 - beta1) * grad if use_nesterov else m_t
    return var - lr_t * step / (epsilon + v_t.sqrt()), m_t, v_t


def npu_apply_adam_w(
    beta1_power: float,
    beta2_power: float,
    lr: float,
    weight_decay: float,
    beta1: float,
    beta2: float,
    epsilon: float,
    grad: Tensor,
    max_grad_norm: Tensor | None = None,
    amsgrad: bool | None = None,
    maximize: bool | None = None,
    *,
    out: Sequence[Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """One AdamW step on ``out=(var, m, v)``, which is read, not written. NPU convention: ``beta*_power`` are the
    powers of the previous step, the op multiplies them by ``beta*`` itself. With ``g = -grad`` when maximize:
    ``m' = b1 m + (1 - b1) g``, ``v' = b2 v + (1 - b2) g^2``,
    ``denom = sqrt(v' / (1 - b2_power b2)) + eps`` (amsgrad: ``max(max_grad_norm, v')`` in place of ``v'``),
    ``var' = var (1 - lr wd) - lr m' / (1 - b1_power b1) / denom``. Returns (var', m', v')."""
    var, m, v = _out_state("npu_apply_adam_w", out)
    g = -grad if maximize else grad
    m_t = beta1 * m + (1 - beta1) * g
    v_t = beta2 * v + (1 - beta2) * g * g
    if amsgrad:
        if max_grad_norm is None:
            raise ValueError("npu_apply_adam_w: amsgrad needs max_grad_norm")
        second = torch.maximum(max_grad_norm, v_t)
    else:
        second = v_t
    denom = (second / (1 - beta2_power * beta2)).sqrt() + epsilon
    return var * (1 - lr * weight_decay) - lr * m_t / (1 - beta1_power * beta1) / denom, m_t, v_t


def npu_layer_norm_eval(
    input: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Layer norm over the last ``len(normalized_shape)`` dims with the biased variance:
    ``(x - mean) * rsqrt(var + eps) * weight + bias``."""
    dims = tuple(range(-len(normalized_shape), 0))
    centred = input - input.mean(dims, keepdim=True)
    y = centred * torch.rsqrt(centred.pow(2).mean(dims, keepdim=True) + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def npu_group_norm_silu(
    input: Tensor, weight: Tensor | None, bias: Tensor | None, group: int, eps: float = 1e-5
) -> tuple[Tensor, Tensor, Tensor]:
    """``silu(group_norm(x))`` over (N, C, *) input, channels split into ``group`` groups, biased variance, per-channel
    weight and bias; returns (out, mean, rstd), mean and rstd of shape (N, group)."""
    grouped = input.reshape(input.shape[0], group, -1)
    mean = grouped.mean(-1)
    centred = grouped - mean[..., None]
    rstd = torch.rsqrt(centred.pow(2).mean(-1) + eps)
    y = (centred * rstd[..., None]).reshape(input.shape)
    channel = (-1,) + (1,) * (input.dim() - 2)
    if weight is not None:
        y = y * weight.reshape(channel)
    if bias is not None:
        y = y + bias.reshape(channel)
    return (y * torch.sigmoid(y)).to(input.dtype), mean, rstd


def npu_mish(input: Tensor) -> Tensor:
    """``x * tanh(softplus(x))`` with ``softplus(x) = log(1 + exp(x))``."""
    return input * torch.tanh(torch.logaddexp(input, torch.zeros_like(input)))


def npu_moe_gating_top_k_softmax(
    x: Tensor, finished: Tensor | None = None, k: int = 1
) -> tuple[Tensor, Tensor, Tensor]:
    """MoE gating: ``softmax(x, -1)``, then its ``k`` largest (ties: the lower expert first). Returns
    (y, expert_idx, row_idx), indices int32; a row marked ``finished`` gets expert index ``num_experts``;
    ``row_idx[..., j] = j * rows + row`` over the rows of x (all dims but the last)."""
    probs = torch.softmax(x, dim=-1)
    order = torch.sort(probs, dim=-1, descending=True, stable=True).indices[..., :k]
    y = probs.gather(-1, order)
    if finished is not None:
        order = torch.where(finished[..., None].bool(), x.shape[-1], order)
    rows = math.prod(x.shape[:-1])
    row_idx = torch.arange(rows * k, dtype=torch.int32, device=x.device).reshape(k, rows).t().reshape(y.shape)
    return y, order.to(torch.int32), row_idx


def npu_sort_v2(input: Tensor, dim: int = -1, descending: bool = False, *, out: Tensor | None = None) -> Tensor:
    """The values of ``sort(x, dim, descending)`` (torch_npu returns no indices); ``out`` is the NPU's output
    buffer, never read: the values come back as a new tensor."""
    return torch.sort(input, dim=dim, descending=descending).values


REFERENCES: dict[str, Callable] = {
    "npu_fusion_attention": npu_fusion_attention,
    "npu_rms_norm": npu_rms_norm,
    "npu_swiglu": npu_swiglu,
    "npu_rotary_mul": npu_rotary_mul,
    "npu_fast_gelu": npu_fast_gelu,
    "npu_scaled_masked_softmax": npu_scaled_masked_softmax,
    "npu_linear": npu_linear,
    "npu_confusion_transpose": npu_confusion_transpose,
    "npu_apply_adam": npu_apply_adam,
    "npu_apply_adam_w": npu_apply_adam_w,
    "npu_layer_norm_eval": npu_layer_norm_eval,
    "npu_group_norm_silu": npu_group_norm_silu,
    "npu_mish": npu_mish,
    "npu_moe_gating_top_k_softmax": npu_moe_gating_top_k_softmax,
    "npu_sort_v2": npu_sort_v2,
}
