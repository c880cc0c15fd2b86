"""Turn decoded argument specs into real tensors, from the files a tensor-mode dump saved.

Every failure is an InputError whose message names the file and what is wrong with it, so the runner can turn it
into a SKIP row. Files are loaded without ever executing pickled code: a ``.pt`` file's pickle is only replayed with
stand-ins (precheck.dump.ptfile), a ``.npy`` file is read without pickles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from api_registry import ApiEntry
from precheck.core.reasons import Reason
from precheck.dump import safe_files
from precheck.dump.ptfile import NotAnArchive, PtError, inspect, read
from precheck.dump.records import Case, TensorSpec
from precheck.dump.safe_files import DataFile, Missing, Refused, load_npy, open_file, reason, shown
from precheck.errors import PrecheckError
from precheck.inputs.synth import rng_for, synthesize
from precheck.inputs.unwritten import unwritten
from precheck.walk import flatten, map_placed

STATISTICS_ONLY = "statistics mode: inputs must be regenerated"


class InputError(PrecheckError):
    """An argument cannot be rebuilt; the message is the SKIP reason, ``reason`` its code."""

    def __init__(self, message: str, reason: Reason = Reason.SKIP_INPUTS) -> None:
        super().__init__(message)
        self.reason = reason


def _refused(e: Refused) -> InputError:
    return InputError(str(e), Reason.SKIP_MISSING_FILE if isinstance(e, Missing) else Reason.SKIP_INPUTS)


def map_specs(tree: Any, fn: Callable[[TensorSpec], Any]) -> Any:
    """Apply ``fn`` to every TensorSpec of a decoded argument tree, keeping the tree's shape."""
    return map_specs_at(tree, lambda spec, where: fn(spec), "")


def map_specs_at(tree: Any, fn: Callable[[TensorSpec, str], Any], where: str) -> Any:
    """``map_specs`` that also tells ``fn`` where the spec sits (``input_args[1]``, ``input_kwargs.target``)."""
    return map_placed(tree, lambda leaf, place: fn(leaf, place) if isinstance(leaf, TensorSpec) else leaf, where)


def iter_specs(tree: Any) -> Iterator[TensorSpec]:
    """TensorSpecs of a tree in argument order (positional first, then keyword, depth first)."""
    return (leaf for leaf in flatten(tree) if isinstance(leaf, TensorSpec))


def resolve(data_dir: Path, data_name: str) -> Path:
    """The file of ``data_name`` inside ``data_dir`` (precheck.dump.safe_files.resolve: the check run_ut and
    compare share); InputError says why not."""
    try:
        return safe_files.resolve(data_dir, data_name)
    except Refused as e:
        raise _refused(e) from None


def _load_problem(e: BaseException) -> str:
    """What is wrong with a file its reader failed on in a way of its own: numpy on a broken ``.npy``, zipfile on
    a ``.pt`` archive that changed or is corrupt past what precheck.dump.ptfile checks (an encrypted entry raises
    RuntimeError, whose first sentence is the reason)."""
    first = reason(e).split(". ")[0]  # the first sentence; the rest is advice
    return first if isinstance(e, RuntimeError) else f"not a .pt file torch can read ({type(e).__name__}: {first})"


