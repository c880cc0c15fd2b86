"""Read an msprobe L1 ``dump.json`` into ordered, decoded cases.

A case is one forward record paired with its backward record. Everything a worker needs to rebuild and run the
call is in the case (argument specs and file names), so a case can be shipped to another process cheaply and
never carries tensors. A record that cannot be decoded is kept as a case with ``problem`` set: it becomes a SKIP
row instead of stopping the run. This module finds and pairs the records (streaming, flat memory);
precheck.dump.decode turns one record's arguments into specs and values.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precheck.dump.decode import (
    Case,
    DeviceArg,
    RecordError,
    Stats,
    TensorSpec,
    clip,
    decode_case,
    decode_value,
    parse_dtype,
)
from precheck.dump.jsonstream import JsonStream, digits_problem, read_file
from precheck.dump.mindspore import MINDSPORE, translate
from precheck.errors import PrecheckError

__all__ = [
    "MAX_NAME",
    "Case",
    "Cases",
    "DeviceArg",
    "Dump",
    "DumpError",
    "RecordError",
    "Stats",
    "TensorSpec",
    "decode_value",
    "load_dump",
    "not_replayed",
    "pair_records",
    "parse_dtype",
    "shown_name",
]

_RECORD_KEY = re.compile(r"(?P<api>[A-Za-z_][\w]*(?:\.[\w]+)+)\.(?P<n>[0-9]+)\.(?P<kind>forward|backward)")  # fullmatch
FRAMEWORKS = ("pytorch", MINDSPORE)
MAX_NAME = 256  # characters of a record key (msprobe's longest are under 100); longer keys are malformed


class DumpError(PrecheckError):
    """The file as a whole is not a usable msprobe dump (reported as one line, exit code 2)."""


@dataclass(frozen=True)
class Dump:
    path: Path
    task: str
    level: str
    framework: str
    cases: Cases

    @property
    def data_dir(self) -> Path:
        """Tensor files are looked for beside dump.json, whatever the recording machine's path says."""
        return self.path.parent / "dump_tensor_data"


def load_dump(path: str | os.PathLike, framework: str | None = None) -> Dump:
    """Index dump.json; raise DumpError with a one-line reason when the file is not a usable msprobe dump.
    ``framework`` (pytorch or mindspore) overrides the dump's own ``framework`` field; a MindSpore dump's cases
    are their PyTorch equivalents (precheck.dump.mindspore).

    The file is read once to find where each record lies and to pair forwards with backwards; each case is
    decoded from its bytes when it is used. A gigabyte dump is never held in memory, decoded or not: what stays
    is a name and two byte spans per record."""
    path = Path(path)
    if path.is_dir():
        path = path / "dump.json"
    doc, pairing = read_file(path, _stream, DumpError)
    if doc is None or pairing is None:
        raise DumpError(f"{path}: not an msprobe dump (no 'data' map at the top level)")
    task = doc.get("task")
    if task not in ("tensor", "statistics"):
        raise DumpError(
            f"{path}: not an msprobe dump ('task' is {clip(repr(task), 80)}, expected 'tensor' or 'statistics')"
        )
    if framework not in (None, *FRAMEWORKS):
        raise DumpError(f"{path}: framework {clip(repr(framework), 80)} is not one of {', '.join(FRAMEWORKS)}")
    framework = framework or _recorded_framework(doc, path, pairing.spans)
    dialect = translate if framework == MINDSPORE else None
    return Dump(
        path=path,
        task=task,
        level=str(doc.get("level", "")),
        framework=framework,
        cases=Cases(pairing, _FileRecords(path, pairing.spans), dialect),
    )


def _recorded_framework(doc: dict, path: Path, spans: _Spans, looked_at: int = 8) -> str:
    """The dump's ``framework`` field; without one (msprobe's own MindSpore fixtures have none), what its first
    records' tensors are: a MindSpore call read as PyTorch's is a SKIP "not supported" for every record."""
    if "framework" in doc:
        return MINDSPORE if doc["framework"] == MINDSPORE else "pytorch"
    with open(path, "rb") as f:
        for start, end in itertools.islice(zip(spans.starts, spans.ends, strict=True), looked_at):
            f.seek(start)
            raw = f.read(min(end - start, 2**20))
            if b'"mindspore.Tensor"' in raw:
                return MINDSPORE
            if b'"torch.Tensor"' in raw:
                break
    return "pytorch"


