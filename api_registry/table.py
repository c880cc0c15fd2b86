"""The table of APIs precheck can run, built from the installed torch (see the package's docstring)."""

from __future__ import annotations

import functools
import gc
import importlib
import importlib.util
import inspect
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from api_registry import catalogue, npu
from api_registry.calls import arg
from api_registry.canonical import Canonical, canonical_for
from api_registry.plugins import plugin_entries
from api_registry.randomness import RandomCheck, randomness_of

# (recorded args, recorded outputs) -> {argument place: count of True}
MaskCounts = Callable[[Any, Any], dict[str, int]]
# (recorded args, recorded kwargs, recorded outputs) -> {argument place: the values the outputs imply}
ImpliedValues = Callable[[tuple, dict, Any], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class ApiEntry:
    """How to run one API and what the grader needs to know about it."""

    name: str
    func: Callable[..., Any]
    standard: str
    inplace: bool = False
    # Returns a reason when this particular call draws random numbers (dropout only does when training).
    randomness: RandomCheck | None = None
    # Runs the golden side instead of ``func`` where ``func`` itself would round (``Tensor.half`` and friends).
    golden: Callable[..., Any] | None = None
    # Integer arguments whose negative Min is a sentinel, not a range (argument place -> lowest valid value):
    # generated cross-entropy targets are class ids or ignore_index, never -5.
    int_floors: dict[str, int] = field(default_factory=dict)
    # Integer arguments the CPU only takes as int64 (an NPU records int32 class ids): widened on both sides.
    long_args: frozenset[str] = frozenset()
    # Bool masks whose count of True sets the output's length, read from the recorded outputs (argument place ->
    # count): msprobe records no share of True for a bool tensor, so a generated mask gets the recorded count.
    mask_counts: MaskCounts | None = None
    # Integer arguments whose values the recorded outputs' shapes fix (tensor_split's split points): generated from
    # statistics they would split elsewhere, so a statistics dump's call gets the values its outputs imply.
    implied_values: ImpliedValues | None = None
    # Rewrites each side's outputs where two correct runs may differ (tied sort indices, eigenvector signs).
    canonical: Canonical | None = None
    # The result may differ from run to run on an accelerator (atomic accumulation): said in the message.
    nondeterministic: bool = False
    # msprobe records torch.linalg.svd as Torch.svd, like torch.svd: the call whose outputs have the recorded
    # shapes is the one that was made (check.py tries this entry when ``func``'s outputs do not fit).
    alternate: ApiEntry | None = None
    # Only this kind of device runs the real op (NPU fused ops); elsewhere the recorded outputs are the target.
    needs_device: str | None = None

    def random_reason(self, args: tuple, kwargs: dict) -> str | None:
        return self.randomness(args, kwargs) if self.randomness else None

    def writes_input(self, args: tuple, kwargs: dict) -> bool:
        """Whether this call modifies its input: an in-place method (``add_``, ``__iadd__``) or a functional
        called with ``inplace=True`` by keyword or by position (``F.relu(x, True)``, every torchvision ResNet). Such
        a call is replayed on a copy of its recorded input, since autograd refuses to modify a leaf that needs a
        gradient."""
        if self.inplace or kwargs.get("inplace") is True:
            return True
        place = _inplace_position(self.func)
        return place is not None and place < len(args) and args[place] is True


@functools.cache
def _inplace_position(func: Callable[..., Any]) -> int | None:
    """The position of a function's ``inplace`` parameter (``F.dropout``'s is 3); None where it has none or
    its signature cannot be read (a C builtin)."""
    try:
        names = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return None
    return names.index("inplace") if "inplace" in names else None


def _raise_to_double(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """Golden of a cast to floating point: float64, the point of the golden is never to round; an integer or bool
    tensor's values too (exact below 2^53), so that the golden is of the float kind the target is."""
    return self if self.is_complex() else self.double()


_TARGET_IS_CLASS_ID = {"input_args[1]": 0, "input_kwargs.target": 0}
_INT_FLOORS = {"Functional.cross_entropy": _TARGET_IS_CLASS_ID, "Functional.nll_loss": _TARGET_IS_CLASS_ID}
_TARGET = frozenset({"input_args[1]", "input_kwargs.target"})
_LONG_ARGS = {
    **{
        f"Functional.{n}": _TARGET for n in ("cross_entropy", "nll_loss", "multi_margin_loss", "multilabel_margin_loss")
    },
    "Functional.one_hot": frozenset({"input_args[0]", "input_kwargs.tensor"}),
    "Torch.take": frozenset({"input_args[1]", "input_kwargs.index"}),
    "Tensor.take": frozenset({"input_args[1]", "input_kwargs.index"}),
}


def _rows_selected(whole_shape: bool) -> MaskCounts:
    """``x[mask]`` (mask over x's leading dimensions) and ``masked_select(x, mask)`` (mask shaped like x): the
    output has one row per True."""

    def counts(args: Any, outputs: Any) -> dict[str, int]:
        source, mask = (list(args) + [None, None])[:2]
        out = outputs[0] if isinstance(outputs, (list, tuple)) and outputs else None
        if getattr(mask, "dtype", None) != torch.bool or not all(hasattr(t, "shape") for t in (source, out)):
            return {}
        mask_shape, source_shape = tuple(mask.shape), tuple(source.shape)
        fits = mask_shape == source_shape if whole_shape else mask_shape == source_shape[: len(mask_shape)]
        return {"input_args[1]": out.shape[0]} if fits and len(out.shape) else {}

    return counts


_MASK_COUNTS = {
    "Tensor.__getitem__": _rows_selected(False),
    "Torch.masked_select": _rows_selected(True),
    "Tensor.masked_select": _rows_selected(True),
}


def _split_points(args: tuple, kwargs: dict, outputs: Any) -> dict[str, torch.Tensor]:
    """``tensor_split`` by a 1-D tensor of indices: the indices are where the recorded outputs start along dim,
    their cumulative lengths, whenever the outputs cover the input once (any indices that split so, unsorted or
    past the end included, give these outputs). A draw with the recorded Max/Min puts them in another order."""
    where = "input_args[1]" if len(args) > 1 else "input_kwargs.tensor_indices_or_sections"
    source, points = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "tensor_indices_or_sections")
    dim = arg(args, kwargs, 2, "dim", 0)
    if not (isinstance(dim, int) and all(hasattr(t, "shape") for t in (source, points)) and len(points.shape) == 1):
        return {}
    rank = len(source.shape)
    pieces = [o for o in outputs if hasattr(o, "shape") and len(o.shape) == rank] if rank else []
    if not -rank <= dim < rank or len(pieces) != points.shape[0] + 1:
        return {}
    ends = list(itertools.accumulate(o.shape[dim] for o in pieces))
    return {where: torch.tensor(ends[:-1], dtype=torch.int64)} if ends[-1] == source.shape[dim] else {}


_IMPLIED_VALUES = {"Torch.tensor_split": _split_points, "Tensor.tensor_split": _split_points}
_GOLDEN = {f"Tensor.{n}": _raise_to_double for n in ("float", "half", "bfloat16", "double")}


def _is_function(obj: Any) -> bool:
    """A function an API record can name: not a class, and not a typing construct a module imported for its
    annotations (``torch.nn.functional.Optional`` is "callable" only to raise TypeError)."""
    return callable(obj) and not isinstance(obj, type) and type(obj).__module__ not in _TYPING


_TYPING = frozenset({"typing", "typing_extensions"})


def _resolve(root: Any, dotted: str) -> Any | None:
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if _is_function(obj) else None


def _is_inplace(name: str) -> bool:
    if name.startswith("__"):
        return name == "__setitem__" or name.startswith("__i") and name != "__invert__"
    return name.endswith("_")


def _public(root: Any, prefix: str = "") -> list[str]:
    """The public function names of a module or class, as dump names spell them (``linalg.inv``)."""
    return [prefix + n for n in dir(root) if not n.startswith("_") and _is_function(getattr(root, n, None))]


def _candidates() -> dict[str, tuple[Any, list[str]]]:
    """Per dump prefix: the object names resolve on, and every name it can run."""
    torch_names = (
        _public(torch._C._VariableFunctions)
        + catalogue.TORCH_PYTHON
        + [n for sub in ("linalg", "fft", "special") for n in _public(getattr(torch, sub), sub + ".")]
    )
    return {
        "Functional": (F, _public(F)),
        "Torch": (torch, torch_names),
        "Tensor": (torch.Tensor, _public(torch.Tensor) + catalogue.TENSOR_DUNDERS.split()),
        "VF": (torch._VF, _public(torch._C._VariableFunctions)),
    }


def _entry(key: str, prefix: str, base: str, func: Callable[..., Any]) -> ApiEntry:
    return ApiEntry(
        name=key,
        func=func,
        standard=catalogue.class_of(prefix, base),
        inplace=_is_inplace(base),
        randomness=randomness_of(key, base),
        golden=_GOLDEN.get(key),
        int_floors=_INT_FLOORS.get(key, {}),
        long_args=_LONG_ARGS.get(key, frozenset()),
        mask_counts=_MASK_COUNTS.get(key),
        implied_values=_IMPLIED_VALUES.get(key),
        canonical=canonical_for(base),
        nondeterministic=base.rstrip("_") in catalogue.NONDETERMINISTIC,
    )


@functools.lru_cache(maxsize=1)
def registry() -> dict[str, ApiEntry]:
    """Every supported dump name of the Functional, Torch, Tensor and VF prefixes mapped to its entry, built
    once per process (ATen names are resolved on first use: there are thousands)."""
    # Thousands of new objects would trigger full collections over torch's million: 85 ms of a 100 ms build.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _build()
    finally:
        if collecting:
            gc.enable()


def _build() -> dict[str, ApiEntry]:
    table: dict[str, ApiEntry] = {}
    for prefix, (root, names) in _candidates().items():
        for name in names:
            key = f"{prefix}.{name}"
            if key in table or catalogue.denied(prefix, name):
                continue
            func = _resolve(root, name)
            if func is not None:
                table[key] = _entry(key, prefix, name, func)
    for name in _public(torch.linalg):
        key = f"Torch.{name}"
        linalg = _entry(key, "Torch", f"linalg.{name}", getattr(torch.linalg, name))
        table[key] = ApiEntry(**{**table[key].__dict__, "alternate": linalg}) if key in table else linalg
    table.update(_npu_entries())
    table.update(
        {name: ApiEntry(name=name, func=func, standard=catalogue.OTHER) for name, func in plugin_entries().items()}
    )
    return table


def _npu_entries() -> dict[str, ApiEntry]:
    """NPU fused ops: the golden is always the CPU reference; the target is torch_npu's op where it is installed."""
    torch_npu = importlib.import_module("torch_npu") if importlib.util.find_spec("torch_npu") else None
    table = {}
    for name, reference in npu.REFERENCES.items():
        standard = catalogue.NPU[name]
        key = f"NPU.{name}"
        table[key] = ApiEntry(
            name=key,
            func=getattr(torch_npu, name, reference),
            standard=standard,
            golden=reference,
            randomness=randomness_of(key, name),
            canonical=canonical_for(name),
            needs_device="npu",
        )
    return table


@functools.lru_cache(maxsize=1)
def aten_names() -> frozenset[str]:
    """``add.Tensor``, ``add_.Scalar``, ``sum.default`` ...: every ATen operator overload this torch has."""
    names = set()
    for qualified in torch._C._dispatch_get_all_op_names():
        if qualified.startswith("aten::"):
            op, _, overload = qualified[len("aten::") :].partition(".")
            names.add(f"{op}.{overload or 'default'}")
    return frozenset(names)


@functools.cache
def _aten(key: str) -> ApiEntry | None:
    name = key[len("Aten.") :]
    if name not in aten_names() or catalogue.denied("Aten", name.partition(".")[0]):
        return None
    op, _, overload = name.partition(".")
    try:
        func = getattr(getattr(torch.ops.aten, op), overload)
    except (AttributeError, RuntimeError):
        return None
    entry = _entry(key, "Aten", op, func)
    writes_out = overload == "out" or overload.endswith("_out")
    return ApiEntry(**{**entry.__dict__, "inplace": entry.inplace or writes_out})


def lookup(api: str) -> ApiEntry | None:
    """The entry of a dump API name such as ``Tensor.__add__`` or ``Aten.add.Tensor``; None when precheck does
    not support it (``why_unsupported`` says why)."""
    if api.startswith("Aten."):
        return _aten(api)
    return registry().get(api)


def why_unsupported(api: str) -> str:
    """The SKIP reason of a dump name with no entry: what it would need that a pre-check cannot give it."""
    prefix = api.partition(".")[0]
    if prefix in ("Distributed", "MindSpeed"):
        return (
            f"{prefix.lower()} op {api}: needs a process group and its peer ranks, which a pre-check of one "
            "process does not have"
        )
    if prefix == "NPU":
        return (
            f"NPU op {api}: no CPU reference implementation (precheck has references of "
            f"{len(npu.REFERENCES)} fused ops: precheck apis lists them)"
        )
    return f"not supported: {api}"
