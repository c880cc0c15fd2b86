"""Record the trigger dump of the report's "random op breaks its law" advice: a small step whose dropout forgets to
rescale the values it keeps by 1/(1-p), so its outputs break dropout's law (every output is 0 or x/(1-p)).

The patch is installed before msprobe is imported: msprobe wraps torch.nn.functional when it loads, and records
what the function it wrapped computes. Run it in a throwaway venv (pip install torch==2.13.0 mindstudio-probe):
    .venv/bin/python tests/data/recipes/msprobe_venv.py -- benchmarks/advice_dropout_record.py OUT_DIR
tests/data/advice/dropout_unscaled holds its output.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

_dropout = F.dropout


def unscaled_dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002  (torch's own parameter name)
    out = _dropout(input, p, training, inplace)
    return out * (1 - p) if training and p > 0 else out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="msprobe's dump_path")
    return parser


def main() -> None:
    out = build_parser().parse_args().out
    F.dropout = unscaled_dropout
    from msprobe.pytorch import PrecisionDebugger

    torch.manual_seed(0)
    cfg = {"task": "tensor", "dump_path": out, "rank": [], "step": [0], "level": "L1",
           "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}  # fmt: skip
    with open(out + ".json", "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    l1, l2 = torch.nn.Linear(32, 128), torch.nn.Linear(128, 8)
    x = torch.randn(16, 32)
    debugger = PrecisionDebugger(config_path=out + ".json")
    debugger.start(torch.nn.Sequential(l1, l2))
    l2(F.dropout(torch.relu(l1(x)), p=0.3, training=True)).sum().backward()
    debugger.stop()
    debugger.step()


if __name__ == "__main__":
    main()
