"""The commands around a run: ``generate``, ``apis``, ``repro``, ``api_precision_compare``, ``regress`` and
``report``, each its arguments and its handler, a thin skin over its library module (precheck.testgen,
precheck.support, precheck.repro, precheck.precision_compare, precheck.regress, precheck.report)."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter

from precheck.commands.command import Command, add_dump_grading, grading_of
from precheck.commands.console import warning_line
from precheck.escape import escape, shell_command
from precheck.execution.options import CheckOptions
from precheck.schema import STATUSES


def _generate_arguments(gen: argparse.ArgumentParser) -> None:
    add_dump_grading(gen)
    gen.add_argument("-o", "--out_path", required=True, metavar="SUITE", help="folder for the suite")
    gen.add_argument(
        "--copy-data", action="store_true", help="copy the dump and the tensor files the tests read into SUITE/data/"
    )


def _generate(args: argparse.Namespace) -> int:
    """The suite of what ``-api_info`` names, as run_ut reads it: a dump, a step folder (several ranks: a suite
    per rank in one folder) or a dump's top folder."""
    from precheck.dump.steps import DUMP_JSON, find_dumps

    found = find_dumps(args.api_info).require()  # before torch is loaded: a path typed wrong is answered at once
    if found.note:
        warning_line(escape(found.note))
    from precheck.testgen import generate, generate_step

    options = CheckOptions(device=args.device, **grading_of(args))
    dump = found.ranks[0].folder / DUMP_JSON if found.ranks and len(found.ranks) == 1 else found.path
    if found.ranks and len(found.ranks) > 1:
        tests = generate_step(found.ranks, args.out_path, options=options, copy_data=args.copy_data)
        names = ", ".join(escape(t.parent.name) for t in tests)
        run = shell_command("pytest", args.out_path)
        print(
            f"precheck generate: {len(tests)} ranks' suites written to {escape(args.out_path)} ({names}) (run: {run})"
        )
        return 0
    test = generate(dump, args.out_path, options=options, copy_data=args.copy_data)
    run = shell_command("pytest", test.parent)
    print(f"precheck generate: suite written to {escape(str(test.parent))} (run: {run})")
    return 0


def _apis_arguments(apis: argparse.ArgumentParser) -> None:
    apis.add_argument("--check", metavar="DUMP_JSON", default=None, help="the dump.json to check")
    apis.add_argument("--names", action="store_true", help="also print every supported name")


def _apis(args: argparse.Namespace) -> int:
    from api_registry import registry
    from precheck.support import describe_skips, describe_supported

    if args.check:
        print(describe_skips(args.check))
        return 0
    print(describe_supported())
    if args.names:
        print("\n".join(sorted(registry())))
    return 0


def _repro_arguments(rep: argparse.ArgumentParser) -> None:
    rep.add_argument("api_name", metavar="API_NAME", help="a forward record's name, e.g. Torch.addmm.0")
    rep.add_argument("-api_info", "--api_info", required=True, metavar="DUMP_JSON", help="the dump.json holding it")
    rep.add_argument("-o", "--out_path", default=".", help="folder for the script and its inputs")
    rep.add_argument("--seed", type=int, default=0, help="seed of inputs generated from statistics")


def _repro(args: argparse.Namespace) -> int:
    from precheck.repro import write_repro

    script = write_repro(args.api_name, args.api_info, args.out_path, seed=args.seed)
    print(f"precheck repro: {escape(str(script))} (run: {shell_command('python', script)} [DEVICE])")
    return 0


def _precision_compare_arguments(apc: argparse.ArgumentParser) -> None:
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


def _precision_compare(args: argparse.Namespace) -> int:
    from precheck.precision_compare import api_precision_compare

    summary = api_precision_compare(args.npu_csv_path, args.gpu_csv_path, args.out_path, args.standard)
    counts = Counter(f for f, _ in summary.apis.values())
    print(
        f"precheck api_precision_compare: {len(summary.apis)} APIs; forward: "
        + ", ".join(f"{k} {counts.get(k, 0)}" for k in STATUSES)
        + f"\n  result:  {summary.result_path}\n  details: {summary.details_path}"
    )
    return 0


