"""``precheck`` command line: a thin layer over :func:`precheck.run_ut.run_ut`.

Exit codes: 0 the run completed (whatever the statuses), 1 ``--fail-on`` tripped, 2 unusable input (one line on
stderr, no traceback), 130 interrupted by Ctrl-C, 143 by SIGTERM (every finished row is already on disk, and the
message names the command that continues the run).
"""

from __future__ import annotations

import argparse
import math
import shlex
import signal
import sys
import threading
import warnings
from collections import Counter
from pathlib import Path

from precheck import __version__
from precheck.check import CheckOptions
from precheck.dump import DumpError
from precheck.escape import escape
from precheck.grader import DEFAULT_COSINE, DEFAULT_MAX_ABS, STANDARD_CHOICES
from precheck.inputs import InputError
from precheck.paths import OutputError, write_problem
from precheck.pool import WorkerStartError
from precheck.runfiles import RunFileError
from precheck.selection import ConfigError, load_api_lists
from precheck.targets import TARGETS, DeviceError


def _number(text: str, kind: type, expected: str) -> int | float:
    """``text`` as a finite number of ``kind``; argparse would say "invalid _fraction value" about a ValueError."""
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r} (expected {expected})") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not finite (expected {expected})")
    return value


def _positive_int(text: str) -> int:
    value = _number(text, int, "a whole number, at least 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is below 1 (expected a whole number, at least 1)")
    return value


def _fraction(text: str) -> float:
    value = _number(text, float, "a number in [0, 1], such as 0.99")
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is outside [0, 1] (expected a number such as 0.99)")
    return value


def _positive_float(text: str) -> float:
    value = _number(text, float, "a number above 0, such as 1e-4")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not above 0 (expected a number such as 1e-4)")
    return value


MIN_MEMORY = 2**20  # below a megabyte no record's inputs fit: every row would be SKIP


