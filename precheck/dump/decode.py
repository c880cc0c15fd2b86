"""One msprobe record decoded: its arguments as tensor specs and plain values, a forward record and its backward
record as a :class:`Case`.

Decoding is separate from reading the file (precheck.dump.records): a worker decodes a case from its record's
bytes, and a record that cannot be decoded becomes a case with ``problem`` set (a SKIP row), never an exception
for the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from precheck.core.dtypes import MINDSPORE, NAMES
from precheck.core.reasons import Reason
from precheck.dump.index import RecordError
from precheck.dump.sharding import DTENSOR_TYPES, UNSAVED_TYPES, Sharding, decode_sharding
from precheck.escape import clip

TENSOR_TYPES = frozenset(
    {
        "torch.Tensor",
        "torch.nn.parameter.Parameter",
        "mindspore.Tensor",
        "mindspore.common.tensor.Tensor",
        "mindspore.Parameter",
    }
)
# msprobe's type of a FakeTensor: DTensor propagates shapes on them (loss_parallel's cross_entropy), and msprobe
# records those calls too; a record holding one is of a call that computed no values
FAKE_TYPES = frozenset({"torch._subclasses.fake_tensor.FakeTensor"})
MAX_ELEMENTS = 2**63 - 1  # torch sizes and element counts are int64

# MindSpore spells dtypes its own way; torch's are matched against the installed torch.
_MINDSPORE_DTYPES = {ms: getattr(torch, name.removeprefix("torch.")) for ms, name in MINDSPORE.items()}
_TORCH_DTYPES = {str(v): v for v in vars(torch).values() if isinstance(v, torch.dtype)}
_MEMORY_FORMATS = {
    name: getattr(torch, name) for name in ("preserve_format", "contiguous_format", "channels_last", "channels_last_3d")
}
_NUMPY_SCALARS = {
    **{f"{p}{t}": float for p in ("", "numpy.") for t in ("float16", "float32", "float64")},
    **{
        f"{p}{t}": int
        for p in ("", "numpy.")
        for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
    },
    **{f"{p}{t}": bool for p in ("", "numpy.") for t in ("bool", "bool_")},
}


@dataclass(frozen=True)
class Stats:
    max: float | None
    min: float | None
    mean: float | None
    norm: float | None


@dataclass(frozen=True)
class TensorSpec:
    """A recorded tensor: what it was (dtype, shape, statistics) and where its data lies, if it was saved."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    stats: Stats
    requires_grad: bool = False
    data_name: str | None = None
    sharding: Sharding | None = None  # a DTensor's layout: the spec is its local shard (precheck.dump.sharding)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class DeviceArg:
    """A recorded ``torch.device``: each side substitutes its own device, the recorded one is kept for messages."""

    recorded: str


@dataclass(frozen=True)
class Case:
    """One API call to check: decoded forward arguments, recorded outputs, and the backward record if any."""

    name: str  # "Functional.linear.0"
    api: str  # "Functional.linear"
    order: int  # position among the dump's forward records
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    outputs: tuple = ()
    grad_outputs: tuple | None = None  # backward record "input": gradients flowing into the outputs
    grad_inputs: tuple | None = None  # backward record "output": recorded gradients of the inputs
    problem: str | None = None  # set when the record could not be decoded
    problem_reason: Reason = Reason.SKIP_BAD_RECORD  # the code of ``problem``'s SKIP row
    framework: str = "pytorch"  # the dump's: a MindSpore case is its PyTorch equivalent (precheck.dump.mindspore)
    recorded_api: str | None = None  # the recorded API where ``api`` is another framework's equivalent
    recorded_call: tuple | None = None  # its recorded (args, kwargs), where ``args`` / ``kwargs`` are translated
    # the recorded gradients are the call's own input gradients wherever msprobe's hook sat (a DTensor loss_parallel
    # cross_entropy: its nll_loss backward returns the logits' gradient; precheck.execution.vocab_parallel)
    grads_of_inputs: bool = False

    @property
    def has_backward(self) -> bool:
        return self.grad_outputs is not None

    def signature(self) -> tuple:
        """What makes two calls of one API the same check: the API, every tensor's shape, dtype and whether it
        needs a gradient, and every other argument's value (not the statistics, not the file names)."""

        def key(tree: Any) -> Any:
            if isinstance(tree, TensorSpec):
                return ("T", tree.shape, str(tree.dtype), tree.requires_grad)
            if isinstance(tree, tuple):
                return tuple(key(v) for v in tree)
            if isinstance(tree, dict):
                return tuple(sorted((k, key(v)) for k, v in tree.items()))
            return repr(tree)

        return (self.api, key(self.args), key(self.kwargs), self.has_backward)


class Unsaved(RecordError):
    """An argument msprobe recorded without data (null statistics, no file): its call cannot be rebuilt."""


class NoData(RecordError):
    """A call on fake tensors: no value was computed, so there is nothing to check (not a bad record)."""


