"""Gradient checkpointing recorded by ``precheck.record`` and graded by run_ut: the recomputed forwards are calls
like any other (torch's non-reentrant checkpoint stops its recomputation by raising through a call, which leaves
no record), and every call is graded, forward and backward, as in the same step without checkpointing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import precheck
from precheck.run_ut import run_ut


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.proj = nn.LayerNorm(8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return x + self.proj(F.gelu(torch.softmax(h @ h.transpose(-1, -2), -1) @ h))


def _graded(tmp_path: Path, reentrant: bool | None) -> tuple[dict, dict, list[str]]:
    """The step of two blocks (checkpointed unless ``reentrant`` is None) recorded, then run_ut's counts."""
    torch.manual_seed(0)
    blocks = nn.ModuleList([_Block(), _Block()])
    x = torch.randn(2, 3, 8, requires_grad=True)
    with precheck.record(tmp_path / "dump") as recorder:
        for block in blocks:
            x = block(x) if reentrant is None else checkpoint(block, x, use_reentrant=reentrant)
        x.sum().backward()
    summary = run_ut(recorder.written[0], tmp_path / "out", workers=1)
    names = [r.name for r in summary.results]
    return dict(summary.counts), dict(summary.backward_counts), names


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpointed_step_is_graded_as_the_same_step_without_checkpointing(tmp_path: Path, reentrant: bool) -> None:
    forward, backward, names = _graded(tmp_path / "checkpointed", reentrant)
    plain_forward, plain_backward, plain_names = _graded(tmp_path / "plain", None)
    assert forward.get("error", 0) == forward.get("SKIP", 0) == 0
    assert backward == plain_backward and backward.get("error", 0) == backward.get("SKIP", 0) == 0
    recomputed = len(names) - len(plain_names)  # the recomputed calls, each a row of its own
    assert forward == {**plain_forward, "pass": plain_forward["pass"] + recomputed} and recomputed > 0