def load_tensor(
    spec: TensorSpec, data_dir: Path, max_bytes: int | None = None, notes: list[str] | None = None
) -> torch.Tensor:
    """Load the saved data of ``spec`` and check it against the recorded shape and dtype; a ``.pt`` whose storage
    would need more than ``max_bytes`` is refused before it is read. A ``.npy`` of a wider float dtype (msprobe
    widens bf16, which numpy lacks) is rounded to the recorded dtype; ``notes`` is told when that changed a
    value (the file did not hold what the recorded dtype can)."""
    if spec.data_name is None:
        raise InputError(STATISTICS_ONLY)  # reached only by callers that load files and nothing else
    name = shown(spec.data_name)
    try:
        data = open_file(data_dir, spec.data_name)
    except Refused as e:
        raise _refused(e) from None
    suffix = data.path.suffix.lower()
    try:
        with data:
            tensor = _read(data, spec, max_bytes)
    except InputError:
        raise
    except Exception as e:  # any loader failure is this file's problem, reported in one line
        raise InputError(f"{name}: unreadable: {_load_problem(e)}") from None
    if tuple(tensor.shape) != spec.shape:
        raise InputError(f"{name}: shape {tuple(tensor.shape)} does not match the recorded {spec.shape}")
    if tensor.dtype != spec.dtype:
        # .npy cannot hold bf16, so msprobe stores it widened; any other dtype change means a wrong file.
        if not (suffix == ".npy" and tensor.dtype.is_floating_point and spec.dtype.is_floating_point):
            raise InputError(f"{name}: dtype {tensor.dtype} does not match the recorded {spec.dtype}")
        narrowed = tensor.to(spec.dtype)
        same = torch.isclose(narrowed.to(tensor.dtype), tensor, rtol=0, atol=0, equal_nan=True)
        changed = int((~same).sum())
        if changed and notes is not None:
            notes.append(f"{name}: {changed} value(s) of the {tensor.dtype} file are not {spec.dtype}, rounded")
        tensor = narrowed
    return tensor.detach()


def _read(data: DataFile, spec: TensorSpec, max_bytes: int | None) -> torch.Tensor:
    """The tensor of the open file ``data``, by its suffix: only through its descriptor, never by name again."""
    name = shown(spec.data_name or "")
    suffix = data.path.suffix.lower()
    if suffix == ".pt":
        return _load_pt(data, spec, max_bytes)
    if suffix != ".npy":
        raise InputError(f"{name}: unknown file type {suffix!r} (expected .pt or .npy)")
    try:
        array = load_npy(data)  # its header checked first: a small file declaring a huge array never allocates it
    except ValueError as e:
        raise InputError(f"{name}: unreadable: {reason(e)}") from None
    if array.shape != spec.shape:
        raise InputError(f"{name}: shape {array.shape} does not match the recorded {spec.shape}")
    # torch only takes native byte order; a big-endian file is still a valid file.
    return torch.from_numpy(array.astype(array.dtype.newbyteorder("="), copy=False))


def _load_pt(data: DataFile, spec: TensorSpec, max_bytes: int | None) -> torch.Tensor:
    """A ``.pt`` file read only once its archive declares one dense tensor of the recorded dtype and shape whose
    storage is about what the tensor reaches and within ``max_bytes`` (precheck.dump.ptfile says why); its bytes
    become the tensor without torch's loader."""
    try:
        stored = inspect(data.file, max_bytes=max_bytes)
    except PtError as e:
        verdict = "unreadable:" if isinstance(e, NotAnArchive) else "refused,"
        raise InputError(f"{shown(spec.data_name or data.path.name)}: {verdict} {e}") from None
    if stored.dtype != spec.dtype:
        raise InputError(
            f"{shown(spec.data_name or '')}: dtype {stored.dtype} does not match the recorded {spec.dtype}"
        )
    if stored.shape != spec.shape:
        raise InputError(
            f"{shown(spec.data_name or '')}: shape {stored.shape} does not match the recorded {spec.shape}"
        )
    return read(data.file, stored)


def load_tree(tree: Any, data_dir: Path) -> Any:
    """Replace every TensorSpec of a decoded tree by its loaded tensor."""
    return map_specs(tree, lambda spec: load_tensor(spec, data_dir))


