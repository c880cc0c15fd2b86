"""The main job as a library call: a dump in, the two msprobe CSVs and a summary out."""

from __future__ import annotations

import os
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from precheck.check import ApiResult, CheckOptions, skipped
from precheck.dump import load_dump
from precheck.grader.status import at_or_below
from precheck.pool import default_workers, failed, run_cases
from precheck.report import CsvReport, text
from precheck.selection import ApiLists, SignatureFilter
from precheck.targets import TARGETS, resolve_device


@dataclass
class RunSummary:
    result_path: Path
    details_path: Path
    device: str
    target: str
    wall_seconds: float
    results: list[ApiResult] = field(default_factory=list)  # kept only with run_ut(keep_results=True)
    resumed: int = 0  # APIs already in the CSVs of the run this call continued
    filtered: int = 0  # calls left out by --filter_api (a signature checked already)
    statuses: Counter = field(default_factory=Counter)  # (forward, backward) -> APIs checked by this call

    @property
    def checked(self) -> int:
        return sum(self.statuses.values())

    @property
    def counts(self) -> Counter:
        """APIs per forward status (the backward ones are ``backward_counts``: a backward error is not here)."""
        return self._per_status(0)

    @property
    def backward_counts(self) -> Counter:
        """APIs per backward status, of the APIs that have a backward record."""
        return self._per_status(1)

    def _per_status(self, direction: int) -> Counter:
        per: Counter = Counter()
        for pair, n in self.statuses.items():
            if pair[direction].strip():
                per[pair[direction]] += n
        return per

    @property
    def apis_per_second(self) -> float:
        return self.checked / self.wall_seconds if self.wall_seconds > 0 else float("inf")

    def any_at_or_below(self, threshold: str) -> bool:
        """True when some API's forward or backward status is ``threshold`` or worse (``--fail-on``)."""
        return any(at_or_below(s, threshold) for pair in self.statuses for s in pair if s.strip())

    def describe(self) -> str:
        counts, bw = (
            ", ".join(f"{k} {per.get(k, 0)}" for k in ("pass", "warning", "error", "SKIP"))
            for per in (self.counts, self.backward_counts)
        )
        where = {
            "device": f"on {self.device}",
            "recorded": "against their recorded outputs",
            "compile": f"through torch.compile on {self.device}",
        }[self.target]
        again = f" (continuing a run that had {self.resumed} APIs)" if self.resumed else ""
        if self.filtered:
            again += f" ({self.filtered} calls with an already checked signature skipped by --filter_api)"
        return (
            f"precheck run_ut: {self.checked} APIs {where}{again} in {self.wall_seconds:.2f} s "
            f"({self.apis_per_second:.1f} APIs/s)\n"
            f"  forward:  {counts}\n  backward: {bw}\n"
            f"  result:  {self.result_path}\n  details: {self.details_path}"
        )


def run_ut(
    api_info: str | os.PathLike,
    out_path: str | os.PathLike = ".",
    *,
    device: str = "auto",
    workers: int | None = None,
    options: CheckOptions | None = None,
    progress: bool = False,
    csv_path: str | os.PathLike | None = None,
    api_lists: ApiLists | None = None,
    filter_api: bool = False,
    scheduler: str | None = None,
    keep_results: bool = True,
) -> RunSummary:
    """Check every forward API of a dump; raise DumpError / DeviceError for a dump or device that cannot be used.

    Rows are written as APIs complete, so an interrupted run keeps every finished row; ``csv_path`` (the result
    CSV of an interrupted run) continues it in the same files, checking only the APIs it lacks. ``results`` of
    the summary hold the APIs checked by this call. ``api_lists`` (msprobe's white / black lists) turn the APIs
    they leave out into SKIP rows; ``filter_api`` checks one call per signature and leaves the others out;
    ``scheduler`` (a Dask scheduler address) runs the checks on that cluster; ``keep_results`` False keeps only
    the counts of statuses in the summary, so a run's memory does not grow with the number of records.
    """
    start = time.perf_counter()
    dump = load_dump(api_info)
    resolved = resolve_device(device)
    workers = default_workers() if workers is None else max(1, workers)
    options = replace(options or CheckOptions(), device=resolved)
    if options.standard == "benchmark" and options.bench_device is None:
        options = replace(options, bench_device="cpu")  # the two-reference verdict needs its reference
    if options.target not in TARGETS:
        raise ValueError(f"unknown target {options.target!r} (choose from {', '.join(TARGETS)})")
    if options.target == "recorded" and options.force_random:
        raise ValueError(
            "--random and --target recorded exclude each other: recorded outputs come from the recorded inputs"
        )
    if options.bench_device is not None:
        options = replace(options, bench_device=resolve_device(options.bench_device))
    if options.max_memory is None:
        options = replace(options, max_memory=default_max_memory(workers))
    results: list[ApiResult] = []
    statuses: Counter = Counter()

    def keep(result: ApiResult) -> None:
        statuses[result.forward, result.backward] += 1
        if keep_results:
            results.append(result)

    bar = _progress_bar(len(dump.cases)) if progress else None
    orders = {text(name): i for i, name in enumerate(dump.cases.names)}  # names as the CSVs hold them
    signatures = SignatureFilter() if filter_api else None
    with CsvReport(out_path, resume=csv_path, orders=orders) as report:
        todo = array("q")  # indices of the cases to run: cases are decoded when they run, never held
        for order, name in enumerate(dump.cases.names):
            if signatures is None and api_lists is None and report.started.get(name, 0) < 2:
                if text(name) not in report.completed:  # nothing to learn from the record yet: not decoded
                    todo.append(order)
                continue
            case = dump.cases[order]
            if signatures is not None and not signatures.keep(case) or text(case.name) in report.completed:
                continue
            listed_out = api_lists.excluded(case) if api_lists else None
            if listed_out or report.started.get(case.name, 0) >= 2:  # killed the run twice: never a third time
                result = (
                    skipped(case, listed_out)
                    if listed_out
                    else failed(case, "killed the run twice while being checked; not retried")
                )
                report.add(result)
                keep(result)
            else:
                todo.append(case.order)
        if bar is not None:
            bar.update(len(dump.cases) - len(todo))
        for result in run_cases(
            dump.cases.select(todo),
            dump.data_dir,
            options,
            workers,
            on_start=lambda c: report.start(c.name),
            scheduler=scheduler,
        ):
            report.add(result)
            keep(result)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    results.sort(key=lambda r: r.order)
    return RunSummary(
        report.result_path,
        report.details_path,
        resolved,
        options.target,
        time.perf_counter() - start,
        results,
        len(report.completed),
        signatures.left_out if signatures else 0,
        statuses,
    )


def default_max_memory(workers: int) -> int:
    """Half the machine's memory, shared among the workers that may each hold a case at once."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 16 * 2**30
    return total // (2 * workers)


def _progress_bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="API", desc="run_ut", dynamic_ncols=True, mininterval=0.2)
