"""`precheck compare` and `precheck overflow`: their grammar and handlers, a thin skin over precheck.compare.

Exit codes as for run_ut: 0 the compare completed, 2 an input that cannot be used (one line, no traceback).
Neither command imports torch unless ``--precheck`` runs the suspects or the honest-kernel rule grades records
of a tensor dump (precheck.compare.localize).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from precheck.commands.command import Command
from precheck.commands.values import positive_float, positive_int, size, stack_json, tolerance
from precheck.escape import escape

if TYPE_CHECKING:
    from precheck.compare.peers import Peers
    from precheck.compare.summary import DumpComparison


MAX_NOT_GRADED_SHOWN = 5  # replayed calls refused, crashed or cut named on the console (the summary keeps more)


def _compare_arguments(cmp: argparse.ArgumentParser) -> None:
    cmp.add_argument(
        "-target",
        "--target",
        "-tp",
        "--target_path",
        dest="target",
        metavar="DUMP",
        help="the dump under test (msprobe's npu_path): a dump.json, its folder, or a dump's top folder of "
        "step*/rank*; a dump here, not run_ut's --target, which is a device or mode",
    )
    cmp.add_argument(
        "-bench",
        "--bench",
        "-gp",
        "--golden_path",
        dest="bench",
        metavar="DUMP",
        help="the reference run's dump of the same step (msprobe's bench_path), in the same form as -target",
    )
    cmp.add_argument("-i", "--input_path", metavar="COMPARE_JSON", help="msprobe's compare.json (npu_path, ...)")
    cmp.add_argument("-o", "--out_path", default=".", help="folder for the CSV and the summary")
    cmp.add_argument("-lm", "--layer_mapping", metavar="YAML", help="msprobe's layer mapping of module names")
    cmp.add_argument(
        "-s",
        "--stack_path",
        type=stack_json,
        metavar="STACK_JSON",
        help="the target's stack.json (default: beside); not msprobe's -s switch, the stacks are always read",
    )
    cmp.add_argument(
        "--precheck",
        action="store_true",
        help="replay the suspect APIs of the target against the float64 golden (run_ut's CSVs beside)",
    )
    cmp.add_argument("--device", default="cpu", help="where --precheck re-runs calls of a statistics dump")
    cmp.add_argument(
        "--max-memory",
        type=size,
        default=None,
        metavar="SIZE",
        help="a replayed call needing more memory than this (e.g. 8G) is not graded, as run_ut's SKIP row "
        "(default: half the machine's memory)",
    )
    cmp.add_argument(
        "--timeout",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="seconds one replayed call may take before it is cut, not graded, and the replay stops (default: "
        "run_ut's, 60 s plus 20 times its predicted cost)",
    )
    cmp.add_argument(
        "--replay-budget",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="seconds all the calls the honest-kernel rule replays may take together; once spent the replay stops "
        "and the summary says where (default: 300)",
    )
    cmp.add_argument(
        "--report",
        action="store_true",
        help="also write compare_report_{ts}.html: the divergence curve, the suspects and the records (see report)",
    )


def _overflow_arguments(ovf: argparse.ArgumentParser) -> None:
    ovf.add_argument("dump", metavar="DUMP", help="a dump.json or the folder holding it")
    ovf.add_argument("-n", "--limit", type=positive_int, default=20, help="how many records to list (default 20)")


def _logits_arguments(lg: argparse.ArgumentParser) -> None:
    lg.add_argument("-target", "--target", required=True, metavar="LOGITS", help="the logits of the run under test")
    lg.add_argument("-bench", "--bench", required=True, metavar="LOGITS", help="the logits of the reference run")
    lg.add_argument("-o", "--out_path", default=".", help="folder for the CSV")


def _keydata_arguments(kd: argparse.ArgumentParser) -> None:
    kd.add_argument("-target", "--target", required=True, metavar="DUMP", help="the target's dump_path")
    kd.add_argument("-bench", "--bench", required=True, metavar="DUMP", help="the bench's dump_path")
    kd.add_argument("-o", "--out_path", default=".", help="folder for the CSV and the summary")
    kd.add_argument("--rtol", type=tolerance, default=1e-3, help="relative tolerance of a close item (default 1e-3)")
    kd.add_argument("--atol", type=tolerance, default=1e-6, help="absolute tolerance of a close item (default 1e-6)")


def _compare(args: argparse.Namespace) -> int:
    from precheck.compare.dumps import compare_dumps
    from precheck.compare.entries import CompareInputError
    from precheck.compare.mapping import load_layer_mapping
    from precheck.compare.session import read_compare_json, resolve

    target, bench, stack = args.target, args.bench, args.stack_path
    if args.input_path:
        target, bench, json_stack = read_compare_json(args.input_path)
        stack = stack or json_stack
    if not target or not bench:
        raise CompareInputError("give -target and -bench (two dumps), or -i compare.json")
    mapping = load_layer_mapping(args.layer_mapping) if args.layer_mapping else None
    compared = []
    pairs = resolve(target, bench)
    for pair in pairs:
        out = Path(args.out_path) / pair.folder
        result = compare_dumps(
            pair.target, pair.bench, out, layer_mapping=mapping, stack_path=stack, suffix=pair.suffix,
            max_memory=args.max_memory, timeout=args.timeout, peers=_peers(pair, pairs), **_budget(args),
        )  # fmt: skip
        compared.append((pair, out, result))
    steps = _steps(compared)  # a step's ranks read as one before any rank's suspects are named
    for _, out, result in compared:
        if result.stack_problem:
            print(
                escape(f"precheck: warning: {result.stack_problem}; compared without the call stacks"), file=sys.stderr
            )
        if args.precheck:
            _precheck(result, out, args)
        print(describe(result))
        if args.report:
            _report(result)
    for path, verdict in steps:
        print("\n".join(escape(line) for line in [*verdict.lines(), f"  step:    {path}"]))
    return 0


def _peers(pair, pairs: list) -> Peers | None:
    """The other ranks of ``pair``'s step (precheck.compare.peers); None for a dump that is no rank of a step."""
    from precheck.compare.peers import Peers

    if pair.rank is None:
        return None
    ranks = [(p.rank, p.target, p.bench) for p in pairs if p.folder == pair.folder and p.rank not in (None, pair.rank)]
    return Peers(ranks) if ranks else None


