"""A training step whose functions are scripted at import, as torch.distributed.optim's are: every function torch
defines with ``@overload`` (torch.norm, torch.tensordot, F.interpolate and its upsample aliases) and torch's
builtins, dispatched and Python functions. ``python scripted_step.py OUT``: writes each scripted function's
TorchScript code and the step's numbers to OUT and exits 3, under ``precheck record`` as without it."""

import sys

import torch
import torch.nn.functional as F


@torch.jit.script
def norms(x: torch.Tensor) -> torch.Tensor:
    return torch.norm(x) + torch.norm(x, 1.0, 1).sum() + torch.norm(x, dim=[0, 1], keepdim=True).sum()


@torch.jit.script
def tensordots(x: torch.Tensor) -> torch.Tensor:
    return torch.tensordot(x, x, 1).sum() + torch.tensordot(x, x, dims=([1], [0])).sum()


@torch.jit.script
def resized(x: torch.Tensor) -> torch.Tensor:
    image = x.reshape(1, 1, 4, 4)
    return (F.interpolate(image, scale_factor=2.0).sum() + F.interpolate(image, size=[3, 3]).sum()
            + F.upsample(image, scale_factor=2.0).sum() + F.upsample_nearest(image, scale_factor=2.0).sum()
            + F.upsample_bilinear(image, scale_factor=2.0).sum())  # fmt: skip


@torch.jit.script
def others(x: torch.Tensor) -> torch.Tensor:
    pooled = F.max_pool1d(x.unsqueeze(0), 2).sum()  # a dispatched function
    return F.relu(torch.add(F.linear(x, x), 1)) * pooled + F.gelu(x)  # a Python function, builtins


def main(out: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    x = torch.randn(4, 4)
    y = model(x)
    loss = norms(y) + tensordots(y) + resized(y) + others(y).sum()
    loss.backward()
    lines = [f.code for f in (norms, tensordots, resized, others)]
    lines += [repr(loss.item()), repr(model.weight.grad.tolist())]
    with open(out, "w", encoding="utf-8") as file:
        file.write("\n".join(lines))
    sys.exit(3)  # the program's own exit code


if __name__ == "__main__":
    main(sys.argv[1])
