"""What `precheck compare` is given, resolved to pairs of dumps: two dump.json files, two folders of one dump
each, two cluster folders (``step*/rank*``) compared rank by rank (a step of one ``proc*`` folder on each side,
as ``precheck record`` writes it, pairs whatever the two pids), or two step folders (``dump/step1``, of
``rank*`` or ``proc*`` folders) whose ranks pair in order, as msprobe's compare takes them; msprobe's
``-i compare.json`` (``npu_path``, ``bench_path``, ``stack_path``) as well.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from precheck.compare.entries import CompareInputError
from precheck.core.older_python import zip_strict
from precheck.dump.steps import RankDump, inside, rank_dumps, rank_number


@dataclass(frozen=True)
class DumpPair:
    target: Path
    bench: Path
    suffix: str  # "" for one pair, "_rank3" (msprobe's naming, which its merge_result reads) for a rank
    folder: str  # sub-folder of the output for this pair ("" or "step1")
    rank: int | None = None  # the rank of a step's pair (rank3): the step's ranks are read as one (compare.steps)


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
    """(step, rank) -> the folder holding dump.json, for a folder of step*/rank* (or step*/proc*) folders: read
    as run_ut reads them (exact rank names; a folder linked out of its parent refused)."""
    found = {}
    for step in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step")):
        inside(root, step)
        for rank in sorted(rank_dumps(step), key=lambda d: d.name):
            found[(step.name, rank.name)] = rank.folder
    return found


def _ranks(step: Path) -> list[Path]:
    """The rank (or proc) folders holding a dump.json in a step folder, by rank number as msprobe sorts them."""
    return [d.folder for d in sorted(rank_dumps(step), key=_msprobe_order)]


def _msprobe_order(dump: RankDump) -> tuple[str, int]:
    return dump.name[:4], int(dump.name[4:] or -1)


def _step_pairs(t: Path, b: Path) -> list[DumpPair]:
    """Two step folders: their ranks pair in order (msprobe's compare of a step folder); none when ``t`` is
    no step folder."""
    tr, br = _ranks(t), _ranks(b)
    if not tr:
        return []
    if len(tr) != len(br):
        raise CompareInputError(f"{b}: holds {len(br)} rank or proc folders with a dump.json, the target {len(tr)}")
    pairs = []
    for folder, other in zip_strict(tr, br):
        number = rank_number(folder.name)
        suffix = f"_{folder.name}" if number is None else f"_rank{number}"
        pairs.append(DumpPair(folder / "dump.json", other / "dump.json", suffix, "", number))
    return pairs


def one_dump(path: str | os.PathLike) -> Path:
    """A dump.json, the folder holding it, or a dump's own folder (msprobe's ``step*/rank*/dump.json`` below it,
    as the README names its dumps) that holds exactly one; CompareInputError when it holds none or several."""
    p = Path(path)
    if not p.is_dir() or (p / "dump.json").is_file():
        return p
    found = _dump_folders(p)
    if not found:
        raise CompareInputError(f"{p}: no dump.json in it, nor step*/rank*/dump.json below it")
    if len(found) > 1:
        names = ", ".join(f"{step}/{rank}" for step, rank in itertools.islice(found, 3)) + ", ..." * (len(found) > 3)
        raise CompareInputError(f"{p}: holds {len(found)} dumps ({names}); name one")
    return next(iter(found.values())) / "dump.json"


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
    if not b.is_dir():
        raise CompareInputError(f"{b}: one dump, while the target {t} is a folder of ranks")
    ts, bs = _dump_folders(t), _dump_folders(b)
    if not ts:
        pairs = _step_pairs(t, b)
        if not pairs:
            raise CompareInputError(f"{t}: no dump.json in it, nor rank*/dump.json or step*/rank*/dump.json below it")
        return pairs
    steps = sorted({s for s, _ in ts})
    pairs = []
    for (step, rank), other in _matched(t, b, ts, bs).items():
        number = rank_number(rank)
        suffix = f"_{rank}" if number is None else f"_rank{number}"
        where = step if len(steps) > 1 else ""
        pairs.append(DumpPair(ts[(step, rank)] / "dump.json", other / "dump.json", suffix, where, number))
    return pairs


def _matched(t: Path, b: Path, ts: dict[tuple[str, str], Path], bs: dict[tuple[str, str], Path]) -> dict:
    """The bench's folder of each of the target's (step, rank): the one of the same name, or, where a step holds
    one ``proc*`` folder on each side (``precheck record`` names them by their own pid), that one whatever its
    pid. CompareInputError names what is missing, or, with several process folders, which to name."""
    found = {}
    for step in sorted({s for s, _ in ts} | {s for s, _ in bs}):
        mine = sorted(r for s, r in ts if s == step)
        theirs = sorted(r for s, r in bs if s == step)
        if mine == theirs:
            found.update({(step, r): bs[(step, r)] for r in mine})
        elif len(mine) == len(theirs) == 1 and mine[0].startswith("proc") and theirs[0].startswith("proc"):
            found[(step, mine[0])] = bs[(step, theirs[0])]
        elif mine and theirs and any(r.startswith("proc") for r in mine + theirs):
            raise CompareInputError(
                f"{b}: its {step} holds {', '.join(theirs[:3])} and the target's {', '.join(mine[:3])}: process "
                f"folders pair by name, or one with one; name one folder on each side (-target "
                f"{t / step / mine[0]} -bench {b / step / theirs[0]})"
            )
        else:
            gone = next((r for r in mine if r not in theirs), None)
            if gone is not None:
                raise CompareInputError(f"{b}: has no {step}/{gone} to compare with the target's")
            gone = next(r for r in theirs if r not in mine)
            raise CompareInputError(f"{t}: has no {step}/{gone} to compare with the bench's")
    return found
