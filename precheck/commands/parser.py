"""The command line's grammar: ``precheck``'s subcommands and their options (their value types, which turn a bad
value into argparse's one-line usage error, are values.py's)."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

from precheck.commands.cluster_options import add_tls_options
from precheck.commands.compare_cli import add_parsers as add_compare_parsers
from precheck.commands.record_cli import add_parsers as add_record_parsers
from precheck.commands.values import fraction, positive_float, positive_int, size
from precheck.execution.options import BACKENDS, TARGETS
from precheck.grader.choices import DEFAULT_COSINE, DEFAULT_MAX_ABS, STANDARD_CHOICES
from precheck.version import __version__

FRAMEWORKS = ("pytorch", "mindspore")  # precheck.dump.records.FRAMEWORKS, whose module loads torch


class _Parser(argparse.ArgumentParser):
    """argparse with errors in one line and a pointer to --help: its usage of run_ut alone is 12 lines, and an
    unknown option was named only among "unrecognized arguments", never with the option it was meant to be."""

    _given: list[str] = []

    def error(self, message: str) -> NoReturn:
        given = self._given[: self._given.index("--")] if "--" in self._given else self._given  # then a program's
        unknown = [a for a in given if a.startswith("-") and not self._takes(a)]
        if unknown and message.startswith("the following arguments are required"):  # --api-info for -api_info
            message = _unknown(unknown, self)
        elif message.startswith("argument command: invalid choice"):  # precheck runut
            message = _unknown_command(self)
        self.exit(2, f"{self.prog}: error: {message}\n  (see: {self.prog} --help)\n")

    def _takes(self, word: str) -> bool:
        """Whether ``word`` is one of this parser's options (or an abbreviation argparse takes, ``-n4``, ``-1``)."""
        name = word.split("=", 1)[0]
        known = self._option_string_actions
        return (
            any(option.startswith(name) for option in known if len(name) > 2)
            or word[:2] in known
            or word.lstrip("-").replace(".", "", 1).isdigit()
        )

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: object = None) -> tuple:  # type: ignore[override]
        self._given = list(args or [])  # a subcommand's parser is given the words after its name
        return super().parse_known_args(args, namespace)  # type: ignore[arg-type]

    def parse_args(self, args: Sequence[str] | None = None, namespace: object = None) -> argparse.Namespace:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._command(parsed)
            (command or self).error(_unknown(extras, command, self))
        return parsed

    def _command(self, parsed: argparse.Namespace) -> argparse.ArgumentParser | None:
        """The subcommand's parser, if one was named."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices.get(getattr(parsed, action.dest, None))
        return None


# msprobe's options that precheck has no equal of, and what a user of msprobe types here instead
MSPROBE_OPTIONS = {
    "-j": "worker processes are -n N here (msprobe's -j is its --jit_compile, which precheck does not take)",
    "--jit_compile": "precheck leaves torch_npu's jit compilation as the process starts with it (no switch needed); "
    "--target compile grades each API through torch.compile",
}


def _unknown(extras: list[str], *parsers: argparse.ArgumentParser | None) -> str:
    """The first argument no parser took: msprobe's option with what precheck uses instead, or the nearest
    option where it looks like a misspelt one."""
    option = next((e.split("=", 1)[0] for e in extras if e.startswith("-")), None)
    if option is None:
        return f"unexpected argument {extras[0]!r}"
    msprobe = MSPROBE_OPTIONS.get(option) or MSPROBE_OPTIONS.get(option[:2] if option[1] != "-" else "")
    if msprobe:
        return f"unknown option {option}: {msprobe}"
    known = [name for p in parsers if p is not None for name in p._option_string_actions]
    near = difflib.get_close_matches(option, known, n=1, cutoff=0.6)
    return f"unknown option {option}" + (f"; did you mean {near[0]}?" if near else "")


def _unknown_command(parser: _Parser) -> str:
    """The command typed where no subcommand is, with the nearest one (``runut``: run_ut)."""
    commands = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    given = parser._given
    valued = {i + 1 for i, word in enumerate(given) if word in ("-f", "--framework")}  # -f mindspore runut
    typed = next((w for i, w in enumerate(given) if i not in valued and not w.startswith("-")), "")
    near = difflib.get_close_matches(typed, list(commands), n=1, cutoff=0.6)
    return f"unknown command {typed!r}" + (f"; did you mean {near[0]}?" if near else f"; one of: {', '.join(commands)}")


def build_parser(handlers: Mapping[str, Callable[[argparse.Namespace], int]] | None = None) -> argparse.ArgumentParser:
    """The grammar; ``handlers`` (command name -> function of the parsed arguments) become each subcommand's
    ``func`` default, so the caller dispatches with ``args.func(args)``."""
    parser = _Parser(prog="precheck", description="API precision pre-check for PyTorch dumps")
    parser.add_argument("--version", action="version", version=f"precheck {__version__}")
    parser.add_argument(
        "-f",
        "--framework",
        dest="dump_framework",
        choices=FRAMEWORKS,
        default=None,
        help="msprobe's top-level -f (precheck -f mindspore run_ut ...): the dump's framework for run_ut, as its "
        "--framework (the other commands read it from the dump)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    grading = _grading_options()
    for add in (_add_run_ut, _add_generate):
        add(commands, grading)
    for add in (_add_apis, _add_repro, _add_precision_compare, _add_regress, _add_report, add_compare_parsers):
        add(commands)
    add_record_parsers(commands, grading_only())
    for name, sub in commands.choices.items():
        if handlers is not None:
            sub.set_defaults(func=handlers[name])
    return parser


def _grading_options() -> argparse.ArgumentParser:
    """The options ``run_ut`` and ``generate`` share: the dump, the target and how it is graded."""
    shared = argparse.ArgumentParser(add_help=False, parents=[grading_only()])
    shared.add_argument(
        "-api_info",
        "--api_info",
        required=True,
        metavar="DUMP_JSON",
        help="the dump.json of an msprobe L1 dump (tensor files are read from dump_tensor_data/ beside it)",
    )
    return shared


def grading_only() -> argparse.ArgumentParser:
    """The target and how it is graded: what ``record --check`` shares with run_ut and generate."""
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument(
        "-d",
        "--device",
        default="auto",
        help="target device: auto (npu, else cuda, else cpu), cpu, cuda, cuda:1, npu:0 or a bare index",
    )
    shared.add_argument(
        "--target",
        choices=TARGETS,
        default="device",
        help="what is graded: device (re-run each API on -d), recorded (the outputs and gradients the "
        "dump saved: no accelerator needed), compile (each API through torch.compile on -d), mindspore (a "
        "MindSpore dump's calls re-run by MindSpore on -d). A MindSpore dump's default is recorded for a tensor "
        "dump and mindspore for a statistics dump, as msprobe grades them. A mode, not a dump: compare's -target "
        "is the dump under test",
    )
    shared.add_argument(
        "--cosine",
        type=fraction,
        default=DEFAULT_COSINE,
        help=f"pass needs cosine above this (default {DEFAULT_COSINE})",
    )
    shared.add_argument(
        "--max-abs",
        type=positive_float,
        default=DEFAULT_MAX_ABS,
        help=f"pass needs max absolute error below this (default {DEFAULT_MAX_ABS:g})",
    )
    shared.add_argument(
        "--standard",
        choices=STANDARD_CHOICES,
        default="default",
        help="precision standard: default (cosine > --cosine and max abs < --max-abs, dtype-aware "
        "warning), msprobe (the incumbent's cascade), absolute, ulp, binary, thousandth, "
        "accumulative, benchmark (two references, see --bench-device), or auto (per API class)",
    )
    shared.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of inputs generated from statistics; each API's inputs depend only on it and the "
        "API's name (default 0)",
    )
    return shared


def _add_run_ut(commands: argparse._SubParsersAction, grading: argparse.ArgumentParser) -> None:
    """``run_ut``: what is checked and how it is graded; how the run goes is in :func:`_add_run_ut_execution`."""
    run = commands.add_parser(
        "run_ut",
        parents=[grading],
        help="replay an msprobe L1 dump against a CPU float64 golden",
        description="Replay every API of an msprobe L1 dump on the target device and grade "
        "it against a CPU float64 golden; writes msprobe-compatible CSVs.",
    )
    run.add_argument("-o", "--out_path", default=".", help="folder for the CSVs (default: current folder)")
    run.add_argument(
        "-n",
        "--workers",
        type=positive_int,
        default=None,
        help="worker processes (default: the machine's cores; small dumps run in-process)",
    )
    run.add_argument(
        "--bench-device",
        default=None,
        metavar="DEVICE",
        help="run each API also on this device in the target dtypes and grade the target's error "
        "relative to it (benchmark standard; default cpu when --standard benchmark)",
    )
    run.add_argument(
        "--random",
        action="store_true",
        help="generate inputs from the recorded statistics even where the dump saved the data",
    )
    _add_run_ut_execution(run)


def _add_run_ut_execution(run: argparse.ArgumentParser) -> None:
    """``run_ut``'s options on how the run goes: memory, resuming, workers' time, backend, selection, gates."""
    run.add_argument(
        "--max-memory",
        type=size,
        default=None,
        metavar="SIZE",
        help="a record needing more memory than this (e.g. 8G) is a SKIP row (default: half the "
        "machine's memory shared among the workers)",
    )
    run.add_argument(
        "-csv_path",
        "--csv_path",
        default=None,
        metavar="RESULT_CSV",
        help="continue an interrupted run: its accuracy_checking_result_<ts>.csv (the details CSV "
        "beside it is continued too); only the APIs it lacks are checked",
    )
    run.add_argument(
        "--timeout",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="seconds one API may take before it is a SKIP row, 'timed out; not graded' (default: 60 s plus "
        "20 times its predicted cost from its FLOPs and inputs, plus 300 s with --target compile)",
    )
    run.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="where APIs run: auto (in this process for a small dump, else worker processes; a Dask cluster "
        "with --scheduler), inprocess, process (supervised worker processes), or dask (needs --scheduler and "
        "the dask extra; its workers must see the dump's path)",
    )
    run.add_argument(
        "--scheduler", default=None, metavar="ADDRESS", help="Dask scheduler, e.g. tcp://host:8786 or tls://host:8786"
    )
    add_tls_options(run)
    run.add_argument(
        "--framework",
        choices=FRAMEWORKS,
        default=None,
        help="the dump's framework (default: its 'framework' field). A MindSpore dump's mint and Tensor calls "
        "are graded against their PyTorch equivalents in float64 (msprobe's -f is --filter_api here)",
    )
    run.add_argument(
        "-f",
        "--filter_api",
        action="store_true",
        help="check one call per signature (API, shapes, dtypes, non-tensor arguments); the others "
        "are left out and counted in the summary",
    )
    run.add_argument(
        "-config",
        "--config",
        default=None,
        metavar="CONFIG_JSON",
        help="msprobe-style white_list / black_list of API names (at the top level or under run_ut)",
    )
    run.add_argument(
        "-save_error_data",
        "--save_error_data",
        action="store_true",
        help="save the inputs, target and golden outputs of every API that is not pass under "
        "OUT_PATH/ut_error_data/<API>/",
    )
    run.add_argument(
        "--fail-on",
        choices=("error", "warning", "skip"),
        default=None,
        help="exit 1 when any API's forward or backward status is this or worse, or (skip) any is SKIP; a run "
        "that graded nothing (every API SKIP) fails whatever the choice (for CI gates)",
    )
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    run.add_argument(
        "--report", action="store_true", help="also write report_{ts}.html beside the CSVs (see precheck report)"
    )


def _add_generate(commands: argparse._SubParsersAction, grading: argparse.ArgumentParser) -> None:
    gen = commands.add_parser(
        "generate",
        parents=[grading],
        help="write a pytest suite: one test per forward API of a dump",
        description="Write a self-contained pytest suite that checks every forward API of "
        "the dump (forward and backward) with the given grading options.",
    )
    gen.add_argument("-o", "--out_path", required=True, metavar="SUITE", help="folder for the suite")
    gen.add_argument(
        "--copy-data", action="store_true", help="copy the dump and the tensor files the tests read into SUITE/data/"
    )


def _add_apis(commands: argparse._SubParsersAction) -> None:
    apis = commands.add_parser(
        "apis",
        help="list the supported APIs, or a dump's APIs that would be skipped",
        description="Without --check: supported APIs per prefix and standard class. With "
        "--check: the forward records of a dump that would be SKIP rows, "
        "grouped by reason, without running anything.",
    )
    apis.add_argument("--check", metavar="DUMP_JSON", default=None, help="the dump.json to check")
    apis.add_argument("--names", action="store_true", help="also print every supported name")


def _add_repro(commands: argparse._SubParsersAction) -> None:
    rep = commands.add_parser(
        "repro",
        help="write a standalone torch script reproducing one API's check",
        description="Write repro_<API>.py and its inputs: the call on a device in the "
        "recorded dtypes against a CPU float64 golden, needing only torch.",
    )
    rep.add_argument("api_name", metavar="API_NAME", help="a forward record's name, e.g. Torch.addmm.0")
    rep.add_argument("-api_info", "--api_info", required=True, metavar="DUMP_JSON", help="the dump.json holding it")
    rep.add_argument("-o", "--out_path", default=".", help="folder for the script and its inputs")
    rep.add_argument("--seed", type=int, default=0, help="seed of inputs generated from statistics")


def _add_precision_compare(commands: argparse._SubParsersAction) -> None:
    apc = commands.add_parser(
        "api_precision_compare",
        help="msprobe's second-stage verdict from an NPU and a GPU details CSV",
        description="Compare the details CSVs of the same dump run on a target (-npu) and a "
        "reference device (-gpu); writes api_precision_compare_{result,details}"
        "_{ts}.csv.",
    )
    apc.add_argument("-npu", "--npu_csv_path", required=True, help="details CSV of the target device")
    apc.add_argument("-gpu", "--gpu_csv_path", required=True, help="details CSV of the reference device")
    apc.add_argument("-o", "--out_path", default=".", help="folder for the CSVs (default: current folder)")
    apc.add_argument(
        "--standard",
        choices=("benchmark", "auto"),
        default="benchmark",
        help="benchmark: every float output by the ratio of its errors, as msprobe; auto: each API by "
        "the standard of its class",
    )


def _add_regress(commands: argparse._SubParsersAction) -> None:
    reg = commands.add_parser(
        "regress",
        help="regression gate: compare a result CSV with a baseline result CSV",
        description="Compare two result CSVs (precheck's or msprobe's; a run's output folder stands for its newest "
        "run's) API by API on their "
        "Forward and Backward statuses; writes regress_report.md and "
        "regress_report.json. Exit 1 when an API got worse (FAIL) or went "
        "MISSING (with --strict also when one IMPROVED), 0 otherwise.",
    )
    reg.add_argument(
        "--baseline", required=True, metavar="OLD_RESULT_CSV", help="the accepted result CSV, or its run's folder"
    )
    reg.add_argument(
        "--current", required=True, metavar="NEW_RESULT_CSV", help="the result CSV to judge, or its run's folder"
    )
    reg.add_argument(
        "-o",
        "--out_path",
        default=".",
        metavar="REPORT_DIR",
        help="folder for regress_report.md and regress_report.json (default: current folder)",
    )
    reg.add_argument(
        "--strict", action="store_true", help="also exit 1 when an API IMPROVED, so the baseline gets refreshed"
    )


def _add_report(commands: argparse._SubParsersAction) -> None:
    rep = commands.add_parser(
        "report",
        help="write a self-contained HTML report of a run (scatter plot, expert advice, table of APIs) or of a "
        "compare (divergence curve, suspects, table of records)",
        description="Write report_{ts}.html for a run: its output folder (the newest run there), or its "
        "details or result CSV (precheck's or msprobe's); or compare_report_{ts}.html for a compare: a folder "
        "holding one (its newest), or its compare_result, compare_records or compare_summary file. The page "
        "opens from file:// with no network.",
    )
    rep.add_argument(
        "path", metavar="OUT_DIR_OR_CSV", help="an output folder, or a run's details or result CSV, or a compare's file"
    )
    rep.add_argument("-o", "--out_path", default=None, help="folder for the page (default: beside the CSVs)")
