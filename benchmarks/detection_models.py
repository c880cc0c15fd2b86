"""Small models of the detection corpus, written with torch.nn.functional calls so that a patched API is the one
msprobe wraps and records. Each builder takes a dtype and returns ``run(scale)``, a training step's loss times
``scale`` (loss scaling); parameters are drawn in float32 under a fixed seed and then cast, so the same model in
fp32, bf16 and fp16 has the same weights up to rounding.

Two transformers and two CNNs, one of each for the ``dev`` bugs and for the ``holdout`` bugs, so that the held-out
bugs sit in other models and other ops than the ones a grader was developed against; and a third pair (a token
mixer and a U-Net) for ``holdout2``, written after the grader was final, with ops neither other split uses.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

Run = Callable[[float], torch.Tensor]


def _params(dt: torch.dtype, **shapes: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """Weights drawn in float32 with a 1/sqrt(fan_in) scale (norm weights around 1, biases small), then cast."""
    out = {}
    for name, shape in shapes.items():
        if name.endswith("_g"):
            w = 1 + 0.1 * torch.randn(shape)
        elif name.endswith("_b"):
            w = 0.1 * torch.randn(shape)
        else:
            w = torch.randn(shape) / math.sqrt(shape[-1] if len(shape) == 2 else math.prod(shape[1:]))
        out[name] = w.to(dt).requires_grad_()
    return out


def gpt(dt: torch.dtype) -> Run:
    """dev: a one-layer pre-LN decoder with explicit attention (matmul, causal masked_fill, softmax), a GELU MLP,
    a final layer norm, an LM head and cross entropy that ignores padding labels (-100)."""
    V, S, D, H, B = 48, 16, 32, 2, 2
    p = _params(
        dt, emb=(V, D), pos=(S, D), ln1_g=(D,), ln1_b=(D,), qkv=(3 * D, D), qkv_b=(3 * D,), proj=(D, D),
        ln2_g=(D,), ln2_b=(D,), fc1=(4 * D, D), fc1_b=(4 * D,), fc2=(D, 4 * D), lnf_g=(D,), lnf_b=(D,), head=(V, D),
    )  # fmt: skip
    ids = torch.randint(0, V, (B, S))
    labels = ids.roll(-1, 1)
    labels[:, -2:] = -100  # padding at the end of every sequence
    causal = torch.ones(S, S, dtype=torch.bool).triu(1)

    def run(scale: float) -> torch.Tensor:
        h = F.embedding(ids, p["emb"]) + p["pos"]
        x = F.layer_norm(h, (D,), p["ln1_g"], p["ln1_b"], 1e-5)
        q, k, v = F.linear(x, p["qkv"], p["qkv_b"]).view(B, S, 3, H, D // H).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D // H)
        att = F.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        h = h + F.linear(torch.matmul(att, v).transpose(1, 2).reshape(B, S, D), p["proj"])
        x = F.layer_norm(h, (D,), p["ln2_g"], p["ln2_b"], 1e-5)
        h = h + F.linear(F.gelu(F.linear(x, p["fc1"], p["fc1_b"])), p["fc2"])
        logits = F.linear(F.layer_norm(h, (D,), p["lnf_g"], p["lnf_b"], 1e-5), p["head"])
        return F.cross_entropy(logits.view(B * S, V), labels.view(-1), ignore_index=-100) * scale

    return run


def cnn(dt: torch.dtype) -> Run:
    """dev: conv (3->12, 16x16, 12,288 outputs), batch norm, ReLU, max pooling, a second conv, adaptive average
    pooling, and a cosine classifier with a CLIP-style logit scale of 30 (normalize, linear) under cross entropy."""
    p = _params(dt, c1=(12, 3, 3, 3), c1_b=(12,), bn_g=(12,), bn_b=(12,), c2=(16, 12, 3, 3), c2_b=(16,), fc=(10, 16))
    x = torch.randn(4, 3, 16, 16).to(dt)
    y = torch.randint(0, 10, (4,))
    mean, var = torch.zeros(12, dtype=dt), torch.ones(12, dtype=dt)

    def run(scale: float) -> torch.Tensor:
        h = F.conv2d(x, p["c1"], p["c1_b"], padding=1)
        h = F.max_pool2d(F.relu(F.batch_norm(h, mean, var, p["bn_g"], p["bn_b"], training=True)), 2)
        h = F.relu(F.conv2d(h, p["c2"], p["c2_b"], padding=1))
        h = F.adaptive_avg_pool2d(h, 1).flatten(1)
        logits = F.linear(F.normalize(h), F.normalize(p["fc"])) * 30
        return F.cross_entropy(logits, y) * scale

    return run


def encoder(dt: torch.dtype) -> Run:
    """holdout: a one-layer post-LN encoder over padded sequences (SDPA with a key-padding mask, separate q/k/v
    projections, tanh-GELU MLP, 10,240-element hidden layer), masked-token prediction through log_softmax and
    nll_loss."""
    V, S, D, H, B, F4 = 40, 16, 32, 4, 2, 320
    p = _params(
        dt, emb=(V, D), pos=(S, D), q=(D, D), k=(D, D), v=(D, D), o=(D, D), ln1_g=(D,), ln1_b=(D,),
        fc1=(F4, D), fc1_b=(F4,), fc2=(D, F4), ln2_g=(D,), ln2_b=(D,), head=(V, D), head_b=(V,),
    )  # fmt: skip
    ids = torch.randint(1, V, (B, S))
    ids[0, 11:] = 0  # padding (id 0) at the end of the first sequence
    ids[1, 14:] = 0
    keep = (ids != 0).view(B, 1, 1, S)
    labels = torch.where(ids != 0, torch.randint(1, V, (B, S)), -100)

    def run(scale: float) -> torch.Tensor:
        h = F.embedding(ids, p["emb"], padding_idx=0) + p["pos"]

        def heads(w: torch.Tensor) -> torch.Tensor:
            return F.linear(h, w).view(B, S, H, D // H).transpose(1, 2)

        att = F.scaled_dot_product_attention(heads(p["q"]), heads(p["k"]), heads(p["v"]), attn_mask=keep)
        h = F.layer_norm(h + F.linear(att.transpose(1, 2).reshape(B, S, D), p["o"]), (D,), p["ln1_g"], p["ln1_b"])
        m = F.linear(F.gelu(F.linear(h, p["fc1"], p["fc1_b"]), approximate="tanh"), p["fc2"])
        h = F.layer_norm(h + m, (D,), p["ln2_g"], p["ln2_b"])
        logp = F.log_softmax(F.linear(h, p["head"], p["head_b"]), dim=-1)
        return F.nll_loss(logp.view(B * S, V), labels.view(-1), ignore_index=-100) * scale

    return run


def resnet(dt: torch.dtype) -> Run:
    """holdout: a small residual CNN on raw 0..255 pixels (conv, group norm, SiLU, a 1x1 shortcut, average
    pooling, mean over space, a classifier with bias, log_softmax and nll_loss)."""
    p = _params(
        dt, c1=(8, 3, 3, 3), g1_g=(8,), g1_b=(8,), c2=(8, 8, 3, 3), g2_g=(8,), g2_b=(8,), sc=(8, 8, 1, 1),
        fc=(6, 8), fc_b=(6,),
    )  # fmt: skip
    x = torch.randint(0, 256, (2, 3, 20, 20)).to(dt)
    y = torch.randint(0, 6, (2,))

    def run(scale: float) -> torch.Tensor:
        h = F.silu(F.group_norm(F.conv2d(x, p["c1"], padding=1), 4, p["g1_g"], p["g1_b"]))
        r = F.group_norm(F.conv2d(h, p["c2"], padding=1), 4, p["g2_g"], p["g2_b"])
        h = F.avg_pool2d(F.silu(r + F.conv2d(h, p["sc"])), 2)
        logits = F.linear(h.mean((2, 3)), p["fc"], p["fc_b"])
        return F.nll_loss(F.log_softmax(logits, dim=1), y) * scale

    return run


def mixer(dt: torch.dtype) -> Run:
    """holdout2: a one-layer token mixer with RMS norms (written out: msprobe wraps neither F.rms_norm nor, as it
    computes its own statistics with torch.norm, can a patched torch.norm be recorded cleanly),
    torch.bmm with a learned 16x16 token-mixing matrix, a SwiGLU MLP (silu gate times an up projection) and an LM
    head under cross entropy."""
    V, S, D, B, F2 = 40, 16, 32, 2, 64
    p = _params(
        dt, emb=(V, D), n1_g=(D,), tok=(S, S), n2_g=(D,), gate=(F2, D), up=(F2, D), down=(D, F2), nf_g=(D,),
        head=(V, D),
    )  # fmt: skip
    ids = torch.randint(0, V, (B, S))
    labels = ids.roll(-1, 1)

    def rms(h: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return h * torch.rsqrt(h.square().sum(-1, keepdim=True) / D + 1e-6) * g

    def run(scale: float) -> torch.Tensor:
        h = F.embedding(ids, p["emb"])
        h = h + torch.bmm(p["tok"].expand(B, S, S), rms(h, p["n1_g"]))
        x = rms(h, p["n2_g"])
        h = h + F.linear(F.silu(F.linear(x, p["gate"])) * F.linear(x, p["up"]), p["down"])
        logits = F.linear(rms(h, p["nf_g"]), p["head"])
        return F.cross_entropy(logits.view(B * S, V), labels.view(-1)) * scale

    return run


def unet(dt: torch.dtype) -> Run:
    """holdout2: a two-level U-Net for segmentation (conv, instance norm, leaky ReLU, a strided conv down, a
    transposed conv and a bilinear upsampling up, a skip connection) under binary cross entropy with logits plus
    the mean squared error of the sigmoid."""
    p = _params(
        dt, c1=(8, 3, 3, 3), n_g=(8,), n_b=(8,), down=(16, 8, 3, 3), up=(16, 8, 2, 2), c3=(1, 8, 3, 3), c3_b=(1,),
    )  # fmt: skip
    x = torch.randn(2, 3, 16, 16).to(dt)
    target = (torch.rand(2, 1, 16, 16) > 0.5).to(dt)

    def run(scale: float) -> torch.Tensor:
        h = F.leaky_relu(F.instance_norm(F.conv2d(x, p["c1"], padding=1), weight=p["n_g"], bias=p["n_b"]))
        d = F.leaky_relu(F.conv2d(h, p["down"], stride=2, padding=1))
        u = F.conv_transpose2d(d, p["up"], stride=2)
        u = u + F.interpolate(d[:, :8], scale_factor=2.0, mode="bilinear", align_corners=False)
        out = F.conv2d(u + h, p["c3"], p["c3_b"], padding=1)
        loss = F.binary_cross_entropy_with_logits(out, target) + F.mse_loss(torch.sigmoid(out), target)
        return loss * scale

    return run


MODELS: dict[str, Callable[[torch.dtype], Run]] = {
    "gpt": gpt, "cnn": cnn, "encoder": encoder, "resnet": resnet, "mixer": mixer, "unet": unet,
}  # fmt: skip