def _size(text: str) -> int:
    """A memory size: bytes, or a number with K, M, G or T (powers of 1024); finite and at least 1M."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = units[t[-1]] if t and t[-1] in units else 1
    value = _number(text.strip()[: len(t) - (unit > 1)], float, "a size such as 512M or 8G") * unit
    if not math.isfinite(value) or value < MIN_MEMORY:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size from 1M up (examples: 512M, 8G)")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="precheck", description="API precision pre-check for PyTorch dumps")
    parser.add_argument("--version", action="version", version=f"precheck {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run_ut",
        help="replay an msprobe L1 dump against a CPU float64 golden",
        description="Replay every API of an msprobe L1 dump on the target device and grade "
        "it against a CPU float64 golden; writes msprobe-compatible CSVs.",
    )
    run.add_argument(
        "-api_info",
        "--api_info",
        required=True,
        metavar="DUMP_JSON",
        help="the dump.json of an msprobe L1 dump (tensor files are read from dump_tensor_data/ beside it)",
    )
    run.add_argument("-o", "--out_path", default=".", help="folder for the CSVs (default: current folder)")
    run.add_argument(
        "-d",
        "--device",
        default="auto",
        help="target device: auto (npu, else cuda, else cpu), cpu, cuda, cuda:1, npu:0 or a bare index",
    )
    run.add_argument(
        "--target",
        choices=TARGETS,
        default="device",
        help="what is graded: device (re-run each API on -d), recorded (the outputs and gradients the "
        "dump saved: no accelerator needed), compile (each API through torch.compile on -d)",
    )
    run.add_argument(
        "-n",
        "--workers",
        type=_positive_int,
        default=None,
        help="worker processes (default: the machine's cores; small dumps run in-process)",
    )
    run.add_argument(
        "--cosine",
        type=_fraction,
        default=DEFAULT_COSINE,
        help=f"pass needs cosine above this (default {DEFAULT_COSINE})",
    )
    run.add_argument(
        "--max-abs",
        type=_positive_float,
        default=DEFAULT_MAX_ABS,
        help=f"pass needs max absolute error below this (default {DEFAULT_MAX_ABS:g})",
    )
    run.add_argument(
        "--standard",
        choices=STANDARD_CHOICES,
        default="default",
        help="precision standard: default (cosine > --cosine and max abs < --max-abs, dtype-aware "
        "warning), msprobe (the incumbent's cascade), absolute, ulp, binary, thousandth, "
        "accumulative, benchmark (two references, see --bench-device), or auto (per API class)",
    )
    run.add_argument(
        "--bench-device",
        default=None,
        metavar="DEVICE",
        help="run each API also on this device in the target dtypes and grade the target's error "
        "relative to it (benchmark standard; default cpu when --standard benchmark)",
    )
    run.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of inputs generated from statistics; each API's inputs depend only on it and the "
        "API's name (default 0)",
    )
    run.add_argument(
        "--random",
        action="store_true",
        help="generate inputs from the recorded statistics even where the dump saved the data",
    )
    run.add_argument(
        "--max-memory",
        type=_size,
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
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="seconds one API may take in a worker before it is an error row (default: 120 s plus "
        "1 s per million input elements, plus 300 s with --target compile)",
    )
    run.add_argument(
        "--backend",
        choices=("local", "dask"),
        default="local",
        help="local worker processes (default), or a Dask cluster (needs --scheduler and the dask "
        "extra; its workers must see the dump's path)",
    )
    run.add_argument("--scheduler", default=None, metavar="ADDRESS", help="Dask scheduler, e.g. tcp://host:8786")
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

    gen = commands.add_parser(
        "generate",
        help="write a pytest suite: one test per forward API of a dump",
        description="Write a self-contained pytest suite that checks every forward API of "
        "the dump (forward and backward) with the given grading options.",
    )
    gen.add_argument("-api_info", "--api_info", required=True, metavar="DUMP_JSON", help="the dump.json to test")
    gen.add_argument("-o", "--out_path", required=True, metavar="SUITE", help="folder for the suite")
    gen.add_argument(
        "--copy-data", action="store_true", help="copy the dump and the tensor files the tests read into SUITE/data/"
    )
    gen.add_argument("-d", "--device", default="auto", help="target device when the suite runs (default auto)")
    gen.add_argument("--standard", choices=STANDARD_CHOICES, default="default", help="precision standard")
    gen.add_argument("--target", choices=TARGETS, default="device", help="what the tests grade")
    gen.add_argument("--cosine", type=_fraction, default=DEFAULT_COSINE)
    gen.add_argument("--max-abs", type=_positive_float, default=DEFAULT_MAX_ABS)
    gen.add_argument("--seed", type=int, default=0, help="seed of inputs generated from statistics")

    apis = commands.add_parser(
        "apis",
        help="list the supported APIs, or a dump's APIs that would be skipped",
        description="Without --check: supported APIs per prefix and standard class. With "
        "--check: the forward records of a dump that would be SKIP rows, "
        "grouped by reason, without running anything.",
    )
    apis.add_argument("--check", metavar="DUMP_JSON", default=None, help="the dump.json to check")
    apis.add_argument("--names", action="store_true", help="also print every supported name")

    rep = commands.add_parser(
        "repro",
        help="write a standalone torch script reproducing one API's check",
        description="Write repro_<API>.py and its inputs: the call on a device in the "
        "recorded dtypes against a CPU float64 golden, needing only torch.",
    )
    rep.add_argument("api_name", metavar="API_NAME", help="a forward record's name, e.g. Torch.addmm.0")
    rep.add_argument("-api_info", "--api_info", required=True, metavar="DUMP_JSON")
    rep.add_argument("-o", "--out_path", default=".", help="folder for the script and its inputs")
    rep.add_argument("--seed", type=int, default=0, help="seed of inputs generated from statistics")

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

    reg = commands.add_parser(
        "regress",
        help="regression gate: compare a result CSV with a baseline result CSV",
        description="Compare two result CSVs (precheck's or msprobe's) API by API on their "
        "Forward and Backward statuses; writes regress_report.md and "
        "regress_report.json. Exit 1 when an API got worse (FAIL) or went "
        "MISSING (with --strict also when one IMPROVED), 0 otherwise.",
    )
    reg.add_argument("--baseline", required=True, metavar="OLD_RESULT_CSV", help="the accepted result CSV")
    reg.add_argument("--current", required=True, metavar="NEW_RESULT_CSV", help="the result CSV to judge")
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
    return parser


def _error(reason: object) -> None:
    """The one line an unusable input gets on stderr; text from a dump in it is escaped (no terminal control)."""
    print(f"precheck: error: {escape(str(reason))}", file=sys.stderr)


def _precision_compare(args: argparse.Namespace) -> int:
    from precheck.precision_compare import CompareError, api_precision_compare

    try:
        summary = api_precision_compare(args.npu_csv_path, args.gpu_csv_path, args.out_path, args.standard)
    except (CompareError, OutputError) as e:
        _error(e)
        return 2
    except OSError as e:
        _error(write_problem(e))
        return 2
    counts = Counter(f for f, _ in summary.apis.values())
    print(
        f"precheck api_precision_compare: {len(summary.apis)} APIs; forward: "
        + ", ".join(f"{k} {counts.get(k, 0)}" for k in ("pass", "warning", "error", "SKIP"))
        + f"\n  result:  {summary.result_path}\n  details: {summary.details_path}"
    )
    return 0


def _regress(args: argparse.Namespace) -> int:
    from precheck.regress import FAIL, IMPROVED, MISSING, RegressError, regress, write_report

    try:
        report = regress(args.baseline, args.current)
    except RegressError as e:
        _error(e)
        return 2
    try:
        md_path, json_path = write_report(report, args.out_path)
    except OSError as e:
        _error(f"cannot write the report: {e}")
        return 2
    print(f"precheck regress: {report.summary()}\n  markdown: {md_path}\n  json:     {json_path}")
    code = report.exit_code(args.strict)
    if code:
        counts = report.counts
        why = [
            f"{counts[FAIL]} got worse (FAIL)" if counts[FAIL] else "",
            f"{counts[MISSING]} went MISSING" if counts[MISSING] else "",
            f"{counts[IMPROVED]} IMPROVED (--strict: refresh the baseline)" if args.strict and counts[IMPROVED] else "",
        ]
        print("precheck: regress: " + "; ".join(w for w in why if w), file=sys.stderr)
    return code


def _generate(args: argparse.Namespace) -> int:
    from precheck.testgen import SuiteError, generate

    options = CheckOptions(
        device=args.device,
        standard=args.standard,
        target=args.target,
        cosine=args.cosine,
        max_abs=args.max_abs,
        seed=args.seed,
    )
    try:
        test = generate(args.api_info, args.out_path, options=options, copy_data=args.copy_data)
    except (DumpError, SuiteError, OutputError) as e:
        _error(e)
        return 2
    except OSError as e:
        _error(write_problem(e))
        return 2
    print(f"precheck generate: suite written to {test.parent} (run: pytest {test.parent})")
    return 0


def _apis(args: argparse.Namespace) -> int:
    from api_registry import registry
    from precheck.apis import describe_skips, describe_supported

    if args.check:
        try:
            print(describe_skips(args.check))
        except DumpError as e:
            _error(e)
            return 2
        return 0
    print(describe_supported())
    if args.names:
        print("\n".join(sorted(registry())))
    return 0


def _repro(args: argparse.Namespace) -> int:
    from precheck.repro import ReproError, write_repro

    try:
        script = write_repro(args.api_name, args.api_info, args.out_path, seed=args.seed)
    except (DumpError, ReproError, InputError, OutputError) as e:
        _error(e)
        return 2
    except OSError as e:
        _error(write_problem(e))
        return 2
    print(f"precheck repro: {script} (run: python {script} [DEVICE])")
    return 0


def _scheduler(args: argparse.Namespace) -> str | None:
    if args.backend == "dask" and not args.scheduler:
        raise ValueError("--backend dask needs --scheduler ADDRESS")
    if args.scheduler and args.backend != "dask":
        raise ValueError("--scheduler goes with --backend dask")
    return args.scheduler


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `precheck ... | head`: the reader left, nothing more to say
        sys.stderr.close()
        return 0


def _main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "repro":
        return _repro(args)
    if args.command == "apis":
        return _apis(args)
    if args.command == "api_precision_compare":
        return _precision_compare(args)
    if args.command == "generate":
        return _generate(args)
    if args.command == "regress":
        return _regress(args)
    return _run(args, sys.argv[1:] if argv is None else argv)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, stopped like Ctrl-C (exit code 143)."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    from precheck.run_ut import Interrupted, run_ut  # imports torch: keep --help and argument errors fast

    stop_on_term = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if stop_on_term else None
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_line
            summary = run_ut(
                args.api_info,
                args.out_path,
                device=args.device,
                workers=args.workers,
                keep_results=False,
                options=_check_options(args),
                csv_path=args.csv_path,
                filter_api=args.filter_api,
                scheduler=_scheduler(args),
                api_lists=load_api_lists(args.config) if args.config else None,
                progress=not args.quiet,
            )
    except (DumpError, DeviceError, RunFileError, ConfigError, WorkerStartError, ValueError) as e:
        _error(e)
        return 2
    except OSError as e:
        _error(f"cannot write results: {e}")
        return 2
    except KeyboardInterrupt as e:
        terminated = isinstance(e, _Terminated) or isinstance(e.__cause__, _Terminated)
        how = "terminated (SIGTERM)" if terminated else "interrupted"
        if isinstance(e, Interrupted):
            again = shlex.join(["precheck", *_without_csv_path(argv), "-csv_path", str(e.result_path)])
            print(
                f"precheck: {how}; {e.finished} finished APIs are in {e.result_path}; continue with: {again}",
                file=sys.stderr,
            )
        else:
            print(f"precheck: {how} before the run started", file=sys.stderr)
        return 143 if terminated else 130
    finally:
        if stop_on_term:
            signal.signal(signal.SIGTERM, previous)
    print(summary.describe())
    why = summary.gate(args.fail_on) if args.fail_on else None
    if why:
        print(f"precheck: {why}", file=sys.stderr)
        return 1
    return 0


def _check_options(args: argparse.Namespace) -> CheckOptions:
    return CheckOptions(
        cosine=args.cosine,
        max_abs=args.max_abs,
        seed=args.seed,
        force_random=args.random,
        max_memory=args.max_memory,
        standard=args.standard,
        bench_device=args.bench_device,
        target=args.target,
        save_error_data=str(Path(args.out_path) / "ut_error_data") if args.save_error_data else None,
        timeout=args.timeout,
    )


def _warning_line(message: Warning | str, *args: object, **kwargs: object) -> None:
    print(f"precheck: warning: {message}", file=sys.stderr)


def _without_csv_path(argv: list[str]) -> list[str]:
    """The command line as typed, less its -csv_path (the resume command adds the one to continue)."""
    kept, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token in ("-csv_path", "--csv_path"):
            skip = True
        elif not token.startswith(("-csv_path=", "--csv_path=")):
            kept.append(token)
    return kept


if __name__ == "__main__":
    sys.exit(main())
