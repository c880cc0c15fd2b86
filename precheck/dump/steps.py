"""Which dumps a path given to ``-api_info`` names: one dump.json (or the folder holding it), a step folder of
``rank*`` / ``proc*`` dumps (a distributed step, run as one run), or a dump's top folder (``dump/``, holding
``step*/rank*/dump.json``), resolved to the one dump or the one step below it.

msprobe writes ``DUMP/step{N}/rank{R}/`` in a distributed run and ``DUMP/step{N}/proc{pid}/`` in another; a user
hands precheck whichever folder is at hand, and "dump/dump.json: no such file" told them nothing of what it found.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from precheck.errors import PrecheckError

DUMP_JSON = "dump.json"
# A process's dump in a step (its run's output folder too), named exactly as msprobe names it: an ASCII decimal
# without a leading zero ("rank" alone: a run outside torch.distributed). ``_LOOSE``: what int() would read as one.
_DUMP_FOLDER = re.compile(r"(rank|proc)(0|[1-9][0-9]*)?", re.ASCII)
_LOOSE = re.compile(r"\s*(rank|proc)\s*(\d*)\s*")
_STEP = re.compile(r"^step(\d+)$")
SHOWN = 4  # dumps named in a line that lists them


class StepError(PrecheckError):
    """A folder that holds several dumps that are not one step, or a path that holds none (one line, exit code
    2)."""


@dataclass(frozen=True)
class RankDump:
    """One process's dump of a step: its folder (``step0/rank1``) and its rank (None for a ``proc<pid>`` one)."""

    folder: Path
    rank: int | None

    @property
    def name(self) -> str:
        return self.folder.name


@dataclass(frozen=True)
class Found:
    """What ``-api_info`` names: one dump (``ranks`` None) or a step's dumps; ``note`` says what was chosen below
    the folder given, when it was not the folder itself."""

    path: Path
    ranks: list[RankDump] | None = None
    note: str | None = None

    def require(self) -> Found:
        """Itself, once a dump that is not there is refused: run_ut says so before it loads torch (4-15 s), not
        after; the reader says what else is wrong with a file that is there."""
        dump = self.path / DUMP_JSON if not self.ranks and self.path.is_dir() else self.path
        if not dump.exists():
            raise StepError(f"{dump}: no such file")
        return self


def rank_number(name: str) -> int | None:
    """The rank a dump folder named ``name`` holds: ``rank`` and an ASCII decimal with no leading zero (msprobe's
    ``rank1``); None for ``rank``, ``proc<pid>`` and any other name. ``rank01``, ``rank1\\n`` or Unicode digits
    name no rank: read as int() reads them, two folders were one rank and one overwrote the other."""
    m = _DUMP_FOLDER.fullmatch(name)
    return int(m[2]) if m and m[1] == "rank" and m[2] else None


def is_dump_folder(name: str) -> bool:
    """Whether ``name`` is a process's folder in a step as msprobe names it (``rank1``, ``rank``, ``proc123``)."""
    return _DUMP_FOLDER.fullmatch(name) is not None


def rank_dumps(step: Path) -> list[RankDump]:
    """The ``rank*`` / ``proc*`` folders of ``step`` that hold a dump.json: ranks by number, then processes."""
    return rank_folders(step, DUMP_JSON)


def rank_folders(parent: Path, holding: str) -> list[RankDump]:
    """The ``rank*`` / ``proc*`` folders of ``parent`` holding a file that matches the glob ``holding``, in
    rank_dumps' order: a step's dumps, or the output folders of its run (precheck/report/ranks_html.py)."""
    found, misnamed = [], []
    for folder in sorted(parent.iterdir()) if parent.is_dir() else ():
        exact = is_dump_folder(folder.name)
        if not (exact or _LOOSE.fullmatch(folder.name)) or not _holds(parent, folder, holding):
            continue
        if exact:
            found.append(RankDump(folder, rank_number(folder.name)))
        else:
            misnamed.append(folder)
    if misnamed:
        raise StepError(_misnamed(parent, misnamed[0], found))
    return sorted(found, key=lambda d: (d.rank is None, d.rank or 0, d.name))


def _holds(parent: Path, folder: Path, holding: str) -> bool:
    """Whether ``folder`` holds a file matching ``holding``; StepError when it, or that file, is a link out of
    ``parent`` (another dump on the machine, which would be read, graded and printed as this step's)."""
    inside(parent, folder)
    files = [f for f in folder.glob(holding) if f.is_file()]
    for file in files:
        inside(folder, file)
    return bool(files)


def inside(parent: Path, path: Path) -> None:
    """StepError when ``path``, a folder or file found in ``parent``, resolves outside it (a symbolic link out),
    the rule a dump's own ``dump_tensor_data`` link out follows (precheck.dump.safe_files)."""
    try:
        outside = parent.resolve() not in path.resolve().parents
    except (OSError, RuntimeError) as e:  # a link loop
        raise StepError(f"{path}: refused, not a usable path ({e})") from None
    if outside:
        raise StepError(f"{path}: refused, a link out of {parent}; copy the dump it names into the folder")


def _misnamed(parent: Path, folder: Path, found: list[RankDump]) -> str:
    """The line refusing a step with a folder that is no exact rank folder name, naming the folder it collides with
    when int() reads both as one rank."""
    m = _LOOSE.fullmatch(folder.name)
    number = int(m[2]) if m and m[1] == "rank" and m[2] else None
    same = next((d for d in found if number is not None and d.rank == number), None)
    exact = "a dump folder is named rank<N> (an ASCII decimal, no leading zero) or proc<pid>"
    if same is not None:
        return f"{parent}: two folders name rank {number}, {same.name} and {folder.name}; {exact}: rename one"
    return f"{parent}: {folder.name} is no rank folder ({exact}); rename it"


def _steps(top: Path) -> list[tuple[Path, list[RankDump]]]:
    steps = [p for p in top.iterdir() if _STEP.match(p.name) and p.is_dir()]
    for step in steps:
        inside(top, step)
    found = [(step, rank_dumps(step)) for step in sorted(steps, key=lambda p: int(_STEP.match(p.name)[1]))]
    return [(step, ranks) for step, ranks in found if ranks]


def find_dumps(api_info: str | os.PathLike) -> Found:
    """What ``api_info`` names (see the module's doc); a path that is none of these is returned as it is, for
    the dump reader to say what is wrong with it. StepError for a top folder holding several steps."""
    path = Path(api_info)
    if not path.is_dir() or (path / DUMP_JSON).exists():
        return Found(path)
    ranks = rank_dumps(path)
    if ranks:
        return Found(path, ranks)
    steps = _steps(path)
    dumps = [d for _, ranks in steps for d in ranks]
    if len(dumps) == 1:
        return Found(dumps[0].folder / DUMP_JSON, note=f"{path}: running its one dump, {_below(path, dumps[0])}")
    if len(steps) == 1:
        step = steps[0][0]
        return Found(step, dumps, note=f"{path}: running its one step, {step.name} ({len(dumps)} dumps)")
    if steps:
        names = ", ".join(_below(path, d) for d in itertools.islice(dumps, SHOWN)) + ", ..." * (len(dumps) > SHOWN)
        raise StepError(
            f"{path}: holds {len(dumps)} dumps in {len(steps)} steps ({names}); "
            f"name one step folder ({steps[0][0]}) or one dump"
        )
    return Found(path)


def _below(top: Path, dump: RankDump) -> str:
    return str(dump.folder.relative_to(top) / DUMP_JSON)
