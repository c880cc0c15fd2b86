"""The sides a call runs on: the target device in the recorded dtypes, the CPU float64 golden, the honest kernel.

A side knows how to place a recorded tensor and how to read a recorded dtype or device argument, so the runner
builds both calls from the same decoded arguments without knowing which side it is building.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from precheck.compat import one_compile_thread
from precheck.dump.records import DeviceArg
from precheck.errors import PrecheckError


class DeviceError(PrecheckError, ValueError):
    """The requested device does not exist on this machine (a one-line CLI error)."""


# What torch raises when a device's memory or its context failed (torch 2.8 and later have AcceleratorError for
# an error of the device runtime; earlier ones only the out-of-memory type, torch.cuda's before 2.5).
_DEVICE_FAILURES = tuple(
    getattr(owner, name)
    for owner, name in ((torch, "AcceleratorError"), (torch, "OutOfMemoryError"), (torch.cuda, "OutOfMemoryError"))
    if hasattr(owner, name)
)


@dataclass(frozen=True)
class Side:
    name: str
    device: str
    golden: bool  # the golden raises every floating tensor and dtype to 64 bits
    honest: bool = False  # the honest kernel raises bf16/fp16 (and complex32) to 32 bits: accurate accumulation

    def dtype(self, dtype: torch.dtype) -> torch.dtype:
        if self.golden:
            if dtype.is_complex:
                return torch.complex128
            return torch.float64 if dtype.is_floating_point else dtype
        if self.honest and (dtype.is_floating_point or dtype.is_complex) and dtype.itemsize < 4 + 4 * dtype.is_complex:
            return torch.complex64 if dtype.is_complex else torch.float32
        return dtype

    def tensor(self, t: torch.Tensor) -> torch.Tensor:
        """A fresh copy of ``t`` for this side, so in-place APIs never leak from one side to the other."""
        return t.to(device=self.device, dtype=self.dtype(t.dtype), copy=True)

    def autocast(self, value: Any, dtype: torch.dtype) -> Any:
        """``value`` as torch.autocast to ``dtype`` hands it to the op (precheck/dump/autocast.py): a floating
        tensor but float64 cast to ``dtype``, inside the graph, so gradients reach the recorded inputs in their
        own dtypes. Made explicit rather than run under the target device's autocast, whose lists differ (CUDA
        runs softmax and layer_norm in fp32, the CPU in bf16): the record says how the call ran, wherever it is
        replayed. The golden's float64 tensors are left alone; the honest kernel gets the same rounded inputs
        raised to its wider dtype (it accumulates accurately from what the kernel was given)."""
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.dtype == torch.float64:
            return value
        return value.to(dtype).to(self.dtype(dtype))

    def device_arg(self, arg: DeviceArg) -> torch.device:
        return torch.device(self.device)

    def synchronize(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)
        elif self.device.startswith("npu"):
            torch.npu.synchronize(self.device)  # type: ignore[attr-defined]

    def lost_to(self, error: BaseException) -> bool:
        """Whether a call's exception leaves this process's device untrusted, so its worker is retired: by the
        exception's type, or, for an error on an accelerator that has no type of its own (a cuBLAS or NPU
        runtime status), by asking the device whether it still works. Never by the error's words: an API's own
        message may say "out of memory" of anything."""
        if isinstance(error, _DEVICE_FAILURES):
            return True
        if self.device == "cpu":
            return False
        try:
            self.synchronize()
        except Exception:
            return True
        return False


GOLDEN = Side(name="golden", device="cpu", golden=True)
# The default standard's yardstick (grader/honest.py): the call on the CPU with half-precision tensors and dtype
# arguments raised to float32; its results are rounded back to the target's dtypes when graded.
HONEST = Side(name="honest", device="cpu", golden=False, honest=True)


def _npu_available() -> bool:
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        import torch_npu  # noqa: F401

        return torch.npu.is_available()  # type: ignore[attr-defined]
    except Exception:
        return False


def resolve_device(spec: str) -> str:
    """Turn ``-d`` into a torch device string: ``auto`` picks npu, then cuda, then cpu; a bare index means the
    accelerator of that index, as msprobe reads it."""
    spec = spec.strip().lower()
    if spec == "auto":
        if _npu_available():
            return "npu:0"
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if spec.isdigit():
        if _npu_available():
            return f"npu:{spec}"
        if torch.cuda.is_available():
            return f"cuda:{spec}"
        raise DeviceError(f"device index {spec} given but no NPU or CUDA device is available")
    kind, _, index = spec.partition(":")
    if kind not in ("cpu", "cuda", "npu", "mps") or index and not index.isdigit():
        raise DeviceError(f"unknown device {spec!r} (expected auto, cpu, cuda[:i], npu[:i], mps or an index)")
    if kind == "cpu":
        if index.lstrip("0"):
            raise DeviceError(f"device {spec!r} does not exist (the CPU is one device: cpu, or cpu:0)")
        return "cpu"
    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    elif kind == "npu":
        count = torch.npu.device_count() if _npu_available() else 0  # type: ignore[attr-defined]
    else:
        count = 1 if torch.backends.mps.is_available() else 0
    i = int(index or 0)
    if i >= count:
        raise DeviceError(f"device {spec!r} is not available on this machine ({count} {kind} device(s) found)")
    return f"{kind}:{i}" if kind != "mps" else "mps"


def target_side(device: str) -> Side:
    return Side(name="target", device=device, golden=False)


def reference_side(device: str) -> Side:
    """The benchmark standard's second reference: the same call in the target dtypes on another device."""
    return Side(name="reference", device=device, golden=False)


class CompileError(Exception):
    """torch.compile could not compile the call: the case is a SKIP row with the compiler's reason."""


_COMPILED: dict[tuple, Callable[..., Any]] = {}


def compiled(func: Callable[..., Any], signature: tuple) -> Callable[..., Any]:
    """``func`` through torch.compile (inductor), compiled once per (API, signature) in this process.
    Compiler failures are raised as CompileError (the case's SKIP reason), the API's own errors unchanged."""
    if signature not in _COMPILED:

        def call(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

        # dynamo caches compiled graphs per code object and falls back to eager, silently, after 8 of them:
        # each signature gets a code object of its own so every one is really compiled.
        call.__code__ = call.__code__.replace(co_name=f"precheck_compiled_{len(_COMPILED)}")
        with one_compile_thread():  # torch 2.1's inductor starts its compile workers as it is first imported
            _COMPILED[signature] = torch.compile(call, dynamic=False)
    compiled_call = _COMPILED[signature]

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            with one_compile_thread():
                return compiled_call(*args, **kwargs)
        except Exception as e:
            if type(e).__module__.startswith(("torch._dynamo", "torch._inductor")):
                text = str(e).strip().splitlines()
                raise CompileError(f"{type(e).__name__}: {text[0][:300] if text else ''}") from None
            raise

    return run
