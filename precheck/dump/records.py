"""Read an msprobe L1 ``dump.json`` into ordered, decoded cases.

A case is one forward record paired with its backward record. Everything a worker needs to rebuild and run the
call is in the case (argument specs and file names), so a case can be shipped to another process cheaply and
never carries tensors. A record that cannot be decoded is kept as a case with ``problem`` set: it becomes a SKIP
row instead of stopping the run. This module finds and pairs the records (streaming, flat memory);
precheck.dump.decode turns one record's arguments into specs and values.
"""

from __future__ import annotations

import hashlib
import os
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from precheck.dump import suite_files
from precheck.dump.decode import (
    Case,
    DeviceArg,
    Stats,
    TensorSpec,
    clip,
    decode_case,
    decode_value,
    parse_dtype,
    unreadable,
)
from precheck.dump.index import RecordError, RecordIndex
from precheck.dump.mindspore import MINDSPORE, translate
from precheck.dump.record_names import MAX_NAME, api_of, is_module, replay_key
from precheck.errors import PrecheckError

__all__ = [
    "MAX_NAME",
    "Case",
    "Cases",
    "DeviceArg",
    "Dump",
    "DumpError",
    "RecordError",
    "ends_early",
    "Stats",
    "TensorSpec",
    "decode_value",
    "load_dump",
    "not_replayed",
    "pair_records",
    "parse_dtype",
    "shown_name",
]

FRAMEWORKS = ("pytorch", MINDSPORE)


class DumpError(PrecheckError):
    """The file as a whole is not a usable msprobe dump (reported as one line, exit code 2)."""


@dataclass(frozen=True)
class Dump:
    path: Path
    task: str
    level: str
    framework: str
    cases: Cases
    file: Callable[[], BinaryIO]  # dump.json open: the file that was indexed, or Refused (a link swapped in)
    index: RecordIndex  # where each record lies: a step's collectives read theirs through it (precheck.ranks)
    copies: dict[str, str] | None = None  # a generated suite's data: each name's copy (precheck.dump.suite_files)

    @property
    def data_dir(self) -> Path:
        """Tensor files are looked for beside dump.json, whatever the recording machine's path says."""
        return self.path.parent / "dump_tensor_data"


def load_dump(path: str | os.PathLike, framework: str | None = None, *, through_copies: bool = True) -> Dump:
    """Index dump.json; raise DumpError with a one-line reason when the file is not a usable msprobe dump.
    ``framework`` (pytorch or mindspore) overrides the dump's own ``framework`` field; a MindSpore dump's cases
    are their PyTorch equivalents (precheck.dump.mindspore).

    The file is read once to find where each record lies and to pair forwards with backwards; each case is
    decoded from its bytes when it is used. A gigabyte dump is never held in memory, decoded or not: what stays
    is a name and two byte spans per record.

    A generated suite's copied dump (precheck.dump.suite_files) names its files by their copies, unless
    ``through_copies`` is False: generate copying it again keys its own map by the dump's names."""
    index = RecordIndex.open(path, DumpError)
    task = index.task
    if task not in ("tensor", "statistics"):
        raise DumpError(
            f"{index.path}: not an msprobe dump ('task' is {clip(repr(task), 80)}, expected 'tensor' or 'statistics')"
        )
    if framework not in (None, *FRAMEWORKS):
        raise DumpError(f"{index.path}: framework {clip(repr(framework), 80)} is not one of {', '.join(FRAMEWORKS)}")
    framework = framework or _recorded_framework(index)
    pairing = _Pairing()
    for handle, key in enumerate(index.keys):
        pairing.add(key, handle)
    copies = suite_files.copied_names(index.path)
    renamed = suite_files.through_copies(copies) if copies and through_copies else None
    dialect = translate if framework == MINDSPORE else None
    if renamed is not None:  # the dump's names first, as recorded; then another framework's call translated
        dialect = renamed if dialect is None else (lambda case, translated=dialect: translated(renamed(case)))
    return Dump(path=index.path, task=task, level=index.level, framework=framework,
                cases=Cases(pairing, index.read, dialect), file=index.file, index=index, copies=copies)  # fmt: skip


def ends_early(dump: Dump) -> str | None:
    """Why the dump stops mid-step, or None. msprobe writes a forward record's inputs when the call starts and its
    output when it returns: a last forward record with no output is a call that never returned to the recorder.
    msprobe 26.2 counts such a call as still running, so every later forward is taken for a call inside it and left
    out, while backward records go on: activation checkpointing's recompute (torch.utils.checkpoint stops it by
    raising through a call) leaves a dump whose forwards end there, the rest of the backward recorded, the
    clipping and the optimizer's step lost (make_ckpt_offload_steps.py's FSDP2 step); a process killed mid-call
    leaves the last record so. Only the last forward record is read."""
    keys = dump.index.keys
    last, after = None, 0
    for i in range(len(keys) - 1, -1, -1):
        parts = None if is_module(keys[i]) else replay_key(keys[i])
        if parts is not None and parts[2] == "forward":
            last = i
            break
        after += parts is not None
    if last is None:
        return None
    try:
        record = dump.index.read(last)
    except RecordError:
        return None
    if not isinstance(record, dict) or "output" in record:
        return None
    then = f", only {after} backward records" if after else ""
    return (
        f"the dump ends early: its last forward record, {clip(shown_name(keys[last]), 120)}, has no output, and no "
        f"forward was recorded after it{then} (msprobe 26.2 records no forward once a call raises, as activation "
        "checkpointing's recompute does, torch.utils.checkpoint; a process killed mid-call leaves the same): the "
        "forwards after it are missing"
    )


