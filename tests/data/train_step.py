"""A small training program that knows nothing of precheck, for ``precheck record -- python train_step.py N``:
make_dump.py's MLP trained N steps with SGD. No main guard, on purpose: precheck's workers must not run it
again."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from model_dumps import mlp  # noqa: E402 - the model, from the one table of bundled models

torch.manual_seed(0)
model, loss = mlp(torch.float32)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
    optimizer.zero_grad()
    loss().backward()
    optimizer.step()
