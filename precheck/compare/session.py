"""What `precheck compare` is given, resolved to pairs of dumps: two dump.json files, two folders of one dump
each, or two cluster folders (``step*/rank*``) compared rank by rank; msprobe's ``-i compare.json``
(``npu_path``, ``bench_path``, ``stack_path``) as well.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from precheck.compare.entries import CompareInputError

_RANK = re.compile(r"rank(\d+)$")


@dataclass(frozen=True)
class DumpPair:
    target: Path
    bench: Path
    suffix: str  # "" for one pair, "_rank3" (msprobe's naming, which its merge_result reads) for a rank
    folder: str  # sub-folder of the output for this pair ("" or "step1")


def read_compare_json(path: str | os.PathLike) -> tuple[str, str, str | None]:
    """(npu_path, bench_path, stack_path) of msprobe's compare.json."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CompareInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CompareInputError(f"{path}: not a readable JSON file ({str(e)[:120]})") from None
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str) for k in ("npu_path", "bench_path")):
        raise CompareInputError(f"{path}: expected a JSON object with npu_path and bench_path")
    stack = doc.get("stack_path")
    return doc["npu_path"], doc["bench_path"], stack if isinstance(stack, str) else None


def _dump_folders(root: Path) -> dict[tuple[str, str], Path]:
    """(step, rank) -> the folder holding dump.json, for a folder of step*/rank* (or step*/proc*) folders."""
    found = {}
    for step in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step")):
        for rank in sorted(p for p in step.iterdir() if p.is_dir() and (p / "dump.json").is_file()):
            found[(step.name, rank.name)] = rank
    return found


def resolve(target: str | os.PathLike, bench: str | os.PathLike) -> list[DumpPair]:
    """The pairs of dumps to compare; CompareInputError when the two sides do not line up."""
    t, b = Path(target), Path(bench)
    for side, path in (("target", t), ("bench", b)):
        if not path.exists():
            raise CompareInputError(f"{path}: no such file or folder ({side})")
    if not t.is_dir() or (t / "dump.json").is_file():
        if b.is_dir() and not (b / "dump.json").is_file():
            raise CompareInputError(f"{b}: a folder of ranks, while the target {t} is one dump")
        return [DumpPair(t, b, "", "")]
    ts, bs = _dump_folders(t), _dump_folders(b)
    if not ts:
        raise CompareInputError(f"{t}: no dump.json in it, nor step*/rank*/dump.json below it")
    steps = sorted({s for s, _ in ts})
    pairs = []
    for (step, rank), folder in ts.items():
        other = bs.get((step, rank))
        if other is None:
            raise CompareInputError(f"{b}: has no {step}/{rank} to compare with the target's")
        m = _RANK.search(rank)
        suffix = f"_rank{m.group(1)}" if m else f"_{rank}"
        pairs.append(DumpPair(folder / "dump.json", other / "dump.json", suffix, step if len(steps) > 1 else ""))
    missing = sorted(set(bs) - set(ts))
    if missing:
        raise CompareInputError(f"{t}: has no {missing[0][0]}/{missing[0][1]} to compare with the bench's")
    return pairs