def _stream(js: JsonStream) -> tuple[dict | None, _Pairing | None]:
    """The top-level fields of a dump and its records' pairing, the ``data`` map indexed record by record.
    Only the short fields a dump is judged by are decoded; anything else is read past, whatever its size."""
    if js.sniff() != "{":
        return None, None  # a JSON document that is not an object is not a dump: no need to read it
    doc: dict[str, Any] = {}
    pairing = None
    for key in js.keys("a top-level field name"):
        if key == "data" and js.peek() != "{":
            return doc, None  # not a dump, however long the rest
        if key == "data":
            pairing = _Pairing()
            for name in js.keys("a record name"):
                pairing.add(name, pairing.spans.add(*js.skip()))
        elif key in _HEADER:
            doc[key] = js.value(f"the {key!r} field")
        else:
            js.skip()
    if js.peek() != "":
        raise js.error("extra data after the document")
    return doc, pairing


_HEADER = ("task", "level", "framework")


class _Spans:
    """Byte spans of records in the file, 16 bytes each."""

    def __init__(self) -> None:
        self.starts, self.ends = array("q"), array("q")

    def add(self, start: int, end: int) -> int:
        self.starts.append(start)
        self.ends.append(end)
        return len(self.starts) - 1


class _Pairing:
    """Pairs forward and backward records by their stem as keys stream in, in forward dump order; counts the
    Module.* / Cell.* records of an L0 or mix dump (a module is no API to replay) so a run can say it left them
    out. A record is held as a handle (its byte span's index, or its place in a list), never
    decoded here."""

    def __init__(self) -> None:
        self.spans = _Spans()
        self.stems: list[str] = []
        self.forwards, self.backwards = array("q"), array("q")  # handles per forward slot; -1: none
        self._slots: dict[str, int] = {}
        self._early: dict[str, int] = {}  # backward records that came before their forward
        self.odd: list[str] = []  # malformed keys, kept as SKIP rows at the end
        self.modules = 0  # Module.* / Cell.* records, not replayed

    def add(self, key: str, handle: int) -> None:
        if key.startswith("Module.") or key.startswith("Cell."):
            self.modules += 1
            return
        # fullmatch: `$` would also match before a trailing newline, and "X.0.forward\n" would replace X.0.
        m = _RECORD_KEY.fullmatch(key) if len(key) <= MAX_NAME else None
        if m is None:
            self.odd.append(key)
            return
        stem = f"{m['api']}.{m['n']}"
        slot = self._slots.get(stem)
        if m["kind"] == "forward":
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


class _FileRecords:
    """Records read back from their byte spans in dump.json, each decoded when its case is used."""

    def __init__(self, path: Path, spans: _Spans) -> None:
        self.path, self.spans = path, spans

    def __call__(self, handle: int) -> Any:
        start, end = self.spans.starts[handle], self.spans.ends[handle]
        with open(self.path, "rb") as f:
            f.seek(start)
            raw = f.read(end - start)
        try:
            text = raw.decode("utf-8")
            return json.loads(text)
        except UnicodeDecodeError as e:
            raise RecordError(f"record is not UTF-8 text (byte {start + e.start})") from None
        except json.JSONDecodeError as e:
            at = start + len(text[: e.pos].encode("utf-8"))
            raise RecordError(f"record is not valid JSON: {e.msg} (byte {at})") from None
        except RecursionError:
            raise RecordError("record nested too deeply for the JSON parser") from None
        except ValueError as e:
            raise RecordError(f"record holds {digits_problem(e)}") from None


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
        api = stem.rsplit(".", 1)[0]
        try:
            fwd = self._records(p.forwards[i])
            bwd = self._records(p.backwards[i]) if p.backwards[i] >= 0 else None
        except RecordError as e:
            return Case(name=stem, api=api, order=i, problem=f"bad record: {clip(str(e))}")
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
