"""Record a small MindSpore training step (mint APIs, PyNative, CPU) with msprobe, for `precheck run_ut` on
MindSpore dumps: one step in fp32, fp16 or bf16, task tensor or statistics.

The step calls the mint functions and Tensor methods whose MindSpore signatures differ from PyTorch's
(``Tensor.transpose`` with every axis is a permute, ``Tensor.mean(axis, keep_dims)``, ``Tensor.sum(axis,
keepdims)``, ``astype`` recorded as ``Tensor.to``). On the CPU, MindSpore 2.10 has no bf16 kernel but for add,
sub, mul, div and transpose, so the bf16 step is mixed precision: bf16 in the middle, fp32 around it.

Bundled in tests/data/mindspore.

usage (MindSpore's venv: mindspore 2.10, mindstudio-probe 26.2, numpy<2, pandas<3, ml_dtypes<0.6):
    .venv/bin/python tests/data/recipes/msprobe_venv.py --mindspore -- \\
        benchmarks/ms_run_ut_record.py fp32 tensor OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np


def config(out: str, task: str) -> str:
    cfg = {"task": task, "dump_path": out, "rank": [], "step": [0], "level": "L1", "framework": "mindspore",
           task: {"scope": [], "list": [], "data_mode": ["all"]}}  # fmt: skip
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "msprobe_config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def weights() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    shapes = [(4, 16), (32, 16), (32,), (8, 32), (8,)]
    return [rng.standard_normal(s).astype(np.float32) * (0.5 if len(s) > 1 else 0.1) for s in shapes]


def step(dtype: str, task: str, out: str) -> None:
    import mindspore as ms
    import msprobe_ms_cpu
    from mindspore import mint
    from mindspore.mint.nn import functional as F

    msprobe_ms_cpu.patch_dump()
    from msprobe.mindspore import PrecisionDebugger

    ms.set_context(mode=ms.PYNATIVE_MODE, pynative_synchronize=True)
    low = {"fp32": ms.float32, "fp16": ms.float16, "bf16": ms.bfloat16}[dtype]
    wide = ms.float32 if dtype == "bf16" else low  # the bf16 step computes all but the middle in fp32
    x, w1, b1, w2, b2 = (ms.Parameter(ms.Tensor(a).astype(wide), name=f"p{i}") for i, a in enumerate(weights()))
    ramp = ms.Tensor(np.arange(8, dtype=np.float32)).astype(wide)

    def middle(h):  # bf16 kernels exist for these on the CPU
        h = h.astype(low)
        h3 = h.reshape(4, 4, 8).transpose(0, 2, 1)  # MindSpore's transpose with every axis: a permute
        h3 = h3.transpose(1, 2)  # with two axes of three: two dims swapped, as torch's
        h = mint.transpose(h3, 0, 1).reshape(4, 32)  # mint's: as torch's
        h = mint.cat([h * 0.5, h / 2.0], dim=0) - mint.cat([h, -h], dim=0) * 0.25
        return h.astype(wide)

    def loss(x, w1, b1, w2, b2):
        h = F.linear(x, w1, b1)
        h = middle(F.silu(h) * mint.sigmoid(h))
        h = h + mint.tanh(h)
        h = h - h.mean(axis=1, keep_dims=True)
        h = h / (h.std(axis=1, keepdims=True) + 1.0) + h.max(axis=1, keepdims=True)  # numpy's std: ddof 0
        h = mint.squeeze(h.expand_dims(0), 0)
        h = h * mint.rsqrt(mint.mean(h * h, dim=-1, keepdim=True) + 1e-5)
        y = F.linear(h, w2, b2)
        p = mint.softmax(y, dim=-1)
        s = mint.sum(p * ramp) + mint.exp(mint.clamp(y, -1.0, 1.0)).sum(axis=1, keepdims=True).mean()
        return s + mint.sqrt(mint.abs(mint.matmul(y, y.transpose(1, 0))) + 1.0).mean()

    debugger = PrecisionDebugger(config_path=config(out, task))
    debugger.start()
    ms.value_and_grad(loss, grad_position=(0, 1, 2, 3, 4))(x, w1, b1, w2, b2)
    debugger.stop()
    debugger.step()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dtype", choices=["fp32", "fp16", "bf16"])
    parser.add_argument("task", choices=["tensor", "statistics"])
    parser.add_argument("out_dir")
    return parser


if __name__ == "__main__":
    args = build_parser().parse_args()
    step(args.dtype, args.task, args.out_dir)
