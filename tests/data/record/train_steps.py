"""Two training steps as users write them (issue 37), recorded by ``precheck.record`` into the clip_fp32_tensor
and scaler_fp16_tensor dumps beside this file (make_fixtures.py), which tests/test_train_steps.py grades.

- ``clip``: an fp32 MLP step that clips its gradients: ``clip_grad_norm_`` (foreach by default on the CPU) calls
  ``torch._foreach_norm`` on the list of gradients, recorded as ``Torch._foreach_norm`` with one output per
  gradient.
- ``scaler``: the same MLP under CPU autocast fp16 with a ``torch.amp.GradScaler`` at its default scale 65536,
  whose first step overflows by design: the scaled gradients pass fp16's range in the backward of ``h * 8``
  (``Tensor.__mul__``), the calls after it carry inf and nan, ``unscale_`` and ``clip_grad_norm_`` see them, and
  the scaler skips the optimizer's step and halves its scale. Its fp16 calls with fp32 weights (autocast's
  ``linear``) are replayed in their recorded dtypes.

Pure torch, tiny tensors, every draw seeded.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)) * 8.0)


def _setup() -> tuple[Mlp, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return Mlp(), torch.randn(4, 6), torch.randn(4, 3)


def clip() -> None:
    """One fp32 step, its gradients clipped to norm 1 before the optimizer's step."""
    model, x, y = _setup()
    F.mse_loss(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)


def scaler() -> torch.amp.GradScaler:
    """One autocast fp16 step with a GradScaler, whose gradients overflow: its optimizer's step is skipped."""
    model, x, y = _setup()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    grad_scaler = torch.amp.GradScaler("cpu")
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(x)
    loss = F.mse_loss(out.float(), y)
    grad_scaler.scale(loss).backward()
    grad_scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    grad_scaler.step(optimizer)
    grad_scaler.update()
    return grad_scaler


STEPS = {"clip_fp32_tensor": clip, "scaler_fp16_tensor": scaler}
