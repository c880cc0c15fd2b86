"""APIs that misbehave on purpose, to prove that precheck survives them. Registered only when the environment
variable PRECHECK_TEST_APIS is 1 (the test suite sets it); never part of a real run."""
from __future__ import annotations

import os
import signal
import time

import torch

ENV = "PRECHECK_TEST_APIS"


def segfault(x: torch.Tensor) -> torch.Tensor:
    os.kill(os.getpid(), signal.SIGSEGV)
    return x


def abort(x: torch.Tensor) -> torch.Tensor:
    os.abort()


def exit_hard(x: torch.Tensor) -> torch.Tensor:
    os._exit(3)


def hang(x: torch.Tensor) -> torch.Tensor:
    time.sleep(3600)
    return x


def slow_identity(x: torch.Tensor, seconds: float = 0.3) -> torch.Tensor:
    time.sleep(seconds)
    return x * 1


MISBEHAVING = {"Torch.precheck_segfault": segfault, "Torch.precheck_abort": abort,
               "Torch.precheck_exit": exit_hard, "Torch.precheck_hang": hang,
               "Torch.precheck_slow": slow_identity}


def enabled() -> bool:
    return os.environ.get(ENV) == "1"