def _steps(compared: list) -> list:
    """The verdict of each step of two or more ranks (precheck.compare.steps) and the file it is written in."""
    from precheck.compare.steps import step_verdict, write_step

    folders: dict[Path, dict] = {}
    for pair, out, result in compared:
        if pair.rank is not None:
            folders.setdefault(out, {})[pair.rank] = result
    found = []
    for out, ranks in folders.items():
        if len(ranks) > 1:
            verdict = step_verdict(ranks)
            found.append((write_step(verdict, out), verdict))
    return found


def _budget(args: argparse.Namespace) -> dict[str, float]:
    """--replay-budget where given: compare_dumps' own default otherwise (the CLI imports no compare module to
    learn it)."""
    return {} if args.replay_budget is None else {"replay_budget": args.replay_budget}


def _report(result: DumpComparison) -> None:
    """The compare's page; one that cannot be written costs only the page (the CSVs are on disk)."""
    from precheck.report.compare_html import write_compare_report

    try:
        print(f"  report:  {escape(str(write_compare_report(result.summary_path)))}")
    except (OSError, ValueError) as e:
        print(f"precheck: warning: no report: {escape(str(e))}", file=sys.stderr)


def _precheck(result: DumpComparison, out: Path, args: argparse.Namespace) -> None:
    from precheck.compare.dumps import write_summary
    from precheck.compare.record_log import add_verdicts
    from precheck.compare.suspects import precheck_suspects
    from precheck.execution.options import CheckOptions
    from precheck.run_ut import run_ut

    limits = CheckOptions(device=args.device, max_memory=args.max_memory, timeout=args.timeout)
    precheck_suspects(result, out, run_ut, limits)
    add_verdicts(result.records_path, result.prechecked)
    write_summary(result)