def unreadable(stem: str, api: str, order: int, problem: str, backward: bool, reason: Reason | None = None) -> Case:
    """The SKIP case of a record that cannot be decoded; ``backward``: a backward was recorded, so its row's
    backward is SKIP too (msprobe's SKIP/SKIP), not blank."""
    return Case(name=stem, api=api, order=order, problem=problem, problem_reason=reason or Reason.SKIP_BAD_RECORD,
                grad_outputs=() if backward else None)  # fmt: skip


def decode_case(stem: str, api: str, order: int, fwd: Any, bwd: Any) -> Case:
    try:
        if not isinstance(fwd, dict):
            raise RecordError("forward record is not a map")
        args = decode_value(_recorded_dtype_args(api, fwd), "input_args")
        kwargs_raw = fwd.get("input_kwargs", {}) or {}
        if not isinstance(kwargs_raw, dict):
            raise RecordError("input_kwargs is not a map")
        kwargs = {str(k): decode_value(v, f"input_kwargs.{k}") for k, v in kwargs_raw.items()}
        outputs = decode_value(fwd.get("output", []), "output")
        if not isinstance(args, tuple):
            args = (args,)
        if not isinstance(outputs, tuple):
            outputs = (outputs,)
        case = Case(name=stem, api=api, order=order, args=args, kwargs=kwargs, outputs=outputs)
    except NoData as e:
        return unreadable(stem, api, order, clip(str(e)), bwd is not None, Reason.SKIP_NO_DATA)
    except Unsaved as e:
        return unreadable(stem, api, order, clip(str(e)), bwd is not None, Reason.SKIP_INPUTS)
    except RecordError as e:
        return unreadable(stem, api, order, f"bad record: {clip(str(e))}", bwd is not None)
    except RecursionError:
        return unreadable(stem, api, order, "bad record: arguments nested too deeply", bwd is not None)
    return case if bwd is None else _with_backward(case, bwd)


def _recorded_dtype_args(api: str, fwd: dict) -> Any:
    """msprobe writes the dtype of ``x.to(torch.float16)`` as ``{}``: a cast's unrecorded argument is the dtype
    its output was recorded with."""
    raw = fwd.get("input_args", [])
    output = fwd.get("output")
    first = output[0] if isinstance(output, list) and output else output
    if (
        api not in ("Tensor.to", "Tensor.type")
        or not isinstance(raw, list)
        or {} not in raw
        or not isinstance(first, dict)
        or not isinstance(first.get("dtype"), str)
    ):
        return raw
    return [{"type": "torch.dtype", "value": first["dtype"]} if v == {} else v for v in raw]


def _with_backward(case: Case, bwd: Any) -> Case:
    """A decoded forward case with its backward record; a bad backward record makes the case a bad record."""
    if case.problem:
        return case
    try:
        if not isinstance(bwd, dict):
            raise RecordError("backward record is not a map")
        grad_outputs = decode_value(bwd.get("input", []), "backward.input")
        grad_inputs = decode_value(bwd.get("output", []), "backward.output")
    except NoData as e:
        return unreadable(case.name, case.api, case.order, clip(str(e)), True, Reason.SKIP_NO_DATA)
    except Unsaved as e:
        return unreadable(case.name, case.api, case.order, clip(str(e)), True, Reason.SKIP_INPUTS)
    except RecordError as e:
        return unreadable(case.name, case.api, case.order, f"bad record: {clip(str(e))}", True)
    except RecursionError:
        return unreadable(case.name, case.api, case.order, "bad record: arguments nested too deeply", True)
    return replace(case, grad_outputs=_as_tuple(grad_outputs), grad_inputs=_as_tuple(grad_inputs))


def _as_tuple(value: Any) -> tuple | None:
    if value is None or isinstance(value, tuple):
        return value
    return (value,)


