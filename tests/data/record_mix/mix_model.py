"""A training step through the traps of msprobe's mix level, recorded by msprobe (make_fixtures.py) and by
precheck.record (tests/test_record_mix.py): nested modules named by their path (blocks.0.fc), a module called
twice (shared: forward.0 and forward.1, one parameters_grad record per backward), keyword arguments (scale=),
a module whose input needs no gradient (embed: its backward record's output is []), a frozen weight (in
``parameters``, not in ``parameters_grad``), a parameterless module (Dropout), a tuple output (GRU), a container
never called itself (ModuleList: no record), and low-risk calls inside modules (view: construct.json only)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.norm, self.drop = nn.Linear(8, 8), nn.LayerNorm(8), nn.Dropout(0.25)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        h = self.drop(F.gelu(self.fc(x))).view(x.shape) * scale
        return self.norm(x + h)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.frozen = nn.Linear(4, 8), nn.Linear(8, 8)
        self.frozen.weight.requires_grad_(False)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.shared = nn.Linear(8, 8)
        self.rnn = nn.GRU(8, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.frozen(self.embed(x))
        for block in self.blocks:
            h = block(h, scale=0.5)
        out, _ = self.rnn(self.shared(self.shared(h)))
        return self.head(out[:, -1]).logsumexp(-1).mean()


def build(dtype: torch.dtype) -> tuple[nn.Module, object]:
    """The model and its step, as make_dump.py takes them (``mix_model:build``)."""
    torch.manual_seed(0)
    model = Net().to(dtype)
    model.train()
    x = torch.randn(2, 3, 4, dtype=dtype)
    return model, lambda: model(x)