def _recorded_framework(index: RecordIndex, looked_at: int = 8) -> str:
    """The dump's ``framework`` field; without one (msprobe's own MindSpore fixtures have none), what its first
    records' tensors are: a MindSpore call read as PyTorch's is a SKIP "not supported" for every record."""
    if "framework" in index.header:
        return MINDSPORE if index.header["framework"] == MINDSPORE else "pytorch"
    found = index.first_records_hold((b'"mindspore.Tensor"', b'"torch.Tensor"'), looked_at)
    return MINDSPORE if found == b'"mindspore.Tensor"' else "pytorch"


class _Pairing:
    """Pairs forward and backward records by their stem as keys stream in, in forward dump order; counts the
    Module.* / Cell.* records of an L0 or mix dump (a module is no API to replay) so a run can say it left them
    out. A record is held as a handle (its place in the dump's index, or in a list), never decoded here."""

    def __init__(self) -> None:
        self.stems: list[str] = []
        self.forwards, self.backwards = array("q"), array("q")  # handles per forward slot; -1: none
        self._slots: dict[str, int] = {}
        self._early: dict[str, int] = {}  # backward records that came before their forward
        self.odd: list[str] = []  # malformed keys, kept as SKIP rows at the end
        self.modules = 0  # Module.* / Cell.* records, not replayed

    def add(self, key: str, handle: int) -> None:
        if is_module(key):
            self.modules += 1
            return
        parts = replay_key(key)
        if parts is None:
            self.odd.append(key)
            return
        api, n, kind = parts
        stem = f"{api}.{n}"
        slot = self._slots.get(stem)
        if kind == "forward":
            if slot is None:  # a repeated key keeps its place; the later record replaces the earlier
                slot = self._slots[stem] = len(self.stems)
                self.stems.append(stem)
                self.forwards.append(handle)
                self.backwards.append(-1)
            self.forwards[slot] = handle
            self.backwards[slot] = self._early.pop(stem, -1)
        elif slot is not None:
            self.backwards[slot] = handle
        else:
            self._early[stem] = handle


class Cases(Sequence):
    """The cases of a dump, in forward dump order, each decoded when it is used (malformed keys last)."""

    def __init__(
        self, pairing: _Pairing, records: Callable[[int], Any], dialect: Callable[[Case], Case] | None = None
    ) -> None:
        self._pairing, self._records, self._dialect = pairing, records, dialect

    @property
    def names(self) -> list[str]:
        """Every case's row name, without decoding a record."""
        return self._pairing.stems + [shown_name(key) for key in self._pairing.odd]

    @property
    def module_records(self) -> int:
        """How many module (L0) records the dump holds: they are not cases, and a run says how many it left out."""
        return self._pairing.modules

    def __len__(self) -> int:
        return len(self._pairing.stems) + len(self._pairing.odd)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (list, Cases)) and list(self) == list(other)

    def select(self, indices: Sequence[int]) -> Sequence[Case]:
        """The cases at ``indices``, decoded one at a time as they are used."""
        return _Selection(self, indices)

    __hash__ = None  # type: ignore[assignment]

    def __getitem__(self, i: int) -> Case:  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        case = self._decoded(i)
        return self._dialect(case) if self._dialect else case

    def _decoded(self, i: int) -> Case:
        p = self._pairing
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i >= len(p.stems):
            key = p.odd[i - len(p.stems)]
            return Case(name=shown_name(key), api=shown_name(key), order=i, problem=_key_problem(key))
        stem = p.stems[i]
        api = api_of(stem)
        try:
            fwd = self._records(p.forwards[i])
            bwd = self._records(p.backwards[i]) if p.backwards[i] >= 0 else None
        except RecordError as e:
            return unreadable(stem, api, i, f"bad record: {clip(str(e))}", p.backwards[i] >= 0)
        return decode_case(stem, api, i, fwd, bwd)


class _Selection(Sequence):
    def __init__(self, cases: Cases, indices: Sequence[int]) -> None:
        self._cases, self._indices = cases, indices

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, i: int) -> Case:  # type: ignore[override]
        return self._cases[self._indices[i]]

    @property
    def names(self) -> list[str]:
        """Every selected case's row name, without decoding a record."""
        names = self._cases.names
        return [names[i] for i in self._indices]


def pair_records(data: dict[str, Any] | Iterable[tuple[str, Any]], framework: str = "pytorch") -> Cases:
    """The cases of a ``data`` map already in memory (a dump.json loaded by other means)."""
    records: list[Any] = []
    pairing = _Pairing()
    for key, record in data.items() if isinstance(data, dict) else data:
        records.append(record)
        pairing.add(key, len(records) - 1)
    return Cases(pairing, records.__getitem__, translate if framework == MINDSPORE else None)


def not_replayed(modules: int) -> str:
    """The line a run and ``apis --check`` print for a dump's module (L0) records: a ``level: mix`` dump can hold
    as many as its API records, and leaving half a dump out without a word reads as a clean run of all of it."""
    return (
        f"{modules} module (L0) record{'s are' if modules != 1 else ' is'} not replayed "
        "(precheck compare compares them)"
    )


def shown_name(key: str) -> str:
    """The row name of a malformed record key: at most about MAX_NAME characters (a longer key keeps its start,
    its length and a digest, so two long keys stay apart). Control characters are kept: every output escapes
    them (precheck.escape), once."""
    if len(key) <= MAX_NAME:
        return key
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{key[: MAX_NAME - 48]}... ({len(key)} characters, sha256 {digest})"


def _key_problem(key: str) -> str:
    if len(key) > MAX_NAME:
        return f"malformed record name: {len(key)} characters long (at most {MAX_NAME})"
    return "malformed record name (expected Prefix.api.N.forward)"
