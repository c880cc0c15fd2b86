"""Attention with dropout (scaled_dot_product_attention, multi_head_attention_forward): the dropout mask solved
from the output where it can be, then checked as dropout's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from api_registry.calls import arg
from precheck.core.older_python import zip_strict
from precheck.grader.laws.base import (
    MIN_N,
    Finding,
    NotCheckable,
    count_finding,
    f64,
    float_tensor_arg,
    number_arg,
    output_tensor,
    rtol_of,
    share_finding,
    tensor_arg,
    tiny_of,
)


@dataclass(frozen=True)
class _Attention:
    """Attention with dropout, one row per batch entry and head: out = (weights * mask / (1-p)) @ values, each
    output value within `error` of it for the true mask."""

    weights: torch.Tensor  # softmax(q k^T * scale + mask), (B, L, S), float64
    values: torch.Tensor  # V, (B, S, Ev)
    out: torch.Tensor  # the output, (B, L, Ev)
    error: torch.Tensor  # bound on the output's distance from the exact attention with the true mask, (B, L, Ev)
    rows: torch.Tensor  # rows that have weights (not fully masked) and a finite output, (B, L)
    p: float

    @property
    def kept(self) -> torch.Tensor:
        """The weight of each position if it is kept, P / (1-p)."""
        return self.weights / (1 - self.p) if self.p < 1 else torch.zeros_like(self.weights)


def _accumulation(dtype: torch.dtype) -> float:
    """Rounding of one term of a sum the target accumulates: CPU kernels accumulate half types in float32."""
    return 2.0**-53 if dtype == torch.float64 else 2.0**-24


def _probability(value: Any) -> float:
    p = number_arg(value, "dropout_p")
    if not 0 <= p <= 1:
        raise NotCheckable(f"dropout_p={p:g} is not a probability")
    return p


def _heads(t: torch.Tensor, q: torch.Tensor, gqa: bool) -> torch.Tensor:
    """Key or value with its heads repeated to the query's (grouped-query attention)."""
    if t.dim() < 3 or q.dim() < 3 or t.shape[-3] in (1, q.shape[-3]):
        return t
    if not gqa or q.shape[-3] % t.shape[-3]:
        raise NotCheckable(f"{q.shape[-3]} query heads cannot share {t.shape[-3]} key/value heads")
    return t.repeat_interleave(q.shape[-3] // t.shape[-3], dim=-3)


def _broadcast(*shapes: torch.Size) -> torch.Size:
    """torch.broadcast_shapes without its first-use import of sympy (0.2 s of a run): empty tensors broadcast."""
    return torch.broadcast_tensors(*(torch.empty((*shape, 0)) for shape in shapes))[0].shape[:-1]


def _attention(args: tuple, kwargs: dict, outputs: list) -> _Attention:
    """The call's attention weights in float64, with batch dims broadcast and flattened.

    The output's rounding error bound per row is 2 rtol of its dtype (the weights rounded before P @ V, the output
    rounded) plus the float32 error of the logits, about 4 u |q||k| scale, which the softmax turns into a relative
    error of the weights."""
    q = float_tensor_arg(arg(args, kwargs, 0, "query", None), "query")
    gqa = bool(arg(args, kwargs, 7, "enable_gqa", False))
    k = _heads(float_tensor_arg(arg(args, kwargs, 1, "key", None), "key"), q, gqa)
    v = _heads(float_tensor_arg(arg(args, kwargs, 2, "value", None), "value"), q, gqa)
    mask, out = arg(args, kwargs, 3, "attn_mask", None), output_tensor(outputs)
    p = _probability(arg(args, kwargs, 4, "dropout_p", 0.0))
    scale = arg(args, kwargs, 6, "scale", None)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else number_arg(scale, "scale")
    q64, k64 = f64(q), f64(k).transpose(-2, -1)
    logits = q64 @ k64 * scale
    if arg(args, kwargs, 5, "is_causal", False):
        logits = logits.masked_fill(~torch.ones(logits.shape[-2:], dtype=torch.bool).tril(), -math.inf)
    if isinstance(mask, torch.Tensor):
        mask = mask.detach().cpu()
        logits = logits.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else logits + mask.double()
    weights = torch.softmax(logits, -1)
    spread = (q64.abs() @ k64.abs() * scale).amax(-1, keepdim=True)
    rtol = 2 * rtol_of(out.dtype) + 4 * _accumulation(q.dtype) * spread
    batch = _broadcast(weights.shape[:-2], v.shape[:-2])
    want = (*batch, weights.shape[-2], v.shape[-1])
    if tuple(out.shape) != want:
        raise NotCheckable(f"output shape {tuple(out.shape)} is not the attention's {want}")
    weights = weights.expand(*batch, *weights.shape[-2:]).reshape(-1, *weights.shape[-2:]).nan_to_num(0.0)
    values = f64(v).expand(*batch, *v.shape[-2:]).reshape(-1, *v.shape[-2:])
    o = f64(out).reshape(-1, *out.shape[-2:])
    rtol = rtol.expand(*batch, *rtol.shape[-2:]).reshape(-1, rtol.shape[-2], 1)
    rows = (weights.sum(-1) > 0) & torch.isfinite(o).all(-1)
    kept = weights / (1 - p) if p < 1 else torch.zeros_like(weights)
    return _Attention(weights, values, o, tiny_of(out.dtype) + rtol * (kept @ values.abs()), rows, p)


def _recomputed(att: _Attention, keep: torch.Tensor, loose: torch.Tensor) -> Finding:
    """The output re-computed in float64 with the dropout mask `keep` against the target's, within the rounding
    bound of each row plus the weight of positions whose mask could not be told (`loose`)."""
    kept = att.kept
    recomputed = (kept * keep) @ att.values
    slack = att.error + (kept * loose) @ att.values.abs()
    bad = ((att.out - recomputed).abs() > slack) & att.rows[..., None]
    n = int(att.rows.sum()) * att.out.shape[-1]
    return count_finding(
        "recomputed output",
        bad,
        n,
        "output values match softmax(q k^T) * mask/(1-p) @ V with the recovered mask",
        "output values differ from softmax(q k^T) * mask/(1-p) @ V with the recovered mask",
    )


def _snap(w: torch.Tensor, kept: torch.Tensor, noise: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(keep, tellable): each measured weight w snapped to 0 or P/(1-p), whichever is nearer; told apart only where
    P/(1-p) exceeds four times the bound on the measurement's error, so that a wrong snap is impossible."""
    return (w - kept).abs() < w.abs(), (kept > 4 * noise) & rows[..., None]


def _recovered(att: _Attention) -> tuple[torch.Tensor, torch.Tensor]:
    """(keep, tellable) recovered from the output: out_row = w @ V with w_j = P_j * mask_j / (1-p).

    When the nonzero rows of V are independent (at most E_v of them: the caller's shape check) w is the
    least-squares solution in float64,
    its error at most the output's error bound times the norm of column j of pinv(V). A zero row of V (the zero
    attention of multi-head attention) leaves no trace of its weight: never told. With p 0 or 1 nothing is drawn:
    the mask is known."""
    everything = torch.ones_like(att.weights, dtype=torch.bool)
    if att.p in (0.0, 1.0):
        return everything, everything & att.rows[..., None]
    live = att.values.ne(0).any(-1)
    width = att.values.shape[-1]
    singular = torch.linalg.svdvals(att.values)
    if ((singular > singular[:, :1] * width * 1e-12).sum(-1) < live.sum(-1)).any():
        raise NotCheckable(
            "dropout inside attention: the rows of V are linearly dependent, the mask cannot be recovered"
        )
    pinv = torch.linalg.pinv(att.values)
    noise = att.error.norm(dim=-1, keepdim=True) * pinv.norm(dim=-2, keepdim=True)
    keep, tellable = _snap(att.out @ pinv, att.kept, noise, att.rows)
    return keep, tellable & live[:, None, :]


def _attention_findings(att: _Attention, keep: torch.Tensor, tellable: torch.Tensor) -> list[Finding]:
    """The output re-computed with the mask must match the target's; the share dropped among the weights whose
    mask could be told is binomial in p (when something is drawn)."""
    n = int(tellable.sum())
    if n == 0:
        raise NotCheckable("dropout inside attention: no attention weight stands out of the rounding noise")
    findings = [_recomputed(att, keep, ~tellable)]
    if 0 < att.p < 1 and n >= MIN_N:
        findings.append(
            share_finding(
                "share of dropped weights",
                int((tellable & ~keep).sum()),
                n,
                att.p,
                f"p={att.p:g}, n={n} attention weights large enough to tell",
            )
        )
    return findings


def _solvable(keys: int, width: int) -> None:
    """A row's dropout mask is solved from its output (w @ V) only when V has at most as many rows (keys that can
    carry weight) as columns: with more, many masks give the same output."""
    if keys > width:
        raise NotCheckable(f"dropout inside attention: the mask cannot be recovered when L_k > E_v ({keys} > {width})")


def _dropping(p: Any) -> bool:
    """Whether a recorded dropout_p draws a mask at all (0 and 1 leave nothing to recover)."""
    return isinstance(p, (int, float)) and not isinstance(p, bool) and 0 < p < 1


def _shape(value: Any) -> tuple[int, ...] | None:
    """The shape of a tensor or of a recorded one (a TensorSpec): the shape checks read either."""
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None and len(shape) else None


def sdpa_shapes(args: tuple, kwargs: dict, outputs: list) -> None:
    """NotCheckable when the call's shapes alone rule its dropout mask out of reach: sdpa_law asks this of the
    rebuilt tensors, ``precheck apis --check`` of the recorded ones, so the check predicts the run's SKIP."""
    key, value = (_shape(arg(args, kwargs, i, name, None)) for i, name in ((1, "key"), (2, "value")))
    if key is not None and len(key) > 1 and value is not None and _dropping(arg(args, kwargs, 4, "dropout_p", 0.0)):
        _solvable(key[-2], value[-1])


def sdpa_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Dropout inside attention, the mask recovered from the output (see _recovered)."""
    att = _attention(args, kwargs, outputs)
    sdpa_shapes(args, kwargs, outputs)
    return _attention_findings(att, *_recovered(att))


# ------------------------------------------------------------------------------------------ multi-head attention


@dataclass(frozen=True)
class _Bounded:
    """A value the target computes, recomputed in float64, and a bound on the distance of the target's copy."""

    value: torch.Tensor
    error: torch.Tensor

    @property
    def top(self) -> torch.Tensor:
        """Bound on the magnitude of the target's copy."""
        return self.value.abs() + self.error

    def cat(self, extra: torch.Tensor, dim: int) -> _Bounded:
        """Rows the target appends exactly (bias_k/bias_v, zero attention)."""
        return _Bounded(torch.cat([self.value, extra], dim), torch.cat([self.error, torch.zeros_like(extra)], dim))

    def split_heads(self, heads: int) -> _Bounded:
        """(S, N, E) -> (N*heads, S, E/heads), torch's view(S, N*heads, head_dim).transpose(0, 1)."""
        return _Bounded(
            *(t.reshape(t.shape[0], t.shape[1] * heads, -1).transpose(0, 1) for t in (self.value, self.error))
        )


def _rounding(dtype: torch.dtype, n: int) -> float:
    """Relative error, against the sum of the terms' magnitudes, of x @ W^T + b over n features in the dtype: the
    product and the bias rounded to the dtype (one rtol covers both) and n+1 terms accumulated."""
    return rtol_of(dtype) + (n + 1) * _accumulation(dtype)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> _Bounded:
    """An input projection in float64 and the bound on the target's rounding of it."""
    x64, w64 = f64(x), f64(float_tensor_arg(weight, "a projection weight"))
    b64 = torch.zeros(w64.shape[0], dtype=torch.float64) if bias is None else f64(bias)
    if x64.shape[-1] != w64.shape[1] or b64.shape != w64.shape[:1]:
        raise NotCheckable(
            f"projection weight {tuple(w64.shape)} or bias {tuple(b64.shape)} does not fit inputs "
            f"of {x64.shape[-1]} features"
        )
    size = x64.abs() @ w64.abs().T + b64.abs()
    return _Bounded(x64 @ w64.T + b64, _rounding(dtype, w64.shape[1]) * size + tiny_of(dtype))


def _mha_projections(
    args: tuple, kwargs: dict, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dtype: torch.dtype
) -> tuple[_Bounded, _Bounded, _Bounded]:
    """The in-projected q, k, v, (L or S, N, E), from the packed in_proj_weight or the three separate weights."""
    bias = arg(args, kwargs, 6, "in_proj_bias", None)
    biases = (None,) * 3 if bias is None else f64(float_tensor_arg(bias, "in_proj_bias")).chunk(3)
    if arg(args, kwargs, 17, "use_separate_proj_weight", False):
        weights = tuple(arg(args, kwargs, 18 + i, f"{x}_proj_weight", None) for i, x in enumerate("qkv"))
    else:
        weights = f64(float_tensor_arg(arg(args, kwargs, 5, "in_proj_weight", None), "in_proj_weight")).chunk(3)
    return tuple(_linear(x, w, b, dtype) for x, w, b in zip_strict((query, key, value), weights, biases))


def _additive(mask: Any, name: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A mask as torch adds it to the logits (a bool True is -inf) and the magnitude of its finite values."""
    if mask is None:
        return None
    mask = tensor_arg(mask, name).detach().cpu()
    if mask.dtype == torch.bool:
        zeros = torch.zeros(mask.shape, dtype=torch.float64)
        return zeros.masked_fill(mask, -math.inf), zeros
    if not mask.is_floating_point():
        raise NotCheckable(f"{name} is neither bool nor floating point ({mask.dtype})")
    mask = f64(mask)
    return mask, mask.abs().nan_to_num(0.0, 0.0, 0.0)


def _mha_mask(
    args: tuple, kwargs: dict, batch: int, heads: int, shape: tuple[int, int], pad: int, need_weights: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The merged attn_mask + key_padding_mask, (N*H or 1, L, S), padded with allowed columns for bias_k and the
    zero attention, and the magnitude of its finite terms. torch turns is_causal into SDPA's causal mask (and
    ignores attn_mask) only without key_padding_mask and without weights."""
    kpm = _additive(arg(args, kwargs, 14, "key_padding_mask", None), "key_padding_mask")
    attn = _additive(arg(args, kwargs, 16, "attn_mask", None), "attn_mask")
    total = [torch.zeros(1, *shape, dtype=torch.float64)] * 2
    if arg(args, kwargs, 24, "is_causal", False) and kpm is None and not need_weights:
        return total[0].masked_fill(~torch.ones(shape, dtype=torch.bool).tril(), -math.inf), total[1]
    if attn is not None:
        attn = [torch.nn.functional.pad(t, (0, pad)).reshape(-1, *t.shape[-2:-1], shape[1]) for t in attn]
        if attn[0].shape[-2:] != shape or attn[0].shape[0] not in (1, batch * heads):
            raise NotCheckable(
                f"attn_mask of shape {tuple(attn[0].shape)} does not fit {batch * heads} heads of "
                f"{shape[0]} queries and {shape[1]} keys"
            )
        total = [a + b for a, b in zip_strict(total, attn)]
    if kpm is not None:
        kpm = [torch.nn.functional.pad(t.reshape(-1, t.shape[-1]), (0, pad)) for t in kpm]
        if kpm[0].shape != (batch, shape[1]):
            raise NotCheckable(
                f"key_padding_mask of shape {tuple(kpm[0].shape)} does not fit {batch} batch entries of {shape[1]} keys"
            )
        total = [a + b.repeat_interleave(heads, 0)[:, None] for a, b in zip_strict(total, kpm)]
    return total[0], total[1]


def _undo_out_proj(
    args: tuple, kwargs: dict, out: torch.Tensor, size: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The heads' outputs (N*H, L, hd) that the target fed to out_proj, recovered from attn_output (L, N, E_out) as
    (attn_output - b) @ pinv(W^T), and the bound on their error: out_proj's rounding, bounded with `size` (a bound
    on the heads' outputs), carried through |pinv(W^T)|, plus the float64 solve's cond(W) roundoffs."""
    weight = f64(float_tensor_arg(arg(args, kwargs, 11, "out_proj_weight", None), "out_proj_weight"))
    bias = arg(args, kwargs, 12, "out_proj_bias", None)
    bias = torch.zeros(out.shape[-1], dtype=torch.float64) if bias is None else f64(float_tensor_arg(bias, "bias"))
    length, batch, width = size.shape[1], out.shape[1], size.shape[0] * size.shape[2] // out.shape[1]
    if weight.shape != (out.shape[-1], width) or bias.shape != weight.shape[:1] or out.shape[0] != length:
        raise NotCheckable(
            f"attn_output {tuple(out.shape)} does not fit out_proj_weight {tuple(weight.shape)} and {length} queries"
        )
    singular = torch.linalg.svdvals(weight)
    if weight.shape[0] < width or singular[-1] <= singular[0] * width * 1e-12:
        raise NotCheckable("out_proj_weight has rank below embed_dim: the heads' outputs cannot be recovered")
    inverse = torch.linalg.pinv(weight.T)
    centred = out - bias
    heads = size.transpose(0, 1).reshape(length, batch, width)
    error = _rounding(dtype, width) * (heads @ weight.abs().T + bias.abs()) + tiny_of(dtype)
    solve = width * 2.0**-52 * (singular[0] / singular[-1]).item() * (centred.abs() @ inverse.abs())
    return tuple(
        t.reshape(length, size.shape[0], -1).transpose(0, 1) for t in (centred @ inverse, error @ inverse.abs() + solve)
    )


@dataclass(frozen=True)
class _MultiHead:
    """A multi-head attention call as its check needs it: the attention per batch entry and head, the relative
    error bound of each attention weight per row, and the returned weights, averaged over `group` heads."""

    attention: _Attention
    rel: torch.Tensor  # (N*H, L, 1)
    returned: torch.Tensor | None  # (N*H / group, L, S), float64
    group: int
    dtype: torch.dtype


def _mha_call(args: tuple, kwargs: dict, outputs: list) -> _MultiHead:
    """torch's multi_head_attention_forward re-traced in float64 up to the attention, the heads' outputs recovered
    from attn_output, every step with a bound on the target's rounding.

    Rounding the in-projected q and k moves each logit by at most (|q|+dq)(|k|+dk) - |q||k| (scaled), and the
    scaling, logit, and mask roundings by 2 rtol of the magnitudes; logits moved by at most d change a softmax
    weight by a factor within exp(+-2d). The softmax, the dropout scale and product add 2 rtol, the sums their
    accumulation."""
    query, key, value = (
        float_tensor_arg(arg(args, kwargs, i, name, None), name) for i, name in enumerate(("query", "key", "value"))
    )
    out = output_tensor(outputs)
    dtype, r, acc = out.dtype, rtol_of(out.dtype), _accumulation(out.dtype)
    if arg(args, kwargs, 21, "static_k", None) is not None or arg(args, kwargs, 22, "static_v", None) is not None:
        raise NotCheckable("static_k/static_v stand in for the projected keys and values: not reproduced")
    if query.dim() not in (2, 3) or key.dim() != query.dim() or value.dim() != query.dim():
        raise NotCheckable("query, key and value are neither all 2-D (unbatched) nor all 3-D (batched)")
    if query.dim() == 2:
        query, key, value, out = (t.unsqueeze(1) for t in (query, key, value, out))
    heads = int(number_arg(arg(args, kwargs, 4, "num_heads", None), "num_heads"))
    training = bool(arg(args, kwargs, 13, "training", True))
    p = _probability(arg(args, kwargs, 10, "dropout_p", None)) if training else 0.0
    need_weights = bool(arg(args, kwargs, 15, "need_weights", True))
    length, batch, embed = query.shape
    if heads <= 0 or embed % heads:
        raise NotCheckable(f"embed_dim {embed} is not divisible by num_heads {heads}")
    q, k, v = _mha_projections(args, kwargs, query, key, value, dtype)
    pad = 0
    bias_k, bias_v = arg(args, kwargs, 7, "bias_k", None), arg(args, kwargs, 8, "bias_v", None)
    if bias_k is not None or bias_v is not None:
        k, v = (
            t.cat(f64(float_tensor_arg(b, name)).reshape(1, 1, embed).expand(1, batch, embed), 0)
            for t, b, name in ((k, bias_k, "bias_k"), (v, bias_v, "bias_v"))
        )
        pad += 1
    q, k, v = (t.split_heads(heads) for t in (q, k, v))
    if arg(args, kwargs, 9, "add_zero_attn", False):
        k, v = (t.cat(torch.zeros(batch * heads, 1, embed // heads, dtype=torch.float64), 1) for t in (k, v))
        pad += 1
    keys = k.value.shape[1]
    mask, mask_size = _mha_mask(args, kwargs, batch, heads, (length, keys), pad, need_weights)
    scale = (embed // heads) ** -0.5
    logits = q.value @ k.value.transpose(1, 2) * scale + mask
    top = q.top @ k.top.transpose(1, 2) * scale
    shift = top - q.value.abs() @ k.value.abs().transpose(1, 2) * scale
    shift = (shift + (2 * r + embed // heads * acc) * top + 2 * r * mask_size).masked_fill(logits == -math.inf, 0)
    rel = torch.expm1(2 * shift.amax(-1, keepdim=True)) + 2 * r + (keys + 1) * acc
    weights = torch.softmax(logits, -1).nan_to_num(0.0)
    kept = weights / (1 - p) if p < 1 else torch.zeros_like(weights)
    error = (rel + ((keys + 1) * acc + r) * (1 + rel)) * (kept @ v.top) + kept @ v.error + tiny_of(dtype)
    heads_out, heads_error = _undo_out_proj(args, kwargs, f64(out), kept @ v.top + error, dtype)
    rows = (weights.sum(-1) > 0) & torch.isfinite(heads_out).all(-1)
    attention = _Attention(weights, v.value, heads_out, error + heads_error, rows, p)
    group = heads if arg(args, kwargs, 23, "average_attn_weights", True) else 1
    returned = outputs[1] if need_weights and len(outputs) > 1 else None
    if returned is not None:
        returned = f64(tensor_arg(returned, "attn_output_weights"))
        if returned.numel() != batch * heads // group * length * keys:
            raise NotCheckable(
                f"attn_output_weights {tuple(returned.shape)} does not fit {batch} batch entries, "
                f"{heads // group} heads, {length} queries and {keys} keys"
            )
        returned = returned.reshape(-1, length, keys)
    return _MultiHead(attention, rel, returned, group, dtype)


def _mha_weights(call: _MultiHead, keep: torch.Tensor, loose: torch.Tensor) -> Finding:
    """The returned attention weights against softmax(q k^T) * mask/(1-p) with the mask found, averaged over heads
    where torch averages them (its mean accumulated and rounded to the dtype); weights whose mask could not be
    told may lie anywhere between 0 and P/(1-p)."""
    att, tiny = call.attention, tiny_of(call.dtype)
    size = att.kept * (1 + call.rel) + tiny
    model, slack, valid = att.kept * keep, call.rel * att.kept + tiny + loose * size, att.rows[..., None] & (size > 0)
    if call.group > 1:
        model, slack, size = (t.reshape(-1, call.group, *t.shape[-2:]).mean(1) for t in (model, slack, size))
        slack = slack + (2 * rtol_of(call.dtype) + call.group * _accumulation(call.dtype)) * size + tiny
        valid = valid.reshape(-1, call.group, *valid.shape[-2:]).all(1)
    bad = valid & ~((call.returned - model).abs() <= slack)
    which = "head-averaged weights" if call.group > 1 else "weights"
    return count_finding(
        "attention weights",
        bad,
        int(valid.sum()),
        f"returned {which} match softmax(q k^T) * mask/(1-p)",
        f"returned {which} differ from softmax(q k^T) * mask/(1-p)",
    )


def mha_shapes(args: tuple, kwargs: dict, outputs: list) -> None:
    """NotCheckable when the shapes alone rule the mask out of reach (as sdpa_shapes): the mask is solved per head
    from the heads' outputs, over the keys plus bias_k's row (add_zero_attn's zero row carries no weight), unless
    the per-head weights are returned (need_weights without averaging), which show the mask as they are."""
    if not arg(args, kwargs, 13, "training", True) or not _dropping(arg(args, kwargs, 10, "dropout_p", None)):
        return
    per_head = arg(args, kwargs, 15, "need_weights", True) and not arg(args, kwargs, 23, "average_attn_weights", True)
    if per_head and len(outputs) > 1:
        return
    query, key = (_shape(arg(args, kwargs, i, name, None)) for i, name in ((0, "query"), (1, "key")))
    heads = arg(args, kwargs, 4, "num_heads", None)
    if query is None or key is None or not isinstance(heads, int) or heads <= 0 or query[-1] % heads:
        return
    biased = arg(args, kwargs, 7, "bias_k", None) is not None or arg(args, kwargs, 8, "bias_v", None) is not None
    _solvable(key[0] + biased, query[-1] // heads)


def mha_law(args: tuple, kwargs: dict, outputs: list) -> list[Finding]:
    """Dropout inside multi-head attention: per head, the mask is read off the returned per-head weights (P/(1-p)
    or 0) where torch returns them, else recovered from the heads' outputs as for scaled_dot_product_attention;
    then the same findings, plus the returned weights against the mask."""
    call = _mha_call(args, kwargs, outputs)
    att = call.attention
    if call.returned is not None and call.group == 1 and 0 < att.p < 1:
        keep, tellable = _snap(call.returned, att.kept, call.rel * att.kept + tiny_of(call.dtype), att.rows)
    else:
        mha_shapes(args, kwargs, outputs)
        keep, tellable = _recovered(att)
    findings = _attention_findings(att, keep, tellable)
    return findings if call.returned is None else [*findings, _mha_weights(call, keep, ~tellable)]
