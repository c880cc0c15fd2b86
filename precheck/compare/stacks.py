"""The call stacks msprobe writes beside a dump (stack.json), for the compare CSV's NPU_Stack_Info column.

Two layouts exist: ``{record: [lines]}`` (older msprobe) and ``{id: [[records], [lines]]}`` (26.x, one entry
per distinct stack).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Stacks:
    by_record: dict[str, str] = field(default_factory=dict)
    present: bool = False

    @classmethod
    def load(cls, path: Path) -> Stacks:
        """The stacks of ``path``; none (and no stack column) when the file is absent or unreadable."""
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            return cls()
        if not isinstance(doc, dict):
            return cls()
        stacks = cls(present=True)
        for key, value in doc.items():
            if isinstance(value, list) and len(value) == 2 and all(isinstance(v, list) for v in value):
                for record in value[0]:
                    if isinstance(record, str):
                        stacks.by_record[record] = str(value[1])
            elif isinstance(value, list):
                stacks.by_record[key] = str(value)
        return stacks

    def of(self, record: str) -> str:
        return self.by_record.get(record, "N/A")
