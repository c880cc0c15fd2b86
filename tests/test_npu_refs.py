"""The CPU references of the torch_npu fused ops (api_registry/npu.py), each against an independent formula and,
where torch has the same op, against torch itself."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.bias import causal_lower_right
from torch.optim.adam import adam
from torch.optim.adamw import adamw

from api_registry import catalogue
from api_registry.npu import (
    REFERENCES,
    npu_apply_adam,
    npu_apply_adam_w,
    npu_confusion_transpose,
    npu_fast_gelu,
    npu_fusion_attention,
    npu_group_norm_silu,
    npu_layer_norm_eval,
    npu_linear,
    npu_mish,
    npu_moe_gating_top_k_softmax,
    npu_rms_norm,
    npu_rotary_mul,
    npu_scaled_masked_softmax,
    npu_sort_v2,
    npu_swiglu,
)

F64 = torch.float64
CLOSE = {"rtol": 1e-10, "atol": 1e-12}


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64).to(dtype)


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, **CLOSE)


# ---------------------------------------------------------------- the table and the signatures

# torch_npu's signatures (parameter names as its Python binding spells them: schema ``self`` is ``input``).
SIGNATURES = {
    "npu_fusion_attention": "query key value head_num input_layout pse=None padding_mask=None atten_mask=None "
    "scale=1.0 keep_prob=1.0 pre_tockens=2147483647 next_tockens=2147483647 inner_precise=0 "
    "prefix=None actual_seq_qlen=None actual_seq_kvlen=None sparse_mode=0 "
    "gen_mask_parallel=True sync=False softmax_layout='' sink=None",
    "npu_rms_norm": "input gamma epsilon=1e-06",
    "npu_swiglu": "input dim=-1",
    "npu_rotary_mul": "input r1 r2 rotary_mode='half'",
    "npu_fast_gelu": "input",
    "npu_scaled_masked_softmax": "x mask scale=1 fixed_triu_mask=False",
    "npu_linear": "input weight bias=None",
    "npu_confusion_transpose": "input perm shape transpose_first",
    "npu_apply_adam": "beta1_power beta2_power lr beta1 beta2 epsilon grad use_locking use_nesterov out=None",
    "npu_apply_adam_w": "beta1_power beta2_power lr weight_decay beta1 beta2 epsilon grad max_grad_norm=None "
    "amsgrad=None maximize=None out=None",
    "npu_layer_norm_eval": "input normalized_shape weight=None bias=None eps=1e-05",
    "npu_group_norm_silu": "input weight bias group eps=1e-05",
    "npu_mish": "input",
    "npu_moe_gating_top_k_softmax": "x finished=None k=1",
    "npu_sort_v2": "input dim=-1 descending=False out=None",
}


def test_table_covers_every_op_with_a_known_class() -> None:
    classes = {
        catalogue.MATMUL,
        catalogue.CONV,
        catalogue.REDUCTION,
        catalogue.BINARY,
        catalogue.POINTWISE,
        catalogue.OTHER,
    }
    assert set(REFERENCES) == set(SIGNATURES) == set(catalogue.NPU)
    for name, fn in REFERENCES.items():
        assert fn.__name__ == name and catalogue.NPU[name] in classes
        assert fn.__doc__
    assert catalogue.NPU["npu_linear"] == catalogue.MATMUL
    assert catalogue.NPU["npu_fusion_attention"] == catalogue.OTHER


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signature_matches_torch_npu(name: str) -> None:
    params = inspect.signature(REFERENCES[name]).parameters.values()
    spelled = " ".join(p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}" for p in params)
    assert spelled == SIGNATURES[name]


# ---------------------------------------------------------------- npu_fusion_attention


def to_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """(B, N, S, D) -> layout, written out index by index for the independent side."""
    b, n, s, d = t.shape
    if layout == "BNSD":
        return t.clone()
    if layout == "BSND":
        return t.permute(0, 2, 1, 3).contiguous()
    if layout == "BSH":
        return t.permute(0, 2, 1, 3).reshape(b, s, n * d)
    return t.permute(2, 0, 1, 3).reshape(s, b, n * d)  # SBH


def qkv(b: int, nq: int, nkv: int, sq: int, skv: int, d: int, dv: int | None = None, seed: int = 0):
    return (
        randn(b, nq, sq, d, seed=seed),
        randn(b, nkv, skv, d, seed=seed + 1),
        randn(b, nkv, skv, dv or d, seed=seed + 2),
    )


def sdpa(q, k, v, **kw) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)


@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
@pytest.mark.parametrize("nq,nkv", [(2, 2), (4, 2), (3, 1)])
def test_fusion_attention_layouts_and_gqa_match_sdpa(layout: str, nq: int, nkv: int) -> None:
    q, k, v = qkv(2, nq, nkv, 5, 7, 8)
    out, smax, ssum, sout, seed, offset, numels = npu_fusion_attention(
        to_layout(q, layout), to_layout(k, layout), to_layout(v, layout), nq, layout, scale=0.3
    )
    close(out, to_layout(sdpa(q, k, v, scale=0.3), layout))
    assert smax.shape == ssum.shape == (2, nq, 5, 8)
    assert sout.numel() == 0 and (seed, offset, numels) == (0, 0, 2 * nq * 5 * 7)


def test_fusion_attention_value_head_dim_may_differ() -> None:
    q, k, v = qkv(1, 4, 2, 3, 6, 8, dv=5)
    out = npu_fusion_attention(to_layout(q, "BSH"), to_layout(k, "BSH"), to_layout(v, "BSH"), 4, "BSH")[0]
    close(out, to_layout(sdpa(q, k, v, scale=1.0), "BSH"))


def test_fusion_attention_pse_is_added_before_scaling() -> None:
    q, k, v = qkv(2, 2, 2, 4, 4, 8)
    pse = randn(1, 2, 4, 4, seed=9)
    out = npu_fusion_attention(q, k, v, 2, "BNSD", pse=pse, scale=0.25)[0]
    close(out, sdpa(q, k, v, attn_mask=0.25 * pse, scale=0.25))


def test_fusion_attention_softmax_max_and_sum() -> None:
    q, k, v = qkv(1, 2, 2, 4, 6, 8)
    masked = randn(4, 6, seed=5) > 0.8
    masked[:, 0] = False
    _, smax, ssum, *_ = npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=masked, scale=0.5)
    scores = (q @ k.transpose(-1, -2) * 0.5).masked_fill(masked, -math.inf)
    assert torch.equal(smax, smax[..., :1].expand_as(smax)) and torch.equal(ssum, ssum[..., :1].expand_as(ssum))
    close(smax[..., 0], scores.amax(-1))
    close(smax[..., 0] + ssum[..., 0].log(), torch.logsumexp(scores, -1))


def keep_band(sq: int, skv: int, pre: int, nxt: int) -> torch.Tensor:
    """Where the band of sparse_mode 4 keeps a score: -pre <= j - i - (skv - sq) <= nxt."""
    return torch.tensor([[-pre <= j - i - (skv - sq) <= nxt for j in range(skv)] for i in range(sq)])


@pytest.mark.parametrize("sq,skv", [(5, 5), (4, 7), (6, 6)])
def test_fusion_attention_sparse_modes_match_sdpa(sq: int, skv: int) -> None:
    q, k, v = qkv(2, 4, 2, sq, skv, 8, seed=3)
    compressed = torch.ones(2048, 2048, dtype=torch.bool).triu(1)  # what torch_npu callers pass for modes 2-4

    def fa(mode: int, mask: torch.Tensor, **kw) -> torch.Tensor:
        return npu_fusion_attention(q, k, v, 4, "BNSD", atten_mask=mask, sparse_mode=mode, scale=0.4, **kw)[0]

    given = randn(2, 1, sq, skv, seed=4) > 0.7
    given[..., 0] = False
    for mode in (0, 1):
        close(fa(mode, given), sdpa(q, k, v, attn_mask=~given, scale=0.4))
    close(fa(2, compressed), sdpa(q, k, v, is_causal=True, scale=0.4))
    close(fa(3, compressed), sdpa(q, k, v, attn_mask=causal_lower_right(sq, skv), scale=0.4))
    close(
        fa(4, compressed, pre_tockens=2, next_tockens=1), sdpa(q, k, v, attn_mask=keep_band(sq, skv, 2, 1), scale=0.4)
    )


def test_fusion_attention_without_mask_ignores_sparse_mode() -> None:
    q, k, v = qkv(1, 2, 2, 4, 4, 8)
    close(npu_fusion_attention(q, k, v, 2, "BNSD", sparse_mode=2, next_tockens=0)[0], sdpa(q, k, v, scale=1.0))


def test_fusion_attention_fully_masked_rows_are_zero() -> None:
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 2, 6, 3, 8))  # rightDownCausal, Sq > Skv: 3 rows see no key
    mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    out, smax, ssum, *_ = npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=mask, sparse_mode=3)
    out.sum().backward()
    assert torch.equal(q.grad[:, :, :3], torch.zeros(1, 2, 3, 8, dtype=F64))
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    q, k, v = q.detach(), k.detach(), v.detach()
    out = out.detach()
    assert torch.equal(out[:, :, :3], torch.zeros_like(out[:, :, :3]))
    assert torch.all(smax[:, :, :3] == -math.inf) and torch.all(ssum[:, :, :3] == 0)
    close(out[:, :, 3:], sdpa(q[:, :, 3:], k, v, attn_mask=causal_lower_right(3, 3), scale=1.0))


@pytest.mark.parametrize("mode", [0, 3])
def test_fusion_attention_tnd_attends_per_sequence(mode: int) -> None:
    qlens, kvlens = [3, 1, 4], [3, 2, 5]
    q, k, v = randn(sum(qlens), 4, 8, seed=1), randn(sum(kvlens), 2, 8, seed=2), randn(sum(kvlens), 2, 8, seed=3)
    mask = randn(4, 5, seed=4) > 0.6 if mode == 0 else torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    if mode == 0:
        mask[:, 0] = False
    out, smax, ssum, _, _, _, numels = npu_fusion_attention(
        q,
        k,
        v,
        4,
        "TND",
        atten_mask=mask,
        sparse_mode=mode,
        scale=0.3,
        actual_seq_qlen=[3, 4, 8],
        actual_seq_kvlen=[3, 5, 10],
    )
    assert smax.shape == ssum.shape == (8, 4, 8) and numels == 4 * (3 * 3 + 1 * 2 + 4 * 5)
    q0 = kv0 = 0
    for sq, skv in zip(qlens, kvlens):
        bnsd = [t[lo : lo + n].transpose(0, 1)[None] for t, lo, n in ((q, q0, sq), (k, kv0, skv), (v, kv0, skv))]
        keep = ~mask[:sq, :skv] if mode == 0 else causal_lower_right(sq, skv)
        close(out[q0 : q0 + sq], sdpa(*bnsd, attn_mask=keep, scale=0.3)[0].transpose(0, 1))
        q0, kv0 = q0 + sq, kv0 + skv


def test_fusion_attention_refuses_what_it_cannot_compute() -> None:
    q, k, v = qkv(1, 2, 2, 4, 4, 8)
    with pytest.raises(ValueError, match="^random: keep_prob < 1 draws a dropout mask$"):
        npu_fusion_attention(q, k, v, 2, "BNSD", keep_prob=0.9)
    with pytest.raises(ValueError, match="'NSBD'"):
        npu_fusion_attention(q, k, v, 2, "NSBD")
    with pytest.raises(ValueError, match="sparse_mode 5"):
        npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=torch.zeros(4, 4, dtype=torch.bool), sparse_mode=5)
    with pytest.raises(ValueError, match="actual_seq_qlen"):
        npu_fusion_attention(q[0], k[0], v[0], 2, "TND")
    with pytest.raises(ValueError, match="head_num=3"):
        npu_fusion_attention(q, k, v, 3, "BNSD")


def test_fusion_attention_gradients() -> None:
    q, k, v = (t[..., :4].requires_grad_() for t in qkv(1, 2, 1, 3, 4, 4))
    pse = randn(1, 2, 3, 4, seed=7).requires_grad_()
    mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    assert torch.autograd.gradcheck(
        lambda *t: npu_fusion_attention(*t[:3], 2, "BNSD", pse=t[3], atten_mask=mask, sparse_mode=3, scale=0.7)[0],
        (q, k, v, pse),
    )


@settings(max_examples=40, deadline=None)
@given(
    layout=st.sampled_from(["BSH", "SBH", "BSND", "BNSD"]),
    b=st.integers(1, 2),
    nkv=st.integers(1, 2),
    group=st.integers(1, 3),
    sq=st.integers(1, 6),
    skv=st.integers(1, 6),
    d=st.integers(1, 8),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fusion_attention_property_matches_sdpa(layout, b, nkv, group, sq, skv, d, causal, seed) -> None:
    q, k, v = qkv(b, nkv * group, nkv, sq, skv, d, seed=seed)
    mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1) if causal else None
    out = npu_fusion_attention(
        to_layout(q, layout),
        to_layout(k, layout),
        to_layout(v, layout),
        nkv * group,
        layout,
        atten_mask=mask,
        sparse_mode=2,
        scale=1 / math.sqrt(d),
    )[0]
    close(out, to_layout(sdpa(q, k, v, is_causal=causal), layout))


# ---------------------------------------------------------------- norms


def test_rms_norm_matches_formula_and_torch() -> None:
    x, g = randn(3, 5, 16), randn(16, seed=1)
    y, rstd = npu_rms_norm(x, g, 1e-5)
    close(y, x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * g)
    close(y, F.rms_norm(x, (16,), g, 1e-5))
    close(rstd, 1 / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5))
    assert rstd.shape == (3, 5, 1)


def test_rms_norm_normalises_over_every_gamma_dim() -> None:
    x, g = randn(2, 3, 4, 5), randn(4, 5, seed=1)
    y, rstd = npu_rms_norm(x, g)
    close(y, F.rms_norm(x, (4, 5), g, 1e-6))
    assert rstd.shape == (2, 3, 1, 1)


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=2, max_size=4),
    gamma_dims=st.integers(1, 2),
    eps=st.sampled_from([1e-6, 1e-5, 0.1]),
    seed=st.integers(0, 2**16),
)
def test_rms_norm_property(shape, gamma_dims, eps, seed) -> None:
    gamma_dims = min(gamma_dims, len(shape) - 1)
    x, g = randn(*shape, seed=seed), randn(*shape[-gamma_dims:], seed=seed + 1)
    y, rstd = npu_rms_norm(x, g, eps)
    close(y, F.rms_norm(x, tuple(shape[-gamma_dims:]), g, eps))
    assert rstd.shape == tuple(shape[:-gamma_dims]) + (1,) * gamma_dims


def test_layer_norm_eval_matches_torch() -> None:
    x, w, b = randn(3, 4, 6), randn(4, 6, seed=1), randn(4, 6, seed=2)
    close(npu_layer_norm_eval(x, [4, 6], w, b, 1e-3), F.layer_norm(x, (4, 6), w, b, 1e-3))
    close(npu_layer_norm_eval(x, [6]), F.layer_norm(x, (6,)))
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    close(npu_layer_norm_eval(x, [6], eps=0.5), (x - mean) / torch.sqrt(var + 0.5))


@pytest.mark.parametrize("shape", [(2, 6, 5), (2, 6, 3, 4), (3, 4)])
def test_group_norm_silu_matches_torch(shape: tuple[int, ...]) -> None:
    x, w, b = randn(*shape), randn(shape[1], seed=1), randn(shape[1], seed=2)
    out, mean, rstd = npu_group_norm_silu(x, w, b, 2, 1e-4)
    close(out, F.silu(F.group_norm(x, 2, w, b, 1e-4)))
    _, ref_mean, ref_rstd = torch.ops.aten.native_group_norm(x, w, b, shape[0], shape[1], math.prod(shape[2:]), 2, 1e-4)
    close(mean, ref_mean)
    close(rstd, ref_rstd)
    close(npu_group_norm_silu(x, None, None, shape[1] // 2)[0], F.silu(F.group_norm(x, shape[1] // 2)))


# ---------------------------------------------------------------- pointwise


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_swiglu(dim: int) -> None:
    x = randn(4, 6, 8)
    a, b = x.chunk(2, dim)
    close(npu_swiglu(x, dim), F.silu(a) * b)
    close(npu_swiglu(x, dim=dim), a / (1 + torch.exp(-a)) * b)


def test_rotary_mul_half_and_interleave() -> None:
    x, r1, r2 = randn(2, 3, 5, 8), randn(1, 1, 5, 8, seed=1), randn(1, 1, 5, 8, seed=2)
    x1, x2 = x[..., :4], x[..., 4:]
    close(npu_rotary_mul(x, r1, r2), r1 * x + r2 * torch.cat((-x2, x1), -1))
    rotated = torch.empty_like(x)
    rotated[..., 0::2], rotated[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    close(npu_rotary_mul(x, r1, r2, "interleave"), r1 * x + r2 * rotated)
    with pytest.raises(ValueError, match="quarter"):
        npu_rotary_mul(x, r1, r2, "quarter")


def test_fast_gelu_both_npu_forms() -> None:
    x = randn(1000) * 6
    close(npu_fast_gelu(x), x * torch.sigmoid(1.702 * x))
    close(npu_fast_gelu(x), x / (1 + torch.exp(-1.702 * x.abs())) * torch.exp(0.851 * (x - x.abs())))


def test_mish_matches_torch() -> None:
    x = randn(1000) * 10
    close(npu_mish(x), F.mish(x))
    close(npu_mish(x), x * torch.tanh(torch.log1p(torch.exp(x))))


def test_linear_matches_torch() -> None:
    x, w, b = randn(2, 3, 5), randn(4, 5, seed=1), randn(4, seed=2)
    close(npu_linear(x, w, b), F.linear(x, w, b))
    close(npu_linear(x, w), F.linear(x, w))


# ---------------------------------------------------------------- softmax, gating, movement


def test_scaled_masked_softmax() -> None:
    x = randn(2, 3, 4, 6)
    mask = randn(1, 1, 4, 6, seed=1) > 0.5
    close(npu_scaled_masked_softmax(x, mask, 0.7), torch.softmax((0.7 * x).masked_fill(mask, -10000.0), -1))
    triu = torch.ones(4, 6, dtype=torch.bool).triu(1)
    close(npu_scaled_masked_softmax(x, mask, 0.7, True), torch.softmax((0.7 * x).masked_fill(triu, -10000.0), -1))
    full = torch.ones(4, 6, dtype=torch.bool)
    close(npu_scaled_masked_softmax(x, full), torch.full_like(x, 1 / 6))  # -10000, not -inf: uniform, no nan


@pytest.mark.parametrize("shape", [(5, 8), (2, 3, 8)])
def test_moe_gating_top_k_softmax(shape: tuple[int, ...]) -> None:
    x = randn(*shape)
    y, idx, row_idx = npu_moe_gating_top_k_softmax(x, None, 3)
    ref = torch.topk(torch.softmax(x, -1), 3)
    close(y, ref.values)
    assert torch.equal(idx, ref.indices.int()) and idx.dtype == row_idx.dtype == torch.int32
    rows = math.prod(shape[:-1])
    flat = row_idx.reshape(rows, 3)
    assert all(flat[r, j] == j * rows + r for r in range(rows) for j in range(3))


def test_moe_gating_finished_rows_and_ties() -> None:
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 1.0, 2.0]], dtype=F64)
    finished = torch.tensor([False, True])
    y, idx, _ = npu_moe_gating_top_k_softmax(x, finished, k=2)
    assert idx.tolist() == [[1, 2], [4, 4]]
    close(y, torch.softmax(x, -1).gather(-1, torch.tensor([[1, 2], [0, 1]])))


@pytest.mark.parametrize("dim,descending", [(-1, False), (0, True), (1, False)])
def test_sort_v2_matches_torch(dim: int, descending: bool) -> None:
    x = randn(4, 5, 6)
    assert torch.equal(npu_sort_v2(x, dim, descending), torch.sort(x, dim, descending).values)


def test_confusion_transpose_both_orders() -> None:
    x = randn(2, 3, 4)
    out = npu_confusion_transpose(x, (1, 0, 2), (3, 8), True)
    assert torch.equal(out, torch.stack([x[:, i, :].reshape(-1) for i in range(3)]))
    out = npu_confusion_transpose(x, (0, 2, 1, 3), (2, 3, 2, 2), False)
    assert out.shape == (2, 2, 3, 2) and torch.equal(out, x.reshape(2, 3, 2, 2).transpose(1, 2))


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=2, max_size=4), data=st.data())
def test_confusion_transpose_property(shape, data) -> None:
    x = randn(*shape)
    perm = data.draw(st.permutations(range(len(shape))))
    permuted = x.permute(*perm).contiguous()
    assert torch.equal(npu_confusion_transpose(x, perm, (-1,), True), permuted.flatten())
    assert torch.equal(
        npu_confusion_transpose(permuted.flatten(), perm, [shape[p] for p in perm], False),
        permuted.reshape([shape[p] for p in perm]).permute(*perm),
    )


# ---------------------------------------------------------------- optimisers


def adam_state(seed: int = 0):
    return randn(10, seed=seed), randn(10, seed=seed + 1), randn(10, seed=seed + 2).abs(), randn(10, seed=seed + 3)


def test_apply_adam_is_torch_adam_with_eps_outside_bias_correction() -> None:
    var, m, v, grad = adam_state()
    b1, b2, lr, eps, step = 0.9, 0.99, 0.01, 1e-3, 3
    before = [t.clone() for t in (var, m, v)]
    out = npu_apply_adam(
        b1**step, b2**step, lr, b1, b2, eps * math.sqrt(1 - b2**step), grad, False, False, out=(var, m, v)
    )
    assert all(torch.equal(a, b) for a, b in zip((var, m, v), before))  # the state is read, not written
    ref = [t.clone() for t in (var, m, v)]
    adam(
        [ref[0]],
        [grad],
        [ref[1]],
        [ref[2]],
        [],
        [torch.tensor(step - 1.0)],
        foreach=False,
        amsgrad=False,
        beta1=b1,
        beta2=b2,
        lr=lr,
        weight_decay=0.0,
        eps=eps,
        maximize=False,
    )
    for actual, expected in zip(out, ref):
        close(actual, expected)


def test_apply_adam_nesterov_formula() -> None:
    var, m, v, grad = adam_state(seed=4)
    b1, b2, lr, eps = 0.8, 0.9, 0.1, 1e-4
    var_t, m_t, v_t = npu_apply_adam(0.5, 0.7, lr, b1, b2, eps, grad, False, True, out=(var, m, v))
    close(m_t, b1 * m + (1 - b1) * grad)
    close(v_t, b2 * v + (1 - b2) * grad**2)
    lr_t = lr * math.sqrt(1 - 0.7) / (1 - 0.5)
    close(var_t, var - lr_t * (b1 * m_t + (1 - b1) * grad) / (eps + v_t.sqrt()))


@pytest.mark.parametrize("amsgrad,maximize", [(False, False), (True, False), (False, True), (True, True)])
def test_apply_adam_w_is_torch_adamw(amsgrad: bool, maximize: bool) -> None:
    var, m, v, grad = adam_state(seed=8)
    max_sq = v + randn(10, seed=20).abs() * (randn(10, seed=21) > 0)
    b1, b2, lr, wd, eps, step = 0.9, 0.999, 0.01, 0.1, 1e-8, 4
    out = npu_apply_adam_w(
        b1 ** (step - 1),
        b2 ** (step - 1),
        lr,
        wd,
        b1,
        b2,
        eps,
        grad,
        max_sq if amsgrad else None,
        amsgrad,
        maximize,
        out=(var, m, v),
    )
    ref = [t.clone() for t in (var, m, v, max_sq)]
    adamw(
        [ref[0]],
        [grad],
        [ref[1]],
        [ref[2]],
        [ref[3]],
        [torch.tensor(step - 1.0)],
        foreach=False,
        amsgrad=amsgrad,
        beta1=b1,
        beta2=b2,
        lr=lr,
        weight_decay=wd,
        eps=eps,
        maximize=maximize,
    )
    for actual, expected in zip(out, ref):
        close(actual, expected)


def test_adam_needs_its_state() -> None:
    grad = randn(3)
    with pytest.raises(ValueError, match="out=\\(var, m, v\\)"):
        npu_apply_adam(0.9, 0.99, 0.1, 0.9, 0.99, 1e-8, grad, False, False)
    with pytest.raises(ValueError, match="max_grad_norm"):
        npu_apply_adam_w(1, 1, 0.1, 0.0, 0.9, 0.99, 1e-8, grad, None, True, False, out=(grad, grad, grad.abs()))


# ---------------------------------------------------------------- dtypes and gradients


def cases(dtype: torch.dtype) -> dict[str, tuple[tuple, dict]]:
    """One small call per op, in ``dtype``."""

    def r(*shape: int, seed: int = 0) -> torch.Tensor:
        return randn(*shape, seed=seed, dtype=dtype)

    triu = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    state = (r(6), r(6, seed=1), r(6, seed=2).abs())
    return {
        "npu_fusion_attention": (
            (r(1, 4, 3, 4), r(1, 2, 5, 4, seed=1), r(1, 2, 5, 4, seed=2), 4, "BNSD"),
            {"pse": r(1, 4, 3, 5, seed=3), "atten_mask": triu, "sparse_mode": 3, "scale": 0.5},
        ),
        "npu_rms_norm": ((r(3, 8), r(8, seed=1)), {}),
        "npu_swiglu": ((r(3, 8),), {}),
        "npu_rotary_mul": ((r(1, 2, 3, 8), r(1, 1, 3, 8, seed=1), r(1, 1, 3, 8, seed=2)), {}),
        "npu_fast_gelu": ((r(10),), {}),
        "npu_scaled_masked_softmax": ((r(2, 4, 4), r(4, 4, seed=1) > 0), {"scale": 0.5}),
        "npu_linear": ((r(3, 5), r(4, 5, seed=1), r(4, seed=2)), {}),
        "npu_confusion_transpose": ((r(2, 3, 4), (1, 0, 2), (3, 8), True), {}),
        "npu_apply_adam": ((0.9, 0.99, 0.01, 0.9, 0.99, 1e-8, r(6, seed=3), False, False), {"out": state}),
        "npu_apply_adam_w": ((0.9, 0.99, 0.01, 0.1, 0.9, 0.99, 1e-8, r(6, seed=3)), {"out": state}),
        "npu_layer_norm_eval": ((r(3, 6), [6], r(6, seed=1), r(6, seed=2)), {}),
        "npu_group_norm_silu": ((r(2, 4, 3), r(4, seed=1), r(4, seed=2), 2), {}),
        "npu_mish": ((r(10),), {}),
        "npu_moe_gating_top_k_softmax": ((r(4, 6),), {"k": 2}),
        "npu_sort_v2": ((r(3, 5),), {"dim": 0}),
    }


def float_outputs(result) -> list[torch.Tensor]:
    outputs = result if isinstance(result, tuple) else (result,)
    return [t for t in outputs if isinstance(t, torch.Tensor) and t.is_floating_point()]


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_outputs_keep_the_input_dtype(dtype: torch.dtype) -> None:
    for name, (args, kwargs) in cases(dtype).items():
        outputs = float_outputs(REFERENCES[name](*args, **kwargs))
        assert outputs and all(t.dtype == dtype for t in outputs), name


NOT_DIFFERENTIABLE = {"npu_apply_adam", "npu_apply_adam_w"}


@pytest.mark.parametrize("name", sorted(set(REFERENCES) - NOT_DIFFERENTIABLE))
def test_gradients_are_correct(name: str) -> None:
    args, kwargs = cases(F64)[name]
    args = tuple(
        a.clone().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
    )
    kwargs = {
        k: v.clone().requires_grad_() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        for k, v in kwargs.items()
    }
    leaves = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.requires_grad]
    fn = REFERENCES[name]
    first = float_outputs(fn(*args, **kwargs))[0]
    first.sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in leaves), name

    def call(*tensors):
        it = iter(tensors)
        a = tuple(next(it) if isinstance(x, torch.Tensor) and x.requires_grad else x for x in args)
        k = {key: next(it) if isinstance(x, torch.Tensor) and x.requires_grad else x for key, x in kwargs.items()}
        return float_outputs(fn(*a, **k))[0]

    assert torch.autograd.gradcheck(call, tuple(t.detach().requires_grad_() for t in leaves))
