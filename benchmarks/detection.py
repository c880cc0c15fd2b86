"""A detection benchmark: does precheck grade real kernel precision bugs error, and honest kernels not?

    python benchmarks/detection.py record --venv VENV --corpus CORPUS [--split dev holdout]
    python benchmarks/detection.py [evaluate] [--corpus DIR] [--standards default,msprobe,benchmark,auto,...]

The corpus defaults to the fraction bundled in tests/data/detection (dev bugs only).

``record`` runs benchmarks/detection_record.py in a venv with torch 2.13 and mindstudio-probe (``VENV=$(.venv/bin/python
tests/data/recipes/msprobe_venv.py)`` makes it) once per dump: each bug of detection_bugs.BUGS in each of
its (dtype, loss scale) runs, and each model clean, into CORPUS/SPLIT/NAME/ (an msprobe L1 tensor dump under
step0/, and truth.json). A split is finished when CORPUS/SPLIT/READY exists. ``dev`` bugs are for developing a
grader; ``holdout`` bugs (other models, other ops) are for the final measurement only.

``evaluate`` runs the precheck of the interpreter that runs this script, ``--target recorded`` on every dump, and
prints per standard and dtype: bugs caught (a bugged dump counts when one of its bugged records is graded error in
the bugged direction), bugged-row recall, false errors on clean dumps (rows graded error where an honest kernel in
that dtype is not materially worse than the recording: see detection_honest.py) and the share of warnings on clean
half-precision rows; then every missed bug with its verdict and Message.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path

from precheck.core.older_python import zip_strict

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent / "tests" / "data" / "detection"  # the bundled fraction; the whole corpus is recorded elsewhere
BUNDLED = HERE.parent / "tests" / "data" / "detection"


def planned(split: str) -> list[tuple[str, str, float, str]]:
    """(bug or clean:MODEL, dtype, loss scale, dump folder name) of every dump of a split."""
    sys.path.insert(0, str(HERE))
    from detection_bugs import BUGS, CLEAN_RUNS

    def folder(stem: str, dtype: str, scale: float) -> str:
        return f"{stem}_{dtype}" + ("" if scale == 1 else f"_x{scale:g}")

    runs = [(b.name, d, s, folder(b.name, d, s)) for b in BUGS if b.split == split for d, s in b.runs]
    for model, model_runs in CLEAN_RUNS[split].items():
        runs += [(f"clean:{model}", d, s, folder(f"clean_{model}", d, s)) for d, s in model_runs]
    return runs


def _record_one(python: Path, folder: Path, run: tuple[str, str, float, str]) -> str | None:
    """Record one dump; None when it worked, else the dump's name and the last line of its output."""
    name, dtype, scale, dump = run
    out = folder / dump
    subprocess.run(["rm", "-rf", str(out)], check=True)
    cmd = [str(python), str(HERE / "detection_record.py"), name, dtype, str(scale), str(out)]
    done = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True)
    lines = (done.stdout + done.stderr).strip().splitlines() or ["(no output)"]
    return None if done.returncode == 0 else f"{folder.name}/{dump}: {lines[-1]}"


def record(venv: Path, corpus: Path, splits: list[str], jobs: int, force: bool) -> int:
    """Record every missing dump of each split, then mark the split READY; a failed dump is reported with the
    last line of its output and leaves its split unmarked."""
    python = venv / "bin" / "python"
    failed = 0
    for split in splits:
        (corpus / split).mkdir(parents=True, exist_ok=True)
        todo = [r for r in planned(split) if force or not (corpus / split / r[3] / "truth.json").exists()]

        with ThreadPoolExecutor(max(1, jobs)) as pool:
            errors = [e for e in pool.map(partial(_record_one, python, corpus / split), todo) if e]
        for error in errors:
            print("FAILED", error)
        failed += len(errors)
        if not errors:
            (corpus / split / "READY").write_text(f"{len(planned(split))} dumps\n")
        print(f"{split}: {len(todo) - len(errors)} of {len(todo)} recorded into {corpus / split}")
    return 1 if failed else 0


STANDARDS = ("default", "msprobe", "absolute", "ulp", "binary", "thousandth", "accumulative", "benchmark", "auto")
HALF = ("bf16", "fp16")
SPLITS = ["dev", "holdout", "holdout2"]


@dataclass(frozen=True)
class Dump:
    folder: Path
    dump_json: Path
    truth: dict

    @property
    def split(self) -> str:
        return self.folder.parent.name

    @property
    def bugged(self) -> set[tuple[str, str]]:
        return {(b["record"], b["direction"]) for b in self.truth["bugged"]}


