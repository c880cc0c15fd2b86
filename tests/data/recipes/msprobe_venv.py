"""Run a fixture recipe in msprobe's throwaway venv, made on first use: the recipes record with msprobe
(mindstudio-probe 26.2), which precheck itself neither needs nor installs.

Why: the recipes named a venv on one machine (/tmp/..., ~/.cache/...); from a fresh clone nobody could re-record a
fixture. This makes the venv from nothing: torch at the version of the python that runs this (the project's
.venv: the fixtures' torch), from PyTorch's CPU index as .ci/setup takes it, then mindstudio-probe and what the
recipe asks for (--pip). The venv lives in the user's cache (``$XDG_CACHE_HOME/precheck/msprobe-torch<VERSION>``,
or --venv), is reused while its packages are the same, and can be deleted at any time.

    .venv/bin/python tests/data/recipes/msprobe_venv.py [--pip PKG ...] [--mindspore] -- SCRIPT [ARG ...]
    VENV=$(.venv/bin/python tests/data/recipes/msprobe_venv.py)   # make it, print its folder

The recipe runs from the repository root with the CPU kernels pinned to AVX2 (as tests/conftest.py pins them)
and benchmarks/, tests/data/ and tests/data/recipes/ on PYTHONPATH (make_dump.py's ``module:function`` models,
msprobe_ms_cpu.py). --mindspore makes MindSpore's venv instead (mindspore 2.10 with numpy<2: ms_record.py's
MindSpore side). --dry-run prints the commands instead of running them.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MSPROBE = "mindstudio-probe==26.2.*"  # the msprobe every msprobe fixture was recorded with
MINDSPORE = ("mindspore==2.10.*", "numpy<2", "pandas<3", "ml_dtypes<0.6")
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def torch_version() -> str:
    """The running python's torch, without its local tag (2.13.0+cpu -> 2.13.0): the version pip is asked for."""
    return metadata.version("torch").split("+")[0]


def packages(mindspore: bool, extra: list[str]) -> list[str]:
    if mindspore:
        return [*MINDSPORE, MSPROBE, *extra]
    return [f"torch=={torch_version()}", MSPROBE, *extra]


def default_venv(mindspore: bool) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "precheck"
    return cache / ("msprobe-mindspore" if mindspore else f"msprobe-torch{torch_version()}")


def commands(venv: Path, wanted: list[str], script: list[str]) -> list[list[str]]:
    """What makes (or tops up) the venv and then runs the recipe; the venv's stamp names the packages it holds."""
    python = str(venv / "bin" / "python")
    todo = []
    if not (venv / "bin" / "python").exists():
        todo.append([sys.executable, "-m", "venv", str(venv)])
    stamp = venv / ".packages"
    if not stamp.exists() or stamp.read_text() != "\n".join(wanted):
        index = subprocess.run(
            ["bash", str(ROOT / ".ci" / "torch-index"), sys.executable], capture_output=True, text=True
        ).stdout.split()
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        if wanted[0].startswith("torch=="):  # torch first, alone, so pip takes the CPU wheel
            todo.append([*pip, *index, wanted[0]])
        todo.append([*pip, *index, *wanted])
    if script:
        todo.append([python, *script])
    return todo


def recipe_env() -> dict[str, str]:
    paths = [ROOT, ROOT / "benchmarks", ROOT / "tests" / "data", ROOT / "tests" / "data" / "recipes"]
    old = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        **AVX2,
        "PYTHONPATH": os.pathsep.join([*map(str, paths), *([old] if old else [])]),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="msprobe_venv.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pip", nargs="+", default=[], metavar="PKG", help="more packages the recipe needs")
    parser.add_argument("--mindspore", action="store_true", help="MindSpore's venv (mindspore 2.10, numpy<2)")
    parser.add_argument("--venv", type=Path, help="the venv's folder (default: in the user's cache)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument(
        "script",
        nargs=argparse.REMAINDER,
        help="-- SCRIPT [ARG ...], run by the venv's python (none: print the venv's folder)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    wanted = packages(args.mindspore, args.pip)
    venv = (args.venv or default_venv(args.mindspore)).absolute()
    todo = commands(venv, wanted, script)
    for i, command in enumerate(todo):
        print("+", shlex.join(command), file=sys.stderr)
        if args.dry_run:
            continue
        building = i < len(todo) - 1 or not script  # the venv's making goes to stderr: stdout is the recipe's
        code = subprocess.run(command, cwd=ROOT, env=recipe_env(), stdout=sys.stderr if building else None).returncode
        if code:
            return code
        if command[1:3] == ["-m", "pip"] and command[-len(wanted) :] == wanted:
            (venv / ".packages").write_text("\n".join(wanted))
    if not script:
        print(venv)  # VENV=$(... msprobe_venv.py): for a benchmark's --venv
    return 0


if __name__ == "__main__":
    sys.exit(main())
