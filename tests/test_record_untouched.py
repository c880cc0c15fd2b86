"""A recording never changes the run it observes: the losses and the CPU generator's state after every step are
bit for bit those of the same steps without precheck, recorded or checked online by any backend.

The in-process check once drew a random call's sample on its own thread, with the process's generator seeded
from the check's seed (torch's random APIs take no generator of their own): a draw of the program in that window
came from the check's seed, and the generator was rewound after it. Whether the window was hit depended on
timing (7 runs in 10); here the check of the dropout is held inside its draw until the program has drawn, so the
window is hit on every run where the check draws on a thread of its own.
"""

from __future__ import annotations

import threading
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import precheck
from precheck.core.older_python import zip_strict
from precheck.execution.targets import DeviceTarget, Target

STEPS = 3
WAIT = 30.0  # seconds: a bound on a hand-over that takes milliseconds, never reached unless the test is broken


class _Held:
    """The check of a random call held inside its draw, on a checking thread, until the program has drawn."""

    def __init__(self) -> None:
        self.checking, self.drawn = threading.Event(), threading.Event()

    def run(self, original):  # noqa: ANN001, ANN201 - a method replacement
        held = self

        def run(target: Target, call, case):  # noqa: ANN001, ANN202
            if "dropout" in case.name:
                held.checking.set()
                if threading.current_thread().name.startswith("precheck-"):
                    assert held.drawn.wait(WAIT), "the program never drew"
            return original(target, call, case)

        return run


def _train(out: Path | None, held: _Held | None, recorded: range = range(STEPS), **check: object) -> list[torch.Tensor]:
    """Three steps of a model with dropout whose data is drawn each step, the ``recorded`` ones recorded under
    ``out``; the losses, a draw and the generator's state after each step."""
    torch.manual_seed(0)
    weight = torch.randn(8, 8, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=0.1)
    seen = []
    for step in range(STEPS):
        x = torch.randn(16, 8)
        with nullcontext() if out is None or step not in recorded else precheck.record(out, step=step, **check):  # type: ignore[arg-type]
            loss = F.dropout(x @ weight, p=0.5, training=True).square().mean()
            loss.backward()
            if held is not None:
                assert held.checking.wait(WAIT), "the dropout was never checked"
            noise = torch.rand(4)  # drawn while the dropout's check may still run
            if held is not None:
                held.drawn.set()
        optimizer.step()
        optimizer.zero_grad()
        seen += [loss.detach(), noise, torch.get_rng_state()]
        if held is not None:
            held.checking.clear()
            held.drawn.clear()
    return seen


@pytest.mark.parametrize(
    "check, recorded",
    [(None, range(STEPS)), ({"check": True}, range(STEPS)), ({"check": True, "backend": "process", "workers": 2}, [1])],
    ids=["record", "inprocess", "process"],
)
def test_losses_and_the_generator_are_those_of_the_run_without_precheck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: dict | None, recorded: range
) -> None:
    expected = _train(None, None)
    held = _Held() if check is not None and "backend" not in check else None
    if held is not None:
        monkeypatch.setattr(DeviceTarget, "run", held.run(DeviceTarget.run))  # the device target's own run
    got = _train(tmp_path, held, recorded, **(check or {}))  # a pool's start costs seconds: one step of it
    assert all(torch.equal(a, b) for a, b in zip_strict(got, expected))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_draw_on_a_cuda_target_leaves_the_programs_cuda_generator_as_it_was() -> None:
    from precheck.execution.targets import _seeded

    torch.cuda.manual_seed_all(7)
    before = torch.cuda.get_rng_state_all()
    with _seeded(0, "Functional.dropout.0", "cuda"):
        torch.rand(4, device="cuda")
    assert all(torch.equal(a, b) for a, b in zip_strict(torch.cuda.get_rng_state_all(), before))
