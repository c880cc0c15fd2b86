"""A program that builds its model (initialised weights, a RoPE-like table computed before any parameter) and
trains it, knowing nothing of precheck: ``precheck record``'s step 0 is its first iteration, not the build."""

import sys

import torch
import torch.nn as nn


class Rotary(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        angles = torch.outer(torch.arange(6.0), 1.0 / (10000 ** (torch.arange(0, 8, 2) / 8.0)))
        self.register_buffer("cos", torch.cos(angles))


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rotary = Rotary()
        self.proj = nn.Linear(4, 4)
        self.out = nn.Linear(4, 1)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            module.bias.data.fill_(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.proj(x) * self.rotary.cos.sum())).mean()


def build() -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor]:
    torch.manual_seed(0)
    model = Model()
    return model, torch.optim.SGD(model.parameters(), lr=0.1), torch.randn(6, 4)


if __name__ == "__main__":
    model, optimizer, x = build()
    for _ in range(int(sys.argv[1])):
        optimizer.zero_grad()
        model(x).backward()
        optimizer.step()