def describe(result: DumpComparison) -> str:
    """The compare's closing lines: counts, the first divergent record and why, the suspects, unmatched runs."""
    from precheck.compare.divergence import UNDEFINED, agreement, precision_line
    from precheck.schema import CompareConst

    d = result.divergence
    counts = ", ".join(f"{k} {result.results.get(k, 0)}" for k in CompareConst.RESULTS)
    lines = [
        f"precheck compare ({result.mode}): {sum(d.verdicts.values())} records; msprobe's Result of their "
        f"{result.rows} rows, each tensor on its own: {counts} in {result.wall_seconds:.2f} s"
    ]
    first = f"  first divergent: {d.first.why()}{_v(result, d.first.name)}" if d.first else None
    lines.append(first or f"  {precision_line(d.explained, d.localization) or agreement(d.rounding(), d.localization)}")
    lines += _rule(d.localization, named=d.first is not None)
    for f in d.suspects[:10]:
        if f is not d.first:
            deviation = f"(output deviation {f.output_deviation:.3g}){f.rewritten_note()}"
            lines.append(f"  {f.verdict}: {f.name} {deviation}" + _v(result, f.name))
    for run in result.unmatched[:5]:
        span = run["first"] if run["count"] == 1 else f"{run['first']} .. {run['last']}"
        lines.append(f"  only in the {run['side']}: {span} ({run['count']} records)")
    if result.first_overflow:
        lines.append(f"  first overflow on the target only: {result.first_overflow}")
    if result.undefined:
        shown = ", ".join(result.undefined[:3]) + (" ..." if len(result.undefined) > 3 else "")
        lines.append(
            f"  not comparable: {d.verdicts[UNDEFINED]} records whose tensors neither run defined (NaN, no "
            f"statistics, or a Norm past float range, in both runs, or in one run where a peer rank's same record "
            f"reads them in both), not a divergence: {shown}"
        )
    lines += [f"  csv:     {result.csv_path}", f"  records: {result.records_path}", f"  summary: {result.summary_path}"]
    if result.precheck_csv:
        lines.append(f"  precheck: {result.precheck_csv}")
    return "\n".join(escape(line) for line in lines)


def _rule(localization: dict, named: bool) -> list[str]:
    """Which rule named the first divergent record, the honest kernel's (each side graded) or the tolerance's; where
    none was named, what the honest-kernel rule graded, if anything."""
    graded = localization.get("replayed_calls") or 0
    if not named and not graded:
        return []
    cost = f"; {graded} call(s) graded in {localization.get('replay_seconds', 0):.2f} s" if graded else ""
    head = f"named by the {localization.get('rule')} rule" if named else "the honest-kernel rule"
    lines = [f"  {head}: {localization.get('why', '')}{cost}"]
    for call in localization.get("not_graded", [])[:MAX_NOT_GRADED_SHOWN]:
        lines.append(f"  not graded: {call['record']} ({call['side']}): {call['why']}")
    return lines


def _v(result: DumpComparison, name: str) -> str:
    from precheck.compare.record_log import verdict_text

    v = result.prechecked.get(name)
    return f"; precheck: {verdict_text(v)}" if v else ""


def _overflow(args: argparse.Namespace) -> int:
    from precheck.compare.overflow import first_overflows

    found = first_overflows(args.dump, args.limit)
    if not found:
        print("precheck overflow: no record turns finite inputs into inf or nan")
        return 0
    print(f"precheck overflow: {len(found)} records turn finite inputs into inf or nan (execution order):")
    for f in found:
        print(escape(f"  {f.record}: {f.output} holds {f.what}"))
    sys.stdout.flush()
    return 0


def _logits(args: argparse.Namespace) -> int:
    from precheck.compare.logits import compare_logits

    result = compare_logits(args.target, args.bench, args.out_path)
    if result.lengths[0] != result.lengths[1]:
        print(f"precheck logits: the target has {result.lengths[0]} tokens, the bench {result.lengths[1]}: "
              f"the first {result.tokens} are compared")  # fmt: skip
    unreadable = [r for r in result.rows if r["Result"] == "unreadable"]
    if result.first_failing is None:
        read = f"the {result.tokens - len(unreadable)} read agree" if unreadable else "all agree"
        print(f"precheck logits: {result.tokens} tokens, {read}")
    else:
        row = result.rows[result.first_failing]
        print(
            f"precheck logits: {result.tokens} tokens; the first failing token is {result.first_failing} "
            f"(cosine {row['Cosine']}, KL {row['KL divergence']:.3g}, top-1 "
            f"{'agrees' if row['Top-1 agrees'] else 'differs'}, top-5 overlap {row['Top-5 overlap']:.0%})"
        )
        differs = next((r["Token"] for r in result.rows if r["Top-1 agrees"] is False), None)
        if differs is not None:
            print(f"  the generated text parts at token {differs} (top-1 differs)")
    if unreadable:
        print(escape(f"  {len(unreadable)} tokens not compared, the first {unreadable[0]['Token']}: "
                     f"{unreadable[0]['Message']}"))  # fmt: skip
    print(escape(f"  csv: {result.csv_path}"))
    return 0


