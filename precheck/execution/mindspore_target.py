"""``--target mindspore``: the recorded MindSpore call re-run by MindSpore itself, graded against the PyTorch
float64 golden of its equivalent (api_registry.mindspore).

MindSpore runs in a worker process of its own interpreter (precheck/execution/mindspore_worker.py): it pins
numpy<2 and pandas<3, which precheck's environment need not share. The interpreter is the first of:
``PRECHECK_MINDSPORE_PYTHON``; this interpreter, where it can import MindSpore; ``.venv-mindspore/bin/python``
beside this interpreter's venv, then in the repository precheck is installed from (an editable install), then
in the current folder (``.ci/setup --test`` makes it at the repository root, beside ``.venv``). Without any, a
call is a SKIP row saying where to point, never a crash. One worker serves every call of a precheck process and is
started again if it dies.

The worker and whatever it starts form a process group of their own, and the group is killed, never one process
of it, wherever the worker's work ends: a call past its timeout, a worker that died, the process's end. A process
that owns a worker and is killed itself (a pool worker past a case's timeout) cannot kill anything: the worker
holds the read end of a pipe only its owner writes to (the lifeline), and its group dies when that pipe closes.
Without that, each timed-out call of a hanging MindSpore left its worker running: 47 after one run.

The worker runs the call as recorded (MindSpore's names and arguments) on the inputs precheck built, tensors in
the recorded dtypes; the gradients fed into its outputs are the backward record's, and it returns one gradient
per tensor input that needs one, as MindSpore's msprobe records them.
"""

from __future__ import annotations

import atexit
import importlib.util
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

from precheck.core.dtypes import MINDSPORE
from precheck.dump.records import Case, TensorSpec
from precheck.execution.runner import Call, SideRun
from precheck.walk import flatten, map_placed

__all__ = ["MindSporeUnavailable", "MindSporeWorker", "mindspore_python", "run_in_mindspore"]

ENV = "PRECHECK_MINDSPORE_PYTHON"
VENV = ".venv-mindspore"
_REPOSITORY = Path(__file__).resolve().parents[2]  # the repository root for an editable install
_WORKER = Path(__file__).with_name("mindspore_worker.py")
_NAMES = {getattr(torch, torch_name.removeprefix("torch.")): ms for ms, torch_name in MINDSPORE.items()}
_DEVICES = {"cpu": "CPU", "npu": "Ascend", "cuda": "GPU"}


class MindSporeUnavailable(Exception):
    """No interpreter with MindSpore, or its worker cannot start: the call is a SKIP row with this reason."""


class Unsupported(Exception):
    """MindSpore has no kernel for this call on this device (a SKIP row: no precision was measured)."""


class TimedOut(Exception):
    """MindSpore's worker gave no answer within the case's time limit (its processes were killed): the case's
    timed-out SKIP row (results.timed_out), as a call past its time in a pool is."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"MindSpore's worker timed out after {seconds:g} s")
        self.seconds = seconds


def mindspore_python() -> str:
    """The interpreter that runs MindSpore; MindSporeUnavailable says how to provide one."""
    named = os.environ.get(ENV)
    if named:
        if not Path(named).is_file():
            raise MindSporeUnavailable(f"{ENV}={named}: no such interpreter")
        return named
    if importlib.util.find_spec("mindspore") is not None:
        return sys.executable
    for folder in (Path(sys.prefix).parent, _REPOSITORY, Path.cwd()):
        python = folder / VENV / "bin" / "python"
        if python.is_file() and os.access(python, os.X_OK):
            return str(python)
    raise MindSporeUnavailable(
        f"MindSpore is not installed: no {VENV} beside this venv, in precheck's repository or in the current "
        f"folder (bash .ci/setup --test makes one); set {ENV} to a Python that has MindSpore, or pip install "
        "'precheck[mindspore]'"
    )


class MindSporeWorker:
    """One MindSpore process answering calls over a pipe, one at a time."""

    def __init__(self, python: str) -> None:
        self.python = python
        self.folder = tempfile.TemporaryDirectory(prefix="precheck-ms-")
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        lifeline, self._lifeline = os.pipe()  # the worker reads, this process holds the write end until it kills it
        try:
            process = subprocess.Popen(
                [self.python, str(_WORKER), str(lifeline)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                pass_fds=(lifeline,),
                start_new_session=True,  # its own process group: what MindSpore starts is killed with it
            )
        except OSError as e:
            os.close(self._lifeline)
            raise MindSporeUnavailable(f"cannot start {self.python}: {e.strerror or e}") from None
        finally:
            os.close(lifeline)
        ready = process.stdout.readline() if process.stdout else ""
        if not ready.startswith('{"ready"'):
            self._kill(process)
            raise MindSporeUnavailable(f"{self.python} cannot run MindSpore (import mindspore failed)")
        return process

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The worker's answer to ``request``; an error answer when it died; TimedOut when it gave none within
        ``timeout`` seconds (its group is then killed: a hung kernel cannot be stopped otherwise)."""
        with self._lock:
            if self._process is not None and self._process.poll() is not None:
                self._kill(self._process)  # died between calls: what it started goes with it
                self._process = None
            if self._process is None:
                self._process = self._start()
            process = self._process
            assert process.stdin is not None and process.stdout is not None
            try:
                process.stdin.write(json.dumps(request) + "\n")
                process.stdin.flush()
                answered = select.select([process.stdout], [], [], timeout)[0]
                line = process.stdout.readline() if answered else None
            except OSError:
                line = ""
            if line:
                return json.loads(line)
            self._process = None
            code = self._kill(process)
            if line is None:
                raise TimedOut(timeout)
            return {"error": f"MindSpore's worker died (exit code {code})"}

    def _kill(self, process: subprocess.Popen) -> int:
        """Kill the worker's process group and close its lifeline; the worker's exit code."""
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:  # the worker and all it started are gone already
            pass
        os.close(self._lifeline)
        return process.wait()

    def close(self) -> None:
        if self._process is not None:
            self._kill(self._process)
            self._process = None
        self.folder.cleanup()