def decode_value(raw: Any, where: str) -> Any:
    """Decode one encoded argument (REFERENCE §1); lists and tuples both become tuples."""
    if raw is None:
        return None
    if isinstance(raw, list):
        return tuple(decode_value(v, f"{where}[{i}]") for i, v in enumerate(raw))
    if isinstance(raw, (bool, int, float, str)):
        return raw
    if not isinstance(raw, dict):
        raise RecordError(f"{where}: unexpected {type(raw).__name__}")
    kind = raw.get("type")
    if kind is None:
        raise RecordError(f"{where}: argument has no 'type'")
    if not isinstance(kind, str):
        raise RecordError(f"{where}: 'type' is not a string")
    if kind in TENSOR_TYPES:
        return _decode_tensor(raw, where)
    if kind in DTENSOR_TYPES:  # its local shard, as the rank's kernel saw it, and how the shards make the whole
        return replace(_decode_tensor(raw, where), sharding=decode_sharding(raw, where))
    if kind in UNSAVED_TYPES:
        return _unsaved(raw, kind, where)
    if kind in FAKE_TYPES:
        raise NoData(
            f"no data: nothing to check ({where} is a FakeTensor: DTensor's shape propagation, loss_parallel's)"
        )
    value = raw.get("value")
    if kind in ("int", "float", "bool", "str"):
        return _scalar(kind, value, where)
    if kind in _NUMPY_SCALARS:
        return _scalar(_NUMPY_SCALARS[kind].__name__, value, where)
    if kind in ("NoneType", "None"):
        return None
    if kind == "slice":
        if not isinstance(value, list) or len(value) != 3:
            raise RecordError(f"{where}: slice value must be [start, stop, step]")
        parts = [decode_value(v, f"{where}.value") for v in value]
        if not all(p is None or isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise RecordError(f"{where}: slice bounds must be integers or null")
        return slice(*parts)
    if kind in ("ellipsis", "Ellipsis"):
        return Ellipsis
    if kind == "torch.Size":
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise RecordError(f"{where}: torch.Size value must be a list of integers")
        return torch.Size(value)
    if kind in ("torch.dtype", "mindspore.dtype"):
        return parse_dtype(value, where)
    if kind == "torch.device":
        return DeviceArg(str(value))
    if kind == "torch.memory_format":
        fmt = raw.get("format")
        if fmt not in _MEMORY_FORMATS:
            raise RecordError(f"{where}: unknown memory format {clip(repr(fmt), 60)}")
        return _MEMORY_FORMATS[fmt]
    raise RecordError(f"{where}: unsupported argument type {kind!r}")


def _unsaved(raw: dict, kind: str, where: str) -> TensorSpec:
    """A tensor subclass msprobe saves without data unless it did save some (a file or statistics): Unsaved."""
    spec = _decode_tensor(raw, where)
    if spec.data_name is None and all(v is None for v in vars(spec.stats).values()):
        raise Unsaved(
            f"{where}: {kind.rsplit('.', 1)[-1]} saved by msprobe without data (null statistics, no file): "
            "nothing to rebuild the call from"
        )
    return spec


def _scalar(kind: str, value: Any, where: str) -> Any:
    if kind == "str":
        if not isinstance(value, str):
            raise RecordError(f"{where}: str value is {type(value).__name__}")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise RecordError(f"{where}: bool value is {value!r}")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecordError(f"{where}: int value is {value!r}")
        return value
    number = _number(value)
    if number is None:
        raise RecordError(f"{where}: float value is {value!r}")
    return number


def _number(value: Any) -> float | None:
    """A recorded number; msprobe writes inf/nan as strings or as JSON's Infinity/NaN."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in ("inf", "+inf", "-inf", "nan", "infinity", "-infinity"):
        return float(value)
    return None


def _statistic(value: Any) -> float | None:
    """A recorded statistic; a bool tensor's Max/Min are JSON true/false."""
    return float(value) if isinstance(value, bool) else _number(value)


def parse_dtype(name: Any, where: str) -> torch.dtype:
    if isinstance(name, str):
        if name in _TORCH_DTYPES:
            return _TORCH_DTYPES[name]
        if name in _MINDSPORE_DTYPES:
            return _MINDSPORE_DTYPES[name]
        if name in NAMES:  # a dtype of a newer torch (uint16-64 came in 2.3, float8_e8m0fnu in 2.7)
            raise RecordError(f"{where}: dtype {name} is not in torch {torch.__version__} (a newer torch recorded it)")
    raise RecordError(f"{where}: unknown dtype {name!r}")


def _decode_tensor(raw: dict, where: str) -> TensorSpec:
    dtype = parse_dtype(raw.get("dtype"), f"{where}.dtype")
    shape = raw.get("shape")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise RecordError(f"{where}: shape must be a list of non-negative integers, got {clip(repr(shape), 200)}")
    if _too_many_elements(shape):
        # torch counts elements in int64: no tensor ever had this shape (and its size would overflow a float).
        raise RecordError(
            f"{where}: shape {clip(repr(shape), 200)} has more elements than a tensor can hold (2**63 - 1)"
        )
    stats = Stats(*(_statistic(raw.get(k)) for k in ("Max", "Min", "Mean", "Norm")))
    data_name = raw.get("data_name")
    if data_name is not None and not isinstance(data_name, str):
        raise RecordError(f"{where}: data_name is not a string")
    return TensorSpec(
        dtype=dtype,
        shape=tuple(shape),
        stats=stats,
        requires_grad=raw.get("requires_grad") is True,
        data_name=data_name,
    )


def _too_many_elements(shape: list[int]) -> bool:
    """More elements (or a longer dimension) than int64 counts; stops multiplying once past it."""
    if any(s > MAX_ELEMENTS for s in shape):
        return True
    if 0 in shape:
        return False
    count = 1
    for s in shape:
        count *= s
        if count > MAX_ELEMENTS:
            return True
    return False