@dataclass(frozen=True)
class Row:
    status: str
    message: str


def find_dumps(corpus: Path) -> list[Dump]:
    """Every recorded dump under ``corpus`` (a corpus root, one split, or one dump), in name order."""
    dumps = []
    for truth in sorted(corpus.rglob("truth.json")):
        dump_json = next(truth.parent.glob("step0/*/dump.json"), None)
        if dump_json is None:
            raise SystemExit(f"{truth.parent}: truth.json without step0/*/dump.json")
        dumps.append(Dump(truth.parent, dump_json, json.loads(truth.read_text())))
    return dumps


def grade(dump: Dump, standard: str) -> dict[tuple[str, str], Row]:
    """precheck --target recorded on one dump: the status and Message of every (API, direction) it compared."""
    from precheck.execution.options import CheckOptions
    from precheck.run_ut import run_ut

    options = CheckOptions(standard=standard, target="recorded")
    with tempfile.TemporaryDirectory() as out:
        summary = run_ut(dump.dump_json, out, device="cpu", workers=1, options=options)
    rows = {}
    for result in summary.results:
        for direction, status in (("forward", result.forward), ("backward", result.backward)):
            if not status.strip():
                continue
            same = [d.comparison.message for d in result.details if f".{direction}." in d.name
                    and d.comparison.status == status]  # fmt: skip
            message = same[0] if same else result.message
            rows[(result.name, direction)] = Row(status, message.removeprefix("target: recorded outputs").lstrip("; "))
    return rows


@dataclass
class Tally:
    """The counts of one (standard, split, dtype) cell of the table."""

    bugs: int = 0
    caught: int = 0
    material: int = 0  # bugs whose recording is materially worse than an honest kernel at one bugged record
    material_caught: int = 0
    bugged_rows: int = 0
    bugged_errors: int = 0
    clean_rows: int = 0
    false_errors: int = 0
    clean_warnings: int = 0
    clean_skips: int = 0
    missed: list[str] = field(default_factory=list)
    immaterial: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    false: list[str] = field(default_factory=list)


def tally(dump: Dump, rows: dict[tuple[str, str], Row], cell: Tally) -> None:
    """Add one graded dump to its cell: bugs and recall on a bugged dump, false errors and warnings on a clean one."""
    if dump.bugged:
        statuses = {key: rows.get(key, Row("missing", "no row")) for key in sorted(dump.bugged)}
        errors = [key for key, row in statuses.items() if row.status == "error"]
        cell.bugs += 1
        cell.caught += bool(errors)
        cell.bugged_rows += len(statuses)
        cell.bugged_errors += len(errors)
        honest = [_honesty(dump.dump_json, api, d) for api, d in statuses]
        if any(h.worse or h.ratio is None for h in honest):
            cell.material += 1
            cell.material_caught += bool(errors)
        else:
            cell.immaterial.append(f"{dump.folder.name}: {'; '.join(h.note for h in honest)}")
        if not errors:
            shown = "; ".join(f"{api}.{d}: {row.status}: {row.message[:160]}" for (api, d), row in statuses.items())
            cell.missed.append(f"{dump.folder.name}: {shown}")
        return
    for (api, direction), row in sorted(rows.items()):
        cell.clean_rows += 1
        cell.clean_warnings += row.status == "warning"
        cell.clean_skips += row.status == "SKIP"
        if row.status != "error":
            continue
        honest = _honesty(dump.dump_json, api, direction)
        line = f"{dump.folder.name} {api}.{direction}: {honest.note}"
        if honest.worse:
            cell.excluded.append(line)
        else:
            cell.false_errors += 1
            cell.false.append(f"{line}; precheck: {row.message[:160]}")


@cache
def _honesty(dump_json: Path, api: str, direction: str):
    """The recording against an honest kernel (detection_honest.py), measured once for every standard."""
    from detection_honest import honesty

    return honesty(dump_json, api, direction)


def _grade(pair: tuple[str, Dump]) -> dict[tuple[str, str], Row]:
    return grade(pair[1], pair[0])


