"""One subcommand as one value: its name, its help, the arguments it takes and the handler that runs it, declared
together in the command's own module and listed once in registry.py, which parser.py builds the grammar from and
cli.py dispatches through. Here too are the options several commands share (the dump's framework, the target and
how it is graded), so that each command adds them the same way."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from precheck.commands.values import fraction, positive_float
from precheck.execution.options import TARGETS
from precheck.grader.choices import DEFAULT_COSINE, DEFAULT_MAX_ABS, STANDARD_CHOICES

FRAMEWORKS = ("pytorch", "mindspore")  # precheck.dump.records.FRAMEWORKS, whose module loads torch

Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """A subcommand. ``add_arguments`` adds its options to its parser; ``handler`` runs it on the parsed
    arguments (the command line as typed is ``args.argv``) and returns its exit code, importing what it runs
    itself: ``precheck --help`` and an argument error load no torch."""

    name: str
    help: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Handler
    aliases: tuple[str, ...] = ()  # msprobe's names of the same command (acc_check for run_ut)
    torch: bool = False  # runs torch: refused on a torch below precheck's floor (precheck.torch_range)


def add_grading(parser: argparse.ArgumentParser) -> None:
    """The target and how it is graded: what ``run_ut``, ``generate`` and ``record --check`` share."""
    parser.add_argument(
        "-d",
        "--device",
        default="auto",
        help="target device: auto (npu, else cuda, else cpu), cpu, cuda, cuda:1, npu:0 or a bare index",
    )
    parser.add_argument(
        "--target",
        choices=TARGETS,
        default="device",
        help="what is graded: device (re-run each API on -d), recorded (the outputs and gradients the "
        "dump saved: no accelerator needed), compile (each API through torch.compile on -d), mindspore (a "
        "MindSpore dump's calls re-run by MindSpore on -d). A MindSpore dump's default is recorded for a tensor "
        "dump and mindspore for a statistics dump, as msprobe grades them. A mode, not a dump: compare's -target "
        "is the dump under test",
    )
    parser.add_argument(
        "--cosine",
        type=fraction,
        default=DEFAULT_COSINE,
        help=f"pass needs cosine above this (default {DEFAULT_COSINE})",
    )
    parser.add_argument(
        "--max-abs",
        type=positive_float,
        default=DEFAULT_MAX_ABS,
        help=f"pass needs max absolute error below this (default {DEFAULT_MAX_ABS:g})",
    )
    parser.add_argument(
        "--standard",
        choices=STANDARD_CHOICES,
        default="default",
        help="precision standard: default (cosine > --cosine and max abs < --max-abs, dtype-aware "
        "warning), msprobe (the incumbent's cascade), absolute, ulp, binary, thousandth, "
        "accumulative, benchmark (two references, see --bench-device), or auto (per API class)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of inputs generated from statistics; each API's inputs depend only on it and the "
        "API's name (default 0)",
    )


def add_dump_grading(parser: argparse.ArgumentParser) -> None:
    """The options ``run_ut`` and ``generate`` share: the grading, then the dump."""
    add_grading(parser)
    parser.add_argument(
        "-api_info",
        "--api_info",
        required=True,
        metavar="DUMP_JSON",
        help="the dump.json of an msprobe L1 dump (tensor files are read from dump_tensor_data/ beside it)",
    )


def grading_of(args: argparse.Namespace) -> dict[str, object]:
    """The grading options run_ut and generate share (:func:`add_grading`), as CheckOptions fields."""
    return {k: getattr(args, k) for k in ("cosine", "max_abs", "seed", "standard", "target")}
