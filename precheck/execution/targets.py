"""What a check grades: the target, the run whose outputs are compared with the float64 golden.

Each kind of target is a type with one interface, so a check reads the same for all of them and a new kind (a
call replayed in another framework, a reference device) is a class here, not a branch in every stage: the device
(the call re-run on ``-d`` in the recorded dtypes), the compiled call (the same through torch.compile), the
recorded outputs (what the device produced during training, read from the dump; nothing re-run) and MindSpore
(a MindSpore dump's call re-run by MindSpore).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch

from precheck.core.reasons import Reason
from precheck.dump.mindspore import MINDSPORE
from precheck.dump.records import Case, Dump
from precheck.errors import OptionError
from precheck.execution.honest_run import repeats_honest
from precheck.execution.mindspore_target import MindSporeUnavailable, TimedOut, Unsupported, run_in_mindspore
from precheck.execution.options import TARGETS, CheckOptions
from precheck.execution.recorded import AtHook, recorded_draw, recorded_outcome
from precheck.execution.runner import Call, SideRun, run_side
from precheck.execution.sides import compiled, target_side
from precheck.execution.training_outputs import Refused
from precheck.inputs.builder import InputBuilder
from precheck.inputs.synth import rng_for
from precheck.results import ApiResult, failed, skipped, timed_out

__all__ = [
    "CompiledTarget",
    "DeviceTarget",
    "MindSporeTarget",
    "Ran",
    "RecordedTarget",
    "Target",
    "for_framework",
    "register_target",
    "target_for",
]


@dataclass(frozen=True)
class Ran:
    """What a target made of a call, and the golden it is graded against (the recorded target moves the golden's
    gradients to where msprobe's hook recorded them: ``at``, and refuses a recorded index outside its input:
    ``refused``)."""

    target: SideRun
    golden: SideRun
    at: AtHook | None = None
    refused: Refused = field(default_factory=dict)  # outputs not graded, each with its error verdict, by place


class Target(ABC):
    """A kind of target on one device: a subclass names itself (``name``, what ``--target`` asks for) and runs a
    call (``run``); its class attributes say what the rest of the run must know of it. :func:`register_target`
    makes it one of run_ut's targets."""

    name: ClassVar[str]
    label: ClassVar[str] = ""  # said in every details row's Message (DEVICE Dtype keeps msprobe's meaning)
    extra_timeout: ClassVar[float] = 0.0  # seconds a worker allows a case beyond its size's share
    compiles: ClassVar[bool] = False  # pays a compilation per call signature (the scheduler's cost model)
    on_device: ClassVar[bool] = True  # runs the call on the device (a fused op needs that device)
    hook_node: ClassVar[bool] = False  # gradients are graded where msprobe's backward hook recorded them
    takes_generated_inputs: ClassVar[bool] = True  # may run on inputs generated from statistics (--random)
    replays: ClassVar[bool] = True  # re-runs the call: the outputs training recorded are graded beside its run

    def __init__(self, options: CheckOptions) -> None:
        self.device, self.options = options.device, options

    def describe(self) -> str:
        """How the run's summary says where the APIs were checked."""
        return f"on {self.device}"

    def trees(self, case: Case) -> tuple:
        """The case's argument trees whose tensor files this target reads: a replaying target reads the recorded
        outputs too, graded beside its run (a suite that copied no output file graded them as bad records)."""
        return (case.args, case.kwargs, case.grad_outputs, *((case.outputs,) if self.replays else ()))

    @abstractmethod
    def run(self, call: Call, case: Case) -> SideRun:
        """The call's outputs (and gradients) as this target produces them, to be graded against the golden."""

    def outcome(self, call: Call, case: Case, builder: InputBuilder, golden: SideRun) -> ApiResult | Ran:
        """The target's run of the call, or the case's result when it ends here."""
        run = self.run(call, case)
        if run.compile_failed:
            return skipped(case, f"torch.compile failed: {run.error}", Reason.SKIP_COMPILE_FAILED)
        return Ran(run, golden)

    def draw(self, call: Call, case: Case, builder: InputBuilder, seed: int) -> SideRun | ApiResult:
        """A random call's outputs (its law is checked on them), drawn from generators seeded like generated
        inputs, so one --seed gives one draw and the same CSVs on every run; or the case's result."""
        with _seeded(seed, case.name, self.device):
            run = self.run(call, case)
        if run.compile_failed:
            return skipped(case, f"torch.compile failed: {run.error}", Reason.SKIP_COMPILE_FAILED)
        if run.error:
            return target_raised(case, run, builder.describe())
        return run

    def is_honest(self, case: Case) -> bool:
        """The target's run already is the honest kernel's (grader/honest.py): no second run is needed."""
        return False


class DeviceTarget(Target):
    name = "device"

    def run(self, call: Call, case: Case) -> SideRun:
        return run_side(call, target_side(self.device))

    def is_honest(self, case: Case) -> bool:
        return self.device == "cpu" and repeats_honest(case)


class CompiledTarget(Target):
    name = "compile"
    label = "target: torch.compile"
    extra_timeout = 300.0
    compiles = True

    def describe(self) -> str:
        return f"through torch.compile on {self.device}"

    def run(self, call: Call, case: Case) -> SideRun:
        return run_side(call, target_side(self.device), compiled(call.entry.func, case.signature()))