def _keydata(args: argparse.Namespace) -> int:
    from precheck.compare.keydata import compare_keydata

    result = compare_keydata(args.target, args.bench, args.out_path, rtol=args.rtol, atol=args.atol)
    counts = ", ".join(f"{k} {n}" for k, n in result.results.most_common())
    lines = [f"precheck keydata: {sum(result.results.values())} items: {counts} in {result.seconds:.2f} s"]
    first = result.first_part
    if first is None:
        lines.append("  the two runs agree on every item (identical or within the tolerance)")
    else:
        item = f"{first['name']}{'.' + first['id'] if first['id'] else ''}"
        detail = f": {first['Message']}" if first.get("Message") else ""
        lines.append(f"  first part: step {first['step']}, {item} (rank {first['rank']}, micro step "
                     f"{first['micro_step']}): {first['Result']}{detail}")  # fmt: skip
        steps = ", ".join(f"{name} {step}" for name, step in result.first_per_name.items())
        lines.append(f"  first step each name parts in: {steps}")
    lines += [f"  csv:     {result.csv_path}", f"  summary: {result.summary_path}"]
    print("\n".join(escape(line) for line in lines))
    return 0


COMMANDS = (
    Command(
        "compare",
        help="compare two dumps of the same step: msprobe's compare CSV and the first record where they part",
        description="Compare the target's dump with the bench's, record by record, into msprobe's "
        "compare_result_{ts}.csv (tensor, statistics or md5, by what both dumps hold) and "
        "compare_summary_{ts}.json: the first divergent record in execution order and why (its inputs agree and "
        "its outputs do not, or its inputs already differ, and which record produced them), the suspects, the "
        "runs of records only one side has. In a tensor dump, records that deviate within rounding before it are "
        "graded each side against the float64 golden of its own inputs: the first where the target is worse than "
        "an honest kernel and the bench is not is named instead (the summary says which rule named it). Folders "
        "of step*/rank* are compared rank by rank.",
        add_arguments=_compare_arguments,
        handler=_compare,
    ),
    Command(
        "overflow",
        help="list the records whose outputs hold inf/nan while their inputs are finite, in execution order",
        description="The first records of a dump (statistics or tensors) that turn finite inputs into inf or "
        "nan: where an overflow is born, not where it spreads.",
        add_arguments=_overflow_arguments,
        handler=_overflow,
    ),
    Command(
        "logits",
        help="compare per-token logits of two runs: cosine, errors, KL divergence, top-k, the first failing token",
        description="Per token: cosine, max abs and relative error, KL divergence, top-1 and top-5 agreement; "
        "a token fails when its top-1 differs, KL > 0.01 or cosine < 0.99. Each side is a folder of one .npy/.pt "
        "file per token or one file with a token axis. Writes logits_compare_{ts}.csv.",
        add_arguments=_logits_arguments,
        handler=_logits,
    ),
    Command(
        "keydata",
        help="compare two runs' key training data (msprobe's RL key-data dump): the first step and item that part",
        description="Two key-data dumps (msprobe.core.SingleSave, as MindSpeed-RL and verl write with "
        "key_data_dump: data/<name>/step<N>/rank<R>/...) compared item by item in training order: prompts, "
        "responses, log-probabilities, advantages, losses. Writes keydata_compare_{ts}.csv (msprobe's comparator "
        "columns, the cosine and a result per item) and keydata_summary_{ts}.json: the first step and item where "
        "the runs part, and the first step each name parts in.",
        add_arguments=_keydata_arguments,
        handler=_keydata,
    ),
)
