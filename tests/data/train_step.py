"""A small training program that knows nothing of precheck, for ``precheck record -- python train_step.py N``:
make_dump.py's MLP trained N steps with SGD. No main guard, on purpose: precheck's workers must not run it
again."""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.ln, self.l2 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.softmax(F.gelu(self.ln(self.l1(x))), dim=-1)).sum()


def step(model: nn.Module, x: torch.Tensor) -> None:
    model(x).backward()


torch.manual_seed(0)
model, x = Net(), torch.randn(4, 16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
    optimizer.zero_grad()
    step(model, x)
    optimizer.step()