class RecordedTarget(Target):
    name = "recorded"
    label = "target: recorded outputs"
    on_device = False
    hook_node = True
    takes_generated_inputs = False
    replays = False

    def describe(self) -> str:
        return "against their recorded outputs"

    def trees(self, case: Case) -> tuple:
        return (*super().trees(case), case.outputs, case.grad_inputs)  # replays nothing: none of them twice

    def run(self, call: Call, case: Case) -> SideRun:
        raise TypeError("the recorded target runs nothing: its outputs are the dump's")

    def outcome(self, call: Call, case: Case, builder: InputBuilder, golden: SideRun) -> ApiResult | Ran:
        got = recorded_outcome(case, call, builder, golden)
        return got if isinstance(got, ApiResult) else Ran(*got)

    def draw(self, call: Call, case: Case, builder: InputBuilder, seed: int) -> SideRun | ApiResult:
        return recorded_draw(case, builder)


class MindSporeTarget(Target):
    """The recorded MindSpore call re-run by MindSpore on the device (execution/mindspore_target.py)."""

    name = "mindspore"
    label = "target: MindSpore"
    on_device = False

    def describe(self) -> str:
        return f"in MindSpore on {self.device}"

    def run(self, call: Call, case: Case) -> SideRun:
        # MindSpore's worker is stopped at the case's timeout by this process, which outlives an abandoned call
        from precheck.execution.limits import case_limit

        return run_in_mindspore(call, case, self.device, case_limit(case, self.options, self.extra_timeout))

    def outcome(self, call: Call, case: Case, builder: InputBuilder, golden: SideRun) -> ApiResult | Ran:
        try:
            return Ran(self.run(call, case), golden)
        except MindSporeUnavailable as e:
            return skipped(case, str(e), Reason.SKIP_NO_MINDSPORE)
        except Unsupported as e:
            return skipped(case, f"MindSpore cannot run this call on {self.device}: {e}", Reason.SKIP_MINDSPORE_KERNEL)
        except TimedOut as e:
            return timed_out(case, e.seconds)

    def draw(self, call: Call, case: Case, builder: InputBuilder, seed: int) -> SideRun | ApiResult:
        ran = self.outcome(call, case, builder, SideRun(outputs=[]))
        if isinstance(ran, ApiResult):
            return ran
        if ran.target.error:
            return target_raised(case, ran.target, builder.describe())
        return ran.target


_KINDS: dict[str, type[Target]] = {}


def register_target(kind: type[Target]) -> type[Target]:
    """``kind`` becomes the target its ``name`` asks for (``CheckOptions(target=name)``, ``--target name``);
    usable as a class decorator. Its runs are graded, timed and reported as the others' are."""
    _KINDS[kind.name] = kind
    if kind.name not in TARGETS:
        TARGETS.append(kind.name)  # the command line's choices, torch-free
    return kind


for _kind in (DeviceTarget, RecordedTarget, CompiledTarget, MindSporeTarget):
    register_target(_kind)


def target_for(options: CheckOptions) -> Target:
    """The target ``options`` name, on their device; ValueError for a name no kind has."""
    kind = _KINDS.get(options.target)
    if kind is None:
        raise OptionError(f"unknown target {options.target!r} (choose from {', '.join(_KINDS)})")
    return kind(options)


def target_raised(case: Case, run: SideRun, inputs: str) -> ApiResult:
    """The error row of a target run that raised; ``inputs`` says where its inputs came from. Its code says
    whether the error left the device untrusted, as the runner judged where it caught it."""
    code = Reason.DEVICE_FAILED if run.device_lost else Reason.TARGET_FAILED
    return failed(case, "; ".join(filter(None, [f"target raised {run.error}", inputs])), code)


def for_framework(options: CheckOptions, dump: Dump) -> CheckOptions:
    """A MindSpore dump's target where the options leave the default: what msprobe grades (the recorded outputs
    of a tensor dump, MindSpore's run of a statistics dump); ValueError for a target the dump cannot have."""
    if dump.framework != MINDSPORE:
        if options.target == "mindspore":
            raise OptionError(f"--target mindspore re-runs MindSpore dumps; {dump.path} is a PyTorch dump")
        return options
    if options.target == "compile":
        raise OptionError("--target compile runs torch.compile; a MindSpore dump is graded as recorded or mindspore")
    if options.target == "device":
        return replace(options, target="recorded" if dump.task == "tensor" else "mindspore")
    return options


@contextmanager
def _seeded(seed: int, name: str, device: str) -> Iterator[None]:
    """The CPU's generator and the target device's seeded from the run's seed and the API's name; the caller's are
    left as they were, the device's too (a check in the training's process, precheck record --check, must not
    re-seed the program's CUDA generator). They are the process's: only a thread that is alone to draw may seed
    them unseen (precheck.recording.online checks random calls on the thread that made them). Only those two are
    seeded (torch.manual_seed queues a seeding of every CUDA device even on a CPU run, at 0.7 ms a call)."""
    value = int(rng_for(seed, name, "draw").integers(2**62))
    kind = device.split(":")[0]
    backend: Any = getattr(torch, kind, None)  # torch.cuda, torch.npu (torch_npu), ...
    seeds_device = kind != "cpu" and hasattr(backend, "manual_seed_all")
    devices = list(range(backend.device_count())) if seeds_device else []
    with torch.random.fork_rng(devices=devices, device_type=kind if seeds_device else "cuda"):
        torch.default_generator.manual_seed(value)
        if seeds_device:
            backend.manual_seed_all(value)
        yield