_worker: MindSporeWorker | None = None


def _shared_worker() -> MindSporeWorker:
    """This process's worker, started again under another interpreter when PRECHECK_MINDSPORE_PYTHON changed."""
    global _worker
    python = mindspore_python()
    if _worker is None or _worker.python != python:
        if _worker is not None:
            _worker.close()
        _worker = MindSporeWorker(python)
        atexit.register(_worker.close)
    return _worker


def run_in_mindspore(call: Call, case: Case, device: str, timeout: float) -> SideRun:
    """The recorded MindSpore call run by MindSpore on ``device`` from the call's inputs; its outputs and its
    gradients (tensor-input index -> gradient) in the recorded dtypes. Raises MindSporeUnavailable or Unsupported
    where no run could be made, TimedOut where MindSpore took longer than ``timeout`` seconds."""
    worker = _shared_worker()
    tensors = [t for t in flatten((call.loaded_args, call.loaded_kwargs)) if isinstance(t, torch.Tensor)]
    specs = [s for s in flatten((case.args, case.kwargs)) if isinstance(s, TensorSpec)]
    need = [k for k, s in enumerate(specs) if s.requires_grad]
    args, kwargs = case.recorded_call or (case.args, case.kwargs)
    arrays = {f"t{k}": _array(t) for k, t in enumerate(tensors)}
    grad_kinds = None
    if call.grad_outputs is not None and need:
        given = flatten(call.grad_outputs)
        grad_kinds = [_NAMES.get(g.dtype) if isinstance(g, torch.Tensor) else None for g in given]
        arrays.update({f"s{i}": _array(g) for i, g in enumerate(given) if isinstance(g, torch.Tensor)})
    folder = Path(worker.folder.name)
    caller = threading.get_ident()  # a Dask worker's threads share one MindSpore worker, not their files
    inputs, out = folder / f"in-{caller}.npz", folder / f"out-{caller}.npz"
    np.savez(inputs, **arrays)
    encoded = _encoded(args, kwargs)
    answer = worker.ask(
        {
            "api": case.recorded_api or case.api,
            "args": encoded[0],
            "kwargs": encoded[1],
            "tensors": [_NAMES.get(t.dtype, str(t.dtype)) for t in tensors],
            "grad": need,
            "grad_outputs": grad_kinds,
            "inputs": str(inputs),
            "out": str(out),
            "device": _DEVICES.get(device.split(":")[0], device),
        },
        timeout,
    )
    if "unsupported" in answer:
        raise Unsupported(answer["unsupported"])
    if "error" in answer:
        return SideRun(outputs=[], error=answer["error"])
    with np.load(out, allow_pickle=False) as data:
        outputs = [_value(d, data, f"o{i}") for i, d in enumerate(answer["outputs"])]
        grads = None
        if "grads" in answer:
            grads = {k: _value(d, data, f"g{i}") for i, (k, d) in enumerate(zip(need, answer["grads"]))}
    return SideRun(outputs=outputs, grads=grads)


def _array(t: torch.Tensor) -> np.ndarray:
    """numpy has no bf16: widened to float32, exactly, and narrowed again by the worker."""
    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def _value(described: dict | None, data: Any, key: str) -> Any:
    if described is None or "value" in described:
        return None if described is None else described["value"]
    tensor = torch.from_numpy(np.array(data[key]))
    dtype = next((t for t, name in _NAMES.items() if name == described["dtype"]), None)
    return tensor.to(dtype) if dtype is not None else tensor


def _encoded(args: tuple, kwargs: dict) -> tuple[list, list]:
    """The recorded arguments for the worker (mindspore_worker's encoding): tensors numbered in argument order,
    dtypes by MindSpore's names, keyword arguments as [name, value] pairs. A decoded record holds no dict but
    its keyword arguments, so every dict sent is one tagged value."""
    count = itertools.count()

    def leaf(value: Any, _: str) -> Any:
        if isinstance(value, TensorSpec):
            return {"$tensor": next(count)}
        if isinstance(value, torch.dtype) and value in _NAMES:
            return {"$dtype": _NAMES[value]}
        if isinstance(value, slice):
            return {"$slice": [value.start, value.stop, value.step]}
        if value is Ellipsis:
            return {"$ellipsis": True}
        if isinstance(value, torch.Size):
            return list(value)
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise Unsupported(f"an argument {value!r} of type {type(value).__name__} cannot be passed to MindSpore")

    return map_placed(list(args), leaf), [[name, map_placed(v, leaf)] for name, v in kwargs.items()]