def _regress_arguments(reg: argparse.ArgumentParser) -> None:
    reg.add_argument(
        "--baseline",
        required=True,
        metavar="OLD_RESULT_CSV",
        help="the accepted result CSV, or its run's folder, or a step's run folder (rank0/, rank1/ ... or proc*/)",
    )
    reg.add_argument(
        "--current",
        required=True,
        metavar="NEW_RESULT_CSV",
        help="the result CSV to judge, or its run's folder, or a step's run folder (paired rank by rank)",
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
    reg.add_argument(
        "--settings-may-differ",
        action="store_true",
        help="do not fail when the two runs' records say they were graded differently (target, device, standard, "
        "thresholds, torch version): the differences are still named",
    )


def _regress(args: argparse.Namespace) -> int:
    from precheck.regress import FAIL, IMPROVED, MISSING, REPORT_HTML, regress, write_report

    report = regress(args.baseline, args.current)
    md_path, json_path = write_report(report, args.out_path)
    print(f"precheck regress: {report.summary()}")
    for runs in report.ranks:  # a step's run: each rank's outcome, so the log says which rank went wrong
        print(f"  {escape(runs.rank)}: {report.rank_outcome(runs)}")
    for line in report.worse_lines():  # each API that fails the gate, before and after, and why
        print(line)
    print(f"  markdown: {md_path}\n  json:     {json_path}\n  page:     {md_path.with_name(REPORT_HTML)}")
    if report.settings:
        warning_line("the two runs were made with different settings: " + escape("; ".join(report.settings)))
    if report.unchecked():
        warning_line(escape(report.unchecked() or ""))
    code = report.exit_code(args.strict, args.settings_may_differ)
    if code:
        counts = report.counts
        why = [
            f"{counts[FAIL]} got worse (FAIL)" if counts[FAIL] else "",
            f"{counts[MISSING]} went MISSING" if counts[MISSING] else "",
            f"{counts[IMPROVED]} IMPROVED (--strict: refresh the baseline)" if args.strict and counts[IMPROVED] else "",
            "their settings differ (--settings-may-differ to compare them all the same)"
            if report.settings and not args.settings_may_differ
            else "",
        ]
        print("precheck: regress: " + "; ".join(w for w in why if w), file=sys.stderr)
    return code


def _report_arguments(rep: argparse.ArgumentParser) -> None:
    rep.add_argument(
        "path", metavar="OUT_DIR_OR_CSV", help="an output folder, or a run's details or result CSV, or a compare's file"
    )
    rep.add_argument("-o", "--out_path", default=None, help="folder for the page (default: beside the CSVs)")


def _report(args: argparse.Namespace) -> int:
    from precheck.report.pages import write_page

    with warnings.catch_warnings():
        warnings.showwarning = warning_line
        page = write_page(args.path, args.out_path)
    print(f"precheck report: {escape(str(page))}")
    return 0


COMMANDS = (
    Command(
        "generate",
        help="write a pytest suite: one test per forward API of a dump",
        description="Write a self-contained pytest suite that checks every forward API of "
        "the dump (forward and backward) with the given grading options.",
        add_arguments=_generate_arguments,
        handler=_generate,
        torch=True,
    ),
    Command(
        "apis",
        help="list the supported APIs, or a dump's APIs that would be skipped",
        description="Without --check: supported APIs per prefix and standard class. With "
        "--check: the forward records of a dump that would be SKIP rows, "
        "grouped by reason, without running anything.",
        add_arguments=_apis_arguments,
        handler=_apis,
        torch=True,
    ),
    Command(
        "repro",
        help="write a standalone torch script reproducing one API's check",
        description="Write repro_<API>.py and its inputs: the call on a device in the "
        "recorded dtypes against a CPU float64 golden, needing only torch.",
        add_arguments=_repro_arguments,
        handler=_repro,
        torch=True,
    ),
    Command(
        "api_precision_compare",
        help="msprobe's second-stage verdict from an NPU and a GPU details CSV",
        description="Compare the details CSVs of the same dump run on a target (-npu) and a "
        "reference device (-gpu); writes api_precision_compare_{result,details}"
        "_{ts}.csv.",
        add_arguments=_precision_compare_arguments,
        handler=_precision_compare,
    ),
    Command(
        "regress",
        help="regression gate: compare a result CSV with a baseline result CSV",
        description="Compare two result CSVs (precheck's or msprobe's; a run's output folder stands for its newest "
        "run's, a step's run folder for each rank's, paired by rank) API by API on their "
        "Forward and Backward statuses; writes regress_report.md and "
        "regress_report.json. Exit 1 when an API got worse (FAIL) or went "
        "MISSING (with --strict also when one IMPROVED), 0 otherwise.",
        add_arguments=_regress_arguments,
        handler=_regress,
    ),
    Command(
        "report",
        help="write a self-contained HTML report of a run (scatter plot, expert advice, table of APIs) or of a "
        "compare (divergence curve, suspects, table of records)",
        description="Write report_{ts}.html for a run: its output folder (the newest run there), or its "
        "details or result CSV (precheck's or msprobe's); or compare_report_{ts}.html for a compare: a folder "
        "holding one (its newest), or its compare_result, compare_records or compare_summary file. The page "
        "opens from file:// with no network.",
        add_arguments=_report_arguments,
        handler=_report,
    ),
)
