"""One streaming index of an msprobe ``dump.json``, the only reader of the file: run_ut's cases
(precheck.dump.records), compare's records (precheck.compare.entries) and the report's recorded inputs
(precheck.report.recorded) all read through it, so a dump is judged, and a broken record worded, the same way
by each.

The file is streamed once (precheck.dump.jsonstream): the header fields are decoded, and every record is kept as
its name and its byte span (flat memory, however large the dump). A record is decoded from its own bytes when it
is used, so a record the parser cannot take costs only itself. Torch-free: compare and report import it.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Collection
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from precheck.dump.jsonstream import JsonStream, digits_problem, read_file
from precheck.dump.safe_files import Refused, open_regular

if TYPE_CHECKING:
    from typing import Self
from precheck.core.older_python import zip_strict

# the top-level fields decoded (``partial``: why a recording stops short, precheck's); others are read past
HEADER = ("task", "level", "framework", "partial")
SNIFFED = 1 << 20  # bytes of a record looked at by first_records_hold


class RecordError(Exception):
    """One record cannot be decoded; its case is reported as SKIP with this message."""


class RecordIndex:
    """Where each record of a dump.json lies; records are decoded one at a time by :meth:`read`."""

    def __init__(
        self,
        path: Path,
        error: type[Exception],
        identity: tuple[int, int],
        found: tuple[dict[str, Any], list[str], array, array],
    ) -> None:
        self.path, self.error, self._identity = path, error, identity
        self.header, self.keys, self._starts, self._ends = found

    @classmethod
    def open(cls, path: str | os.PathLike, error: type[Exception]) -> Self:
        """Index a dump.json (or the folder holding it). Every reason it is no dump (missing, not a regular file,
        not JSON, extra data after the document, no ``data`` map) is one line in ``error`` naming the file."""
        path = Path(path)
        if path.is_dir():
            path = path / "dump.json"
        identity, found = read_file(path, lambda js: (_identity(js.f), _walk(js)), error)
        if found is None:
            raise error(f"{path}: not an msprobe dump (no 'data' map at the top level)")
        return cls(path, error, identity, found)

    @property
    def task(self) -> Any:
        return self.header.get("task")

    @property
    def level(self) -> str:
        return str(self.header.get("level", ""))

    @property
    def framework(self) -> str:
        """The dump's own ``framework`` field ("" without one)."""
        return str(self.header.get("framework", ""))

    @property
    def data_dir(self) -> Path:
        """Tensor files are looked for beside dump.json, whatever the recording machine's path says."""
        return self.path.parent / "dump_tensor_data"

    def __len__(self) -> int:
        return len(self.keys)

    def file(self) -> BinaryIO:
        """dump.json open for reading records, and for copying (generate --copy-data): only the file that was
        indexed, so a FIFO or a link to another file swapped in since is Refused, never read."""
        f = open_regular(self.path)
        if _identity(f) != self._identity:
            f.close()
            raise Refused(f"{self.path}: refused, it was replaced since it was indexed")
        return f

    def read(self, i: int, f: BinaryIO | None = None) -> Any:
        """Record ``i`` decoded from its own bytes (of ``f``, the open dump.json, when given); RecordError says in
        one line what is wrong and at which byte of the file."""
        start, end = self._starts[i], self._ends[i]
        try:
            with nullcontext(f) if f is not None else self.file() as g:
                g.seek(start)
                raw = g.read(end - start)
        except (OSError, ValueError) as e:  # ValueError: safe_files.Refused
            raise RecordError(f"record cannot be read: {e}") from None
        return decode_record(raw, start)

    def named(self, keys: Collection[str]) -> dict[str, Any]:
        """The records named ``keys`` (a repeated key: its last record), read in one pass over the file."""
        with self.file() as f:
            return {key: self.read(i, f) for i, key in enumerate(self.keys) if key in keys}

    def first_records_hold(self, needles: tuple[bytes, ...], looked_at: int = 1) -> bytes | None:
        """The first of ``needles`` found in the first ``looked_at`` records (their first SNIFFED bytes each),
        record by record: how a dump says what it is without a header field for it (md5, MindSpore). The file
        gone unreadable since it was indexed: the index's ``error``."""
        try:
            with self.file() as f:
                for start, end in zip_strict(self._starts[:looked_at], self._ends[:looked_at]):
                    f.seek(start)
                    raw = f.read(min(end - start, SNIFFED))
                    found = next((needle for needle in needles if needle in raw), None)
                    if found is not None:
                        return found
        except (OSError, ValueError) as e:
            raise self.error(f"{self.path}: cannot read: {e}") from None
        return None


def _identity(f: BinaryIO) -> tuple[int, int]:
    """Which file ``f`` is open on (device, inode), whatever name reached it."""
    info = os.fstat(f.fileno())
    return info.st_dev, info.st_ino


def decode_record(raw: bytes, start: int) -> Any:
    """A record's bytes (found at byte ``start`` of its file) decoded; RecordError names the byte that is wrong."""
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


def _walk(js: JsonStream) -> tuple[dict[str, Any], list[str], array, array] | None:
    """The header fields and every record's name and byte span, the ``data`` map indexed record by record (a
    later ``data`` map replaces an earlier one); None when the document is no dump. Only the short fields a dump
    is judged by are decoded; anything else is read past, whatever its size."""
    if js.sniff() != "{":
        return None  # a JSON document that is not an object is not a dump: no need to read it
    header: dict[str, Any] = {}
    found = None
    for key in js.keys("a top-level field name"):
        if key == "data" and js.peek() != "{":
            return None  # not a dump, however long the rest
        if key == "data":
            keys, starts, ends = [], array("q"), array("q")
            for name in js.keys("a record name"):
                start, end = js.skip()
                keys.append(name)
                starts.append(start)
                ends.append(end)
            found = keys, starts, ends
        elif key in HEADER:
            header[key] = js.value(f"the {key!r} field")
        else:
            js.skip()
    if js.peek() != "":
        raise js.error("extra data after the document")
    return None if found is None else (header, *found)
