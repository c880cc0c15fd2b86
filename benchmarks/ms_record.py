"""Record the same small training step in MindSpore (mint APIs, CPU) and in PyTorch, with identical weights and
inputs, for `precheck compare`'s cross-framework test: linear, relu, linear, softmax, sum.

usage (MindSpore side, in its venv: mindspore 2.10, mindstudio-probe 26.2, numpy<2; "mindspore_bug" patches a
wrong ReLU in):
    .venv/bin/python tests/data/recipes/msprobe_venv.py --mindspore -- benchmarks/ms_record.py mindspore[_bug] OUT_DIR
usage (PyTorch side, msprobe's venv):  .venv/bin/python tests/data/recipes/msprobe_venv.py -- \\
    benchmarks/ms_record.py pytorch OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np


def weights() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = [(4, 16), (32, 16), (32,), (8, 32), (8,)]
    return [rng.standard_normal(s).astype(np.float32) * (0.25 if len(s) > 1 else 0.1) for s in shapes]


def config(out: str, framework: str) -> str:
    cfg = {"task": "tensor", "dump_path": out, "rank": [], "step": [0], "level": "L1", "framework": framework,
           "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}  # fmt: skip
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "msprobe_config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def mindspore_step(out: str, bug: bool) -> None:
    import mindspore as ms
    import msprobe_ms_cpu
    from mindspore import mint

    if bug:  # a leaky ReLU kernel where a ReLU was asked for, patched in before msprobe wraps mint's relu
        relu = mint.nn.functional.relu
        mint.nn.functional.relu = lambda x: relu(x) + 0.05 * x
    msprobe_ms_cpu.patch_dump()
    from msprobe.mindspore import PrecisionDebugger

    ms.set_context(mode=ms.PYNATIVE_MODE, pynative_synchronize=True)
    x, w1, b1, w2, b2 = (ms.Tensor(a) for a in weights())
    params = [ms.Parameter(w1, name="w1"), ms.Parameter(b1, name="b1"), ms.Parameter(w2, name="w2"),
              ms.Parameter(b2, name="b2")]  # fmt: skip

    def loss(w1, b1, w2, b2):
        h = mint.nn.functional.relu(mint.nn.functional.linear(x, w1, b1))
        ramp = ms.Tensor(np.arange(8, dtype=np.float32))
        return mint.sum(mint.softmax(mint.nn.functional.linear(h, w2, b2), dim=-1) * ramp)

    debugger = PrecisionDebugger(config_path=config(out, "mindspore"))
    debugger.start()
    ms.value_and_grad(loss, grad_position=(0, 1, 2, 3))(*params)
    debugger.stop()
    debugger.step()


def pytorch_step(out: str) -> None:
    import torch
    import torch.nn.functional as F
    from msprobe.pytorch import PrecisionDebugger

    x, w1, b1, w2, b2 = (torch.tensor(a) for a in weights())
    for p in (w1, b1, w2, b2):
        p.requires_grad_(True)
    debugger = PrecisionDebugger(config_path=config(out, "pytorch"))
    debugger.start()
    h = F.relu(F.linear(x, w1, b1))
    ramp = torch.tensor(np.arange(8, dtype=np.float32))
    loss = torch.sum(torch.softmax(F.linear(h, w2, b2), dim=-1) * ramp)
    loss.backward()
    debugger.stop()
    debugger.step()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("side", choices=["mindspore", "mindspore_bug", "pytorch"])
    parser.add_argument("out_dir")
    return parser


if __name__ == "__main__":
    args = build_parser().parse_args()
    if args.side.startswith("mindspore"):
        mindspore_step(args.out_dir, args.side.endswith("_bug"))
    else:
        pytorch_step(args.out_dir)
