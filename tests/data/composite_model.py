"""The model of the composite_* dumps: the calls whose recorded gradients are not their input gradients.

msprobe's backward hook records the gradients at the inputs of the autograd node that made a call's output, so a
composite call's record holds an internal node's gradients: cross_entropy's at its log_softmax output, linear's on
3-D input the flattened grad_output (here (8, 6), the shape of l2's weight transposed), a 2-D linear without bias
its input's and its weight's transposed gradient (both (6, 6)), matmul's on 3-D and 4-D inputs a flattened view.
The loss is scaled by 1024 as mixed-precision training does. Recorded with msprobe 26.2 and torch 2.13:

    .venv/bin/python tests/data/recipes/msprobe_venv.py -- tests/data/recipes/make_dump.py --risk-level ALL \
        composite_model:build fp32 tensor OUT
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Composite(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.l1 = nn.Linear(9, 8)
        self.ln = nn.LayerNorm(8)
        self.l2 = nn.Linear(8, 6)
        self.w = nn.Parameter(torch.randn(6, 6) / 3)
        self.square = nn.Linear(6, 6, bias=False)
        self.head = nn.Linear(6, 5)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2).flatten(2)  # (2, 4, 9): batch 2, sequence 4
        h = self.l2(self.ln(self.l1(h)))  # (2, 4, 6)
        h = torch.matmul(h, self.w)  # 3-D @ 2-D
        q = h.view(2, 4, 2, 3).transpose(1, 2)  # (2, 2, 4, 3)
        scores = torch.softmax(torch.matmul(q, q.transpose(-1, -2)) / 3**0.5, dim=-1)  # 4-D @ 4-D
        o = F.scaled_dot_product_attention(q, q, q, is_causal=True) + torch.matmul(scores, q)
        o = o.transpose(1, 2).reshape(8, 6)
        side = self.square(o[:6]).pow(2).mean()  # 2-D, no bias: both gradients (6, 6)
        return (F.cross_entropy(self.head(o), y) + 0.01 * side) * 1024


def build(dtype: torch.dtype) -> tuple[nn.Module, object]:
    torch.manual_seed(0)
    model = Composite().to(dtype)
    x = torch.randn(2, 3, 6, 6, dtype=dtype)
    y = torch.randint(0, 5, (8,))
    return model, lambda: model(x, y)
