"""One training step that walks into every trap of msprobe's L1 dump (issue 31): the
step of tests/test_record.py, recorded by msprobe 26.2 into the edge_* dumps beside this file (make_fixtures.py)
and by ``precheck.record`` in the test, which wants the two dumps equal.

Pure torch (CI has no transformers), small tensors (the tensor dump stays small), every random draw seeded in
``build``. Each line says which part of the format it reaches.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Edge(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 4) / 2)
        self.b = nn.Parameter(torch.randn(3) / 2)
        self.ln = nn.Parameter(torch.ones(4) + torch.randn(4) / 10)

    def forward(self, x: torch.Tensor, x3: torch.Tensor) -> torch.Tensor:
        h = F.linear(x, self.w, self.b)  # 2-D: AddmmBackward0's three gradients
        a = h + 1.0  # Tensor.__add__ with a float
        r = 0 * h  # Tensor.__rmul__: self first, then the int
        e = h * 2
        e += 1  # Tensor.__iadd__
        h > 0  # noqa: B015 - Tensor.__gt__: a bool output, no backward
        z = h * 0
        z.add_(1)  # in place: its input file holds the zeros from before the call
        g = h * 1.0
        g[0] = 0.0  # Tensor.__setitem__: output [null], never a backward record
        g[..., 0:2] = 1.0  # an Ellipsis and a slice in the index
        g[1, ::2] = 2.0  # a slice with a step
        d1 = F.dropout(h, 0.5)  # random, training: a backward record
        d0 = F.dropout(h, 0.0)  # p = 0: no backward record
        d2 = F.dropout(h, p=0.3, training=False)  # eval with p > 0: a backward record all the same
        h.view(3, 2).reshape(2, 3).to(torch.float32)  # low risk: written only at risk level ALL
        torch.split(torch.cat([a, r], dim=0), 2)  # low risk (cat, split), and the Tensor.split inside split is hidden
        F.softmax(e, dim=-1, dtype=torch.float32)  # a dtype keyword; hides Tensor.softmax
        torch.softmax(h, -1, torch.float64)  # a positional dtype: {}
        torch.sum(g, dim=1, dtype=torch.float64)  # float64 output: no Mean, no Norm
        top = torch.max(e, 0)  # a structseq: values and indices, one gradient back
        y3 = F.linear(x3, self.w, self.b)  # 3-D input: the backward of its ViewBackward0 node
        nx = F.layer_norm(x3, (4,), weight=self.ln, eps=1e-5)  # keyword tensor and float
        nx @ x.t()  # Tensor.__matmul__
        torch.einsum("ij,kj->ik", [x, self.w])  # a str and a list of tensors
        torch.broadcast_to(self.b, torch.Size([2, 3]))  # a torch.Size
        torch.tanh(x.to(torch.bfloat16))  # a cast (low risk); bf16 statistics
        torch.add(torch.arange(6), 2)  # int tensors: Max and Min only
        gen = torch.Generator().manual_seed(7)
        torch.bernoulli(torch.full((2, 3), 0.5), generator=gen)  # a Generator: null
        torch.exp(torch.empty(0, 3))  # empty: null statistics, no file
        torch.mul(torch.tensor(3), 2)  # 0-d int: its value four times
        torch.log(torch.tensor([0.0, -1.0, 2.0]))  # -inf and NaN
        with torch.no_grad():
            torch.exp(h)  # no backward record
        # only what needs a backward record reaches the loss, through low-risk calls: the tensor dump stays small
        return torch.cat([t.flatten() for t in (d1, d2, d0, z, e, g, top.values, y3, nx)]).sum()


def build(dtype: torch.dtype) -> tuple[nn.Module, object]:
    """The model and its step, as make_dump.py takes them (``edge_model:build``)."""
    torch.manual_seed(0)
    model = Edge().to(dtype)
    x = torch.randn(2, 4, dtype=dtype)
    x3 = torch.randn(2, 5, 4, dtype=dtype)

    def run() -> torch.Tensor:
        torch.manual_seed(1)  # the dropout masks
        return model(x, x3)

    return model, run
