"""Where ``precheck record --`` starts step 0: at the model's first forward, where msprobe's users call start().

The wrappers go on when the program imports torch (a library that patches torch later must patch the wrappers:
precheck.recording.wrap), but what runs while the model is built (weight initialisation, RoPE tables) is not
the first iteration: recorded, it shifts every per-name counter after it, so the names no longer line up with
an msprobe dump of the first iteration, and it saves each initialised weight twice. So step 0 starts at the
first call of a module's forward (the first one is top-level: no other forward runs), made outside a module's
``__init__`` (a model that runs a forward to size itself).

A program without a model must still be recorded, and nothing is buffered to decide it afterwards: a recorded
API called before any module has registered a parameter, buffer or submodule, and outside a module's
``__init__``, starts step 0 there, as from the import of torch. Once a module has been built, calls wait for
its forward. (A program that computes with torch before it builds its model has those calls, and the build, in
step 0.) A call torch makes for itself is not the program's computing: ``init_device_mesh`` before the model, as
sharded trainings make it (FSDP2, tensor parallelism), started step 0 there, with the model's build, its RoPE
tables and FSDP2's sharding narrows in it (249 records of an FSDP2 step against msprobe's 177, every name after
them shifted).

A pipeline stage's step does not begin with a forward: a later stage first receives its input (and a schedule
infers the stages' shapes and splits the batch into micro-batches before any of them). Held back until its first
forward, stage 1 lost those calls, and with them every number after them (batch_isend_irecv.2 recorded as .0). So
two calls start step 0 even once a model is built, where msprobe's user calls start() before them: a call made
inside a pipeline schedule's ``step()`` (torch.distributed.pipelining: the iteration's entry, like ``model(x)``),
and a point-to-point call (send, recv, isend, irecv, batch_isend_irecv: a stage receives or sends what an
iteration computes, which building a model never does; Megatron's schedules call them from its own code).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from precheck.compat import is_compiling

if TYPE_CHECKING:
    from precheck.recording.session import Recorder

__all__ = ["FirstForward"]

_TORCH = str(Path(torch.__file__).parent)
_PRECHECK = str(Path(__file__).parent.parent)
_SCHEDULES = str(Path(_TORCH) / "distributed" / "pipelining" / "schedules.py")
_SCHEDULE_ENTRIES = frozenset({"step", "eval"})  # a pipeline schedule's methods a training loop calls
_EXCHANGES = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv"})  # torch.distributed's point-to-point


class FirstForward:
    """Holds ``recorder``'s first start() back until the model's first forward (or, in a program without a
    model, its first recorded call); made before the recorder's own module hooks, so that the mix level's see
    the forward that starts the step."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._model = False
        hooks = torch.nn.modules.module
        self._handles = [
            hooks.register_module_forward_pre_hook(recorder.guard("the first forward's hook", self._forward)),
            hooks.register_module_parameter_registration_hook(self._built),
            hooks.register_module_buffer_registration_hook(self._built),
            hooks.register_module_module_registration_hook(self._built),
        ]
        recorder.waiting = self._call

    def drop(self) -> None:
        """Wait no more (started, or a step ended first): the hooks come off, the model's calls cost nothing."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._recorder.waiting = None

    def _begin(self) -> None:
        self.drop()
        self._recorder.start()

    def _built(self, *_: Any) -> None:
        self._model = True

    def _forward(self, module: torch.nn.Module, args: Any) -> None:
        if is_compiling():
            return  # dynamo traces the hook: a frame walk would break the program's graph; its first eager call starts
        if not _constructing():
            self._begin()

    def _call(self, prefix: str, api: str) -> None:
        """A recorded API is called before step 0 started: it starts the step in a program with no model, or
        where a pipeline stage's iteration begins (a point-to-point call, a schedule's step)."""
        if _constructing():
            self._model = True
        elif (prefix == "Distributed" and api in _EXCHANGES) or _scheduled():
            self._begin()
        elif not self._model and not _by_torch():
            self._begin()


def _by_torch() -> bool:
    """Whether the recorded call being made was made by torch's own code (the first frame outside precheck's)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PRECHECK):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(_TORCH)


def _scheduled() -> bool:
    """Whether the recorded call being made runs inside a pipeline schedule's step() (or eval())."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in _SCHEDULE_ENTRIES and frame.f_code.co_filename == _SCHEDULES:
            return True
        frame = frame.f_back
    return False


def _constructing() -> bool:
    """Whether a module's ``__init__`` is running on this thread (a RoPE table computed before any parameter is
    registered is the build's)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), torch.nn.Module):
            return True
        frame = frame.f_back
    return False
