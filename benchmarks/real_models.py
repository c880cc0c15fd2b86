"""Real architectures at real input sizes, for bench_real.py: torchvision CNNs and ViT randomly initialised, Hugging
Face models built from their configs (nothing is downloaded). Each function takes a dtype and returns (model, run)
for make_dump.py's MODEL argument (``real_models:resnet50``).

torchvision's wheel on the package index is a CUDA build. Under these machines' CPU torch, ``import torchvision``
fails on its C ops ("operator torchvision::nms does not exist"); the model classes import when
``torch.library.register_fake`` is a no-op decorator during that import. That is done here, in the recording
script only, never in precheck.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _torchvision_models():
    real = torch.library.register_fake
    torch.library.register_fake = lambda *a, **k: lambda f: f
    try:
        import torchvision.models as models
    finally:
        torch.library.register_fake = real
    return models


def _image_step(model, dt, batch: int, size: int = 224, classes: int = 1000):
    model = model.to(dt)
    model.train()
    x = torch.randn(batch, 3, size, size, dtype=dt)
    y = torch.randint(0, classes, (batch,))
    return model, lambda: F.cross_entropy(model(x), y)


def resnet50(dt):
    """ResNet-50 at batch 32, 224x224: 53 convolutions, batch norms and in-place ReLUs at full size."""
    return _image_step(_torchvision_models().resnet50(), dt, batch=32)


def resnet18(dt):
    """ResNet-18 at batch 4, 112x112: bench_record.py's CNN, small enough that a tensor dump of its step stays
    under a few hundred MB."""
    return _image_step(_torchvision_models().resnet18(), dt, batch=4, size=112)


def mobilenet_v3(dt):
    """MobileNetV3-Large at batch 8: in-place hardswish and ReLU, squeeze-excitation, dropout."""
    return _image_step(_torchvision_models().mobilenet_v3_large(), dt, batch=8)


def vit(dt):
    """ViT-B/16 at batch 2, 224x224: 12 encoder blocks of multi-head attention, GELU MLPs and layer norms."""
    return _image_step(_torchvision_models().vit_b_16(), dt, batch=2)


def t5(dt):
    """T5-small's configuration (6+6 layers, d_model 512): an encoder-decoder with relative position bias."""
    _torchvision_models()  # transformers imports torchvision when it is installed
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=32128, d_model=512, d_ff=2048, num_layers=6, num_heads=8)
    config.pad_token_id = config.decoder_start_token_id = 0  # T5's own (transformers 5 sets neither by default)
    model = T5ForConditionalGeneration(config)
    model = model.to(dt)
    model.train()
    ids = torch.randint(0, 32128, (2, 64))
    labels = torch.randint(0, 32128, (2, 32))
    return model, lambda: model(input_ids=ids, labels=labels).loss


def qwen2(dt):
    """Qwen2-0.5B's layer shape (hidden 896, 14 query heads over 2 key-value heads, SiLU MLP of 4864), two layers
    and its full 151,936-token vocabulary, at batch 2 x 128 tokens: grouped-query attention, RMSNorm, rotary."""
    _torchvision_models()  # transformers imports torchvision when it is installed
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=2,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config).to(dt)
    model.train()
    ids = torch.randint(0, 151936, (2, 128))
    return model, lambda: model(input_ids=ids, labels=ids).loss
