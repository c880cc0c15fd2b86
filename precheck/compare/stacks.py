"""The call stacks msprobe writes beside a dump (stack.json), for the compare CSV's NPU_Stack_Info column.

Two layouts exist: ``{record: [lines]}`` (older msprobe) and ``{id: [[records], [lines]]}`` (26.x, one entry
per distinct stack).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from precheck.dump.jsonstream import read_json
from precheck.schema import CompareConst

MAX_STACKS = 256 << 20  # bytes: a large model's stack.json is tens of megabytes


@dataclass
class Stacks:
    by_record: dict[str, str] = field(default_factory=dict)
    present: bool = False
    problem: str | None = None  # why a stack.json that is there was not used, in one line naming it

    @classmethod
    def load(cls, path: Path) -> Stacks:
        """The stacks of ``path``; none (and no stack column) when the file is absent, and ``problem`` says why
        when it cannot be used. It comes with the dump: a FIFO (which would hang the compare) or a link to
        /dev/zero (which would fill memory) is refused by its type, without waiting or reading."""
        try:
            doc = read_json(path, ValueError, MAX_STACKS, "stack.json")
        except FileNotFoundError:
            return cls()
        except ValueError as e:
            return cls(problem=str(e))
        if not isinstance(doc, dict):
            return cls(problem=f"{path}: not a map of records to stacks")
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
        return self.by_record.get(record, CompareConst.N_A)