class InputBuilder:
    """Rebuilds the tensors of one case: from the dump's files, or generated from the recorded statistics
    where no file was saved (statistics mode) or where ``force_random`` asks for it.

    Generated tensors are seeded by (seed, case name, argument place), never by a stream shared across APIs.
    ``int_floors`` maps an argument place to the lowest valid value of its non-sentinel entries; ``long_args``
    names the places whose narrower integers are widened to int64 (the CPU takes class ids only as int64);
    ``true_counts`` gives generated bool masks at those places the count of True the recorded output implies;
    ``implied`` gives the values the recorded outputs fix at those places (tensor_split's split points).
    """

    def __init__(
        self,
        data_dir: Path,
        case_name: str,
        *,
        seed: int = 0,
        force_random: bool = False,
        int_floors: dict[str, int] | None = None,
        long_args: frozenset[str] = frozenset(),
        true_counts: dict[str, int] | None = None,
        implied: dict[str, torch.Tensor] | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.max_bytes = max_bytes  # a file's storage above this is refused before it is read
        self.case_name = case_name
        self.seed = seed
        self.force_random = force_random
        self.int_floors = int_floors or {}
        self.long_args = long_args
        self.true_counts = true_counts or {}
        self.implied = implied or {}
        self.generated = 0
        self.notes: list[str] = []
        self.roundings: list[str] = []  # files whose values the recorded dtype could not hold (load_tensor)
        self.unwritten: list[str] = []  # inputs whose statistics read as memory no call wrote (inputs/unwritten.py)
        self.tensors: dict[str, torch.Tensor] = {}  # every tensor built, by argument place (error data, repro)

    def build(self, tree: Any, where: str) -> Any:
        return map_specs_at(tree, self._tensor, where)

    def load(self, tree: Any, where: str) -> Any:
        """Saved data only (recorded outputs are never generated)."""
        return map_specs_at(
            tree, lambda spec, _: load_tensor(spec, self.data_dir, self.max_bytes, self.roundings), where
        )

    def _tensor(self, spec: TensorSpec, where: str) -> torch.Tensor:
        tensor = self._make(spec, where)
        why = "" if where.endswith(".out") else unwritten(spec)  # an out= buffer is written, never read
        if why:
            self.unwritten.append(f"{where}: {why}")
        if where in self.long_args and tensor.dtype in (torch.int8, torch.int16, torch.int32):
            self.notes.append(f"{where}: {tensor.dtype} widened to int64")
            tensor = tensor.long()
        self.tensors[where] = tensor
        return tensor

    def _make(self, spec: TensorSpec, where: str) -> torch.Tensor:
        if spec.data_name is not None and not self.force_random:
            return load_tensor(spec, self.data_dir, self.max_bytes, self.roundings)
        implied = self.implied.get(where)
        if implied is not None and implied.numel() == spec.numel:
            self.generated += 1
            self.notes.append(f"{where}: read from the recorded outputs' shapes")
            return implied.to(spec.dtype).reshape(spec.shape)
        try:
            tensor, note = synthesize(
                spec, rng_for(self.seed, self.case_name, where), self.int_floors.get(where), self.true_counts.get(where)
            )
        except Exception as e:  # statistics no generator foresaw: this record's SKIP, never the run's end
            raise InputError(
                f"{where}: cannot generate from statistics {spec.stats}: {type(e).__name__}: {e}"
            ) from None
        self.generated += 1
        if note:
            self.notes.append(f"{where}: {note}")
        return tensor

    def describe(self) -> str:
        """What the Message says about generated inputs: the seed that rebuilds them, and any fallback."""
        if not self.generated:
            return ""
        return "; ".join([f"inputs generated from statistics (seed {self.seed})", *self.notes])


def builder_for(
    entry: ApiEntry,
    case: Case,
    data_dir: Path,
    *,
    seed: int = 0,
    force_random: bool = False,
    max_bytes: int | None = None,
) -> InputBuilder:
    """The builder of one case, with its API's argument fix-ups (class ids, int64 widening, mask counts, values
    the outputs imply)."""
    counts = entry.mask_counts(case.args, case.outputs) if entry.mask_counts else {}
    implied = entry.implied_values(case.args, case.kwargs, case.outputs) if entry.implied_values else {}
    return InputBuilder(
        data_dir,
        case.name,
        seed=seed,
        force_random=force_random,
        int_floors=entry.int_floors,
        long_args=entry.long_args,
        true_counts=counts,
        implied=implied,
        max_bytes=max_bytes,
    )
