"""Record a real msprobe L1 dump (forward + backward) of a small model, for tests and benchmarks.

Run it in msprobe's throwaway venv, which tests/data/recipes/msprobe_venv.py makes (torch as the project's, and
mindstudio-probe), from the repository root:
    python tests/data/recipes/msprobe_venv.py --pip transformers -- tests/data/recipes/make_dump.py gpt2 bf16 tensor OUT
usage: make_dump.py [--risk-level ALL] MODEL DTYPE TASK OUT_DIR
  MODEL: mlp | gpt2 | module:function (your own function returning (model, run) where run() gives a loss; the
         module on PYTHONPATH: msprobe_venv.py puts benchmarks/ and tests/data/ there)
  DTYPE: fp32 | bf16 | fp16     TASK: tensor (saves .pt data) | statistics (Max/Min/Mean/Norm only)
  --risk-level ALL: msprobe's default, FOCUS, drops its "LOW"-risk APIs (cat, stack, clamp, reshape, view, to, ...);
         the opinfo, model and composite fixtures were recorded with ALL.
The dump lands in OUT_DIR/step0/proc<pid>/ and its config in OUT_DIR.json.
"""

import argparse
import importlib
import json

import torch
from msprobe.pytorch import PrecisionDebugger

parser = argparse.ArgumentParser(prog="make_dump.py", description=__doc__.split("\n")[0])
parser.add_argument("--risk-level", choices=["FOCUS", "ALL"], default=None, help="msprobe's risk_level (its default)")
parser.add_argument("model")
parser.add_argument("dtype", choices=["fp32", "bf16", "fp16"])
parser.add_argument("task", choices=["tensor", "statistics"])
parser.add_argument("out")
args = parser.parse_args()
dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
torch.manual_seed(0)
cfg = {"task": args.task, "dump_path": args.out, "rank": [], "step": [0], "level": "L1"}
if args.risk_level:
    cfg["risk_level"] = args.risk_level
cfg[args.task] = {"scope": [], "list": [], "data_mode": ["all"]}
with open(args.out + ".json", "w") as f:
    json.dump(cfg, f)

if args.model == "mlp":
    import torch.nn as nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1, self.ln, self.l2 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.l2(torch.softmax(F.gelu(self.ln(self.l1(x))), dim=-1)).sum()

    model = Net().to(dt)
    x = torch.randn(4, 16, dtype=dt)
    run = lambda: model(x)  # noqa: E731
elif args.model == "gpt2":
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=64)).to(dt)
    ids = torch.randint(0, 500, (2, 16))
    run = lambda: model(input_ids=ids, labels=ids).loss  # noqa: E731
else:
    module, func = args.model.split(":")
    model, run = getattr(importlib.import_module(module), func)(dt)

debugger = PrecisionDebugger(config_path=args.out + ".json")
debugger.start(model)
run().backward()
debugger.stop()
debugger.step()
print("dump written under", args.out)
