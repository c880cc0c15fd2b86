"""One step's dump folder as msprobe writes it: dump.json, stack.json, construct.json and dump_tensor_data/.

dump.json is written as the step runs, a record at a time, never held whole: a step of a large model has more
records than memory should keep (at the mix level a ``parameters_grad`` record still open to more parameters
holds the records after it back, as msprobe moves it to the end each time it grows). The bytes are those of
msprobe's ``json.dump(doc, f, indent=1)`` (NaN and infinities as bare words), so a reader cannot tell the two
recorders' files apart by their layout.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

__all__ = ["DumpFile"]


class DumpFile:
    """dump.json of one step, open for records until :meth:`close`."""

    def __init__(self, folder: Path, task: str, level: str, files: str = "all") -> None:
        """``files``: which tensor files of the tensor task the folder keeps, so that dump.json names no file that
        is not there: ``all``; ``none`` (an online check's are in its store, never here: dump.json is the
        statistics task's, its records name no file); ``kept`` (some, an online check's --keep-failing: at
        :meth:`close` the names of the files not there are taken out of dump.json)."""
        self.folder = folder
        self.data_dir = folder / "dump_tensor_data" if task == "tensor" else None
        self._files = files if self.data_dir is not None else "all"
        folder.mkdir(parents=True, exist_ok=True)
        if self.data_dir is not None and self._files != "none":
            self.data_dir.mkdir(exist_ok=True)
        self.path = folder / "dump.json"
        self._f = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - open for the step, closed by close()
        self._records = 0
        self._stacks: dict[tuple[str, ...], list[str]] = {}
        self._held: dict[str, dict[str, Any]] = {}  # records not yet written, from the first open one on
        self._open: set[str] = set()
        none = self._files == "none"
        head = {
            "task": "statistics" if none else task,
            "level": level,
            "framework": "pytorch",
            "dump_data_dir": None if self.data_dir is None or none else str(self.data_dir.resolve()),
        }
        text = json.dumps(head, indent=1)
        self._f.write(text[: text.rindex("\n")] + ',\n "data": {')

    def add(self, name: str, record: dict[str, Any], stack: tuple[str, ...] | None = None) -> None:
        """Append one record; ``stack`` (a forward call's frames) goes to stack.json, grouped as msprobe does."""
        self.note_stack(name, stack)
        if self._held:
            self._held[name] = record
        else:
            self._write(name, record)

    def note_stack(self, name: str, stack: tuple[str, ...] | None) -> None:
        """stack.json lists ``name`` under ``stack`` (a module call's, taken when it starts, as msprobe's)."""
        if stack is not None:
            self._stacks.setdefault(stack, []).append(name)

    def merge(self, name: str, part: dict[str, Any], complete: set[str]) -> None:
        """Add ``part``'s fields to the record ``name`` and move it to the end, as msprobe updates a module's
        record; it stays movable (the records after it unwritten) until it has every field of ``complete``."""
        record = self._held.pop(name, {})
        record.update(part)
        self._held[name] = record
        if complete <= record.keys():
            self._open.discard(name)
        else:
            self._open.add(name)
        self._flush()

    def hold(self, name: str, record: dict[str, Any], stack: tuple[str, ...] | None = None) -> None:
        """Append a record whose fields are not all known yet (an async collective's output, read once its work
        completes): it, and the records after it, are written in their place at :meth:`release`."""
        self.note_stack(name, stack)
        self._held[name] = record
        self._open.add(name)

    def release(self, name: str) -> None:
        """The record ``name`` of :meth:`hold` is whole (filled in place): written, with those held behind it."""
        self._open.discard(name)
        self._flush()

    def _flush(self) -> None:
        while self._held and next(iter(self._held)) not in self._open:
            first = next(iter(self._held))
            self._write(first, self._held.pop(first))

    def _write(self, name: str, record: dict[str, Any]) -> None:
        if self._files == "none":
            record = _without(record, lambda data_name: False)
        body = json.dumps(record, indent=1).replace("\n", "\n  ")
        self._f.write(("," if self._records else "") + f"\n  {json.dumps(name)}: {body}")
        self._records += 1

    @property
    def records(self) -> int:
        return self._records

    def close(
        self, construct: dict[str, Any] | None = None, partial: str | None = None, unsaved: Collection[str] = ()
    ) -> None:
        """Finish dump.json and write stack.json and construct.json (``construct``: the mix level's call tree;
        empty at L1, as msprobe's). ``partial``: why the step's records stop short (its program was interrupted),
        said in a top-level ``partial`` field after ``data``, which msprobe's readers ignore and run_ut warns of.
        ``unsaved``: tensor files that could not be saved, whose names dump.json then drops."""
        if self._f.closed:
            return
        for name, record in self._held.items():
            self._write(name, record)
        self._held.clear()
        self._f.write("\n }" if self._records else "}")
        self._f.write(f',\n "partial": {json.dumps(partial)}\n}}' if partial else "\n}")
        self._f.close()
        if self._files == "kept" or unsaved:
            self._prune(frozenset(unsaved))
        stacks = {str(i): [names, list(frames)] for i, (frames, names) in enumerate(self._stacks.items())}
        for name, doc in (("stack.json", stacks), ("construct.json", construct or {})):
            tmp = self.folder / f"{name}.tmp"
            tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
            os.replace(tmp, self.folder / name)

    def _prune(self, unsaved: frozenset[str]) -> None:
        """dump.json names only the tensor files that are in the folder (``kept``), or none of ``unsaved``; the
        statistics task's when none is kept. (The one read of dump.json whole: only for these.)"""
        if self.data_dir is None:
            return
        kept = {p.name for p in self.data_dir.iterdir()} - unsaved
        doc = json.loads(self.path.read_text(encoding="utf-8"))
        doc["data"] = _without(doc["data"], kept.__contains__ if self._files == "kept" else lambda n: n not in unsaved)
        if not kept and self._files == "kept":
            doc["task"], doc["dump_data_dir"] = "statistics", None
            self.data_dir.rmdir()
        tmp = self.folder / "dump.json.tmp"
        tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        os.replace(tmp, self.path)


def _without(value: Any, keep: Callable[[str], bool]) -> Any:
    """``value`` without the ``data_name`` of each tensor whose file ``keep`` says is not kept."""
    if isinstance(value, dict):
        return {k: _without(v, keep) for k, v in value.items() if k != "data_name" or not isinstance(v, str) or keep(v)}
    if isinstance(value, list):
        return [_without(v, keep) for v in value]
    return value
