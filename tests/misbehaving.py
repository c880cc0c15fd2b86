"""APIs that misbehave on purpose, to prove that precheck survives them: a plugin module (api_registry/plugins.py)
the tests name in PRECHECK_PLUGINS, so the product holds no test-only code."""

from __future__ import annotations

import os
import signal
import sys
import time

import torch


def segfault(x: torch.Tensor) -> torch.Tensor:
    os.kill(os.getpid(), signal.SIGSEGV)
    return x


def abort(x: torch.Tensor) -> torch.Tensor:
    os.abort()


def kill_own_process(x: torch.Tensor) -> torch.Tensor:
    os.kill(os.getpid(), signal.SIGKILL)
    return x


def exit_hard(x: torch.Tensor) -> torch.Tensor:
    os._exit(3)


def exit_politely(x: torch.Tensor) -> torch.Tensor:
    sys.exit(0)


def generator_exit(x: torch.Tensor) -> torch.Tensor:
    raise GeneratorExit


def hang(x: torch.Tensor) -> torch.Tensor:
    time.sleep(3600)
    return x


def change_directory(x: torch.Tensor) -> torch.Tensor:
    os.chdir("/")
    return x * 1


def slow_identity(x: torch.Tensor, seconds: float = 0.3) -> torch.Tensor:
    time.sleep(seconds)
    return x * 1


def busy_in_torch(x: torch.Tensor) -> torch.Tensor:
    """A minute of matrix products: torch releases the GIL for each, so a stopped run meets this thread in C++."""
    y = torch.randn(300, 300)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        y = torch.tanh(y @ y)
    return x * 1


_POISONED = []


def sticky_device_error(x: torch.Tensor) -> torch.Tensor:
    """Fails on the target side (not float64) and leaves the process unusable, as a CUDA illegal memory access
    leaves its context: torch's type for it, in words that name no device."""
    if x.dtype == torch.float64:
        return x * 1
    _POISONED.append(True)
    raise torch.AcceleratorError("an illegal memory access was encountered")


def wordy_error(x: torch.Tensor) -> torch.Tensor:
    """Fails on the target side with an error of its own whose words happen to be a device's: the process is fine."""
    if x.dtype == torch.float64:
        return x * 1
    raise ValueError("CUDA error: out of memory, says this API of its own arguments")


def with_progress_bar(x: torch.Tensor) -> torch.Tensor:
    """Shows a progress bar, as inductor does while torch.compile waits for its kernels."""
    from tqdm import tqdm

    for _ in tqdm(range(1), disable=True):
        pass
    return x * 1


def needs_clean_process(x: torch.Tensor) -> torch.Tensor:
    if _POISONED:
        raise RuntimeError("CUDA error: the context of this process is broken")
    return x * 1


ENTRIES = {
    "Torch.precheck_segfault": segfault,
    "Torch.precheck_abort": abort,
    "Torch.precheck_exit": exit_hard,
    "Torch.precheck_kill": kill_own_process,
    "Torch.precheck_sys_exit": exit_politely,
    "Torch.precheck_generator_exit": generator_exit,
    "Torch.precheck_hang": hang,
    "Torch.precheck_chdir": change_directory,
    "Torch.precheck_slow": slow_identity,
    "Torch.precheck_busy": busy_in_torch,
    "Torch.precheck_sticky": sticky_device_error,
    "Torch.precheck_wordy": wordy_error,
    "Torch.precheck_clean": needs_clean_process,
    "Torch.precheck_progress": with_progress_bar,
}
