"""--target compile: compile time per distinct API signature, against the calls that reuse a compilation.

    python benchmarks/bench_compile.py [DUMP_JSON]    (default: the bundled GPT-2 bf16 tensor dump)

Checks every case of the dump in this process (one compiled callable per (API, signature), as run_ut does) and
prints, per signature, the time of its first check (forward and backward compilation included) and the mean
time of later checks of the same signature, then the same dump with the plain device target for comparison.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from precheck.dump.records import load_dump
from precheck.execution.check import check_case
from precheck.execution.options import CheckOptions

DEFAULT = Path(__file__).resolve().parent.parent / "tests/data/gpt2_bf16_tensor/step0/proc8493/dump.json"


def timed_run(dump, options: CheckOptions) -> tuple[dict[tuple, list[float]], dict[tuple, str], float]:
    times: dict[tuple, list[float]] = {}
    names: dict[tuple, str] = {}
    start = time.perf_counter()
    for case in dump.cases:
        t = time.perf_counter()
        result = check_case(case, dump.data_dir, options)
        if result.forward != "SKIP":
            times.setdefault(case.signature(), []).append(time.perf_counter() - t)
            names[case.signature()] = case.api
    return times, names, time.perf_counter() - start


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump", nargs="?", type=Path, default=DEFAULT, metavar="DUMP_JSON", help="the dump to check")
    return parser


def main() -> None:
    dump = load_dump(build_parser().parse_args().dump)
    compiled, names, total = timed_run(dump, CheckOptions(target="compile"))
    _, _, eager_total = timed_run(dump, CheckOptions())
    print(f"{'API (signature)':32} {'first check s':>13} {'later checks':>12} {'mean s':>8}")
    for sig, seconds in compiled.items():
        rest = seconds[1:]
        later = f"{sum(rest) / len(rest):8.3f}" if rest else f"{'-':>8}"
        print(f"{names[sig]:32} {seconds[0]:13.2f} {len(rest):12d} {later}")
    first = [s[0] for s in compiled.values()]
    print(
        f"\n{len(dump.cases)} APIs, {len(compiled)} distinct signatures: {sum(first):.1f} s for their first "
        f"checks ({sum(first) / max(len(first), 1):.2f} s per signature, compilation included); the whole dump "
        f"{total:.1f} s through torch.compile vs {eager_total:.2f} s on the device target"
    )


if __name__ == "__main__":
    main()