def evaluate(corpus: Path, standards: list[str], jobs: int = 1) -> dict[tuple[str, str, str], Tally]:
    """Grade every dump under ``corpus`` with each standard (``jobs`` processes): a Tally per (standard, split,
    dtype)."""
    sys.path.insert(0, str(HERE))
    cells: dict[tuple[str, str, str], Tally] = defaultdict(Tally)
    dumps = find_dumps(corpus)
    if not dumps:
        raise SystemExit(f"{corpus}: no dump with a truth.json (record one with: detection.py record)")
    pairs = [(standard, dump) for standard in standards for dump in dumps]
    with ProcessPoolExecutor(jobs) if jobs > 1 else nullcontext() as pool:
        graded = (pool.map if pool else map)(_grade, pairs)
        for (standard, dump), rows in zip_strict(pairs, graded):
            tally(dump, rows, cells[(standard, dump.split, dump.truth["dtype"])])
    return dict(cells)


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.0%})" if whole else "-"


def table(cells: dict[tuple[str, str, str], Tally]) -> str:
    """The benchmark's table (markdown), one line per standard, split and dtype plus the split's total."""
    lines = [
        "| standard | split | dtype | bugs caught | material bugs caught | bugged rows error | false errors (clean) | "
        "warnings on clean half rows | SKIP (clean) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    order = {s: i for i, s in enumerate(STANDARDS)}
    keys = sorted({(s, sp) for s, sp, _ in cells}, key=lambda k: (order.get(k[0], len(order)), k[1]))
    for standard, split in keys:
        dtypes = [d for d in ("fp32", "bf16", "fp16") if (standard, split, d) in cells]
        total = Tally()
        for dtype in dtypes:
            cell = cells[(standard, split, dtype)]
            for name in ("bugs", "caught", "material", "material_caught", "bugged_rows", "bugged_errors",
                         "clean_rows", "false_errors", "clean_warnings", "clean_skips"):  # fmt: skip
                setattr(total, name, getattr(total, name) + getattr(cell, name))
            lines.append(_line(standard, split, dtype, cell, dtype in HALF))
        half = [cells[(standard, split, d)] for d in dtypes if d in HALF]
        total.clean_warnings = sum(c.clean_warnings for c in half)
        lines.append(_line(standard, split, "all", total, True, sum(c.clean_rows for c in half)))
    return "\n".join(lines)


def _line(standard: str, split: str, dtype: str, c: Tally, half: bool, half_rows: int | None = None) -> str:
    warnings = _share(c.clean_warnings, c.clean_rows if half_rows is None else half_rows) if half else "-"
    return (
        f"| {standard} | {split} | {dtype} | {_share(c.caught, c.bugs)} | {_share(c.material_caught, c.material)} | "
        f"{_share(c.bugged_errors, c.bugged_rows)} | "
        f"{_share(c.false_errors, c.clean_rows)} | {warnings} | {_share(c.clean_skips, c.clean_rows)} |"
    )


def report(cells: dict[tuple[str, str, str], Tally]) -> str:
    """The table, then per standard the missed bugs, the false errors and the rows excluded as truly worse."""
    out = [table(cells)]
    for title, attr in (("missed bugs", "missed"), ("false errors on clean dumps", "false"),
                        ("bugs no worse than an honest kernel in their dtype (immaterial)", "immaterial"),
                        ("clean rows graded error but measured worse than honest (excluded)", "excluded")):  # fmt: skip
        for (standard, split, dtype), cell in sorted(cells.items()):
            items = getattr(cell, attr)
            if items:
                out.append(f"\n{title}, {standard}, {split}, {dtype}:")
                out += [f"  {item}" for item in items]
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "command",
        nargs="?",
        default="evaluate",
        choices=["evaluate", "record"],
        help="evaluate (default): grade the corpus with this interpreter's precheck; record: record it with msprobe",
    )
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="corpus folder (default: the bundled fraction)")
    parser.add_argument("--standards", default="default", help=f"comma-separated, or all ({','.join(STANDARDS)})")
    parser.add_argument("--jobs", type=int, default=None, help="processes (default: 1 to evaluate, 2 to record)")
    parser.add_argument("--venv", type=Path, help="record: a venv with torch 2.13 and mindstudio-probe")
    parser.add_argument("--split", nargs="+", default=SPLITS, choices=SPLITS)
    parser.add_argument("--force", action="store_true", help="record: re-record dumps that exist")
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.command == "record":
        if args.venv is None:
            parser.error("record needs --venv (a venv with torch 2.13 and mindstudio-probe)")
        sys.exit(record(args.venv, args.corpus, args.split, args.jobs or 2, args.force))
    standards = list(STANDARDS) if args.standards == "all" else args.standards.split(",")
    print(report(evaluate(args.corpus, standards, args.jobs or 1)))


if __name__ == "__main__":
    main()
