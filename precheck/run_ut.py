"""The main job as a library call: a dump in, the two msprobe CSVs and a summary out."""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from precheck.core.reasons import Reason
from precheck.core.status import SKIP, at_or_below
from precheck.dump.decode import clip
from precheck.dump.records import Case, Dump, DumpError, ends_early, load_dump, not_replayed
from precheck.dump.selection import ApiLists, SignatureFilter
from precheck.dump.steps import find_dumps
from precheck.errors import OptionError, PrecheckError
from precheck.escape import escape
from precheck.execution.options import CheckOptions, check_scheduler
from precheck.execution.sides import resolve_device
from precheck.execution.targets import for_framework, target_for
from precheck.results import ApiResult, is_timed_out, skipped
from precheck.run_files.csv_files import CsvReport, text
from precheck.run_files.run_state import dump_identity, unfinished, versions
from precheck.run_options import RunOptions
from precheck.scheduling.backends import Backend, backend_for
from precheck.scheduling.costs import default_max_memory, worker_count
from precheck.schema import STATUSES

if TYPE_CHECKING:
    import pandas


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
    previous: Counter = field(default_factory=Counter)  # (forward, backward) -> APIs kept from a resumed run
    standard: str = "default"
    timed_out: int = 0  # APIs of this call past their time limit: SKIP rows, counted apart (results.timed_out)
    module_records: int = 0  # Module.* / Cell.* records of the dump (level L0 or mix), which no run replays
    task: str = ""  # the dump's: tensor (its outputs saved: training's kernels graded too) or statistics

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

    def _per_status(self, direction: int, statuses: Counter | None = None) -> Counter:
        per: Counter = Counter()
        for pair, n in (self.statuses if statuses is None else statuses).items():
            if pair[direction] is not None:
                per[pair[direction]] += n
        return per

    @property
    def apis_per_second(self) -> float:
        return self.checked / self.wall_seconds if self.wall_seconds > 0 else float("inf")

    def frame(self) -> pandas.DataFrame:
        """The run's rows as data, every row of its CSVs (a resumed run's too): precheck.load."""
        from precheck.frames import load

        return load(self.details_path)

    def any_at_or_below(self, threshold: str) -> bool:
        """True when some API's forward or backward status is ``threshold`` or worse, rows of a resumed run
        included."""
        return any(at_or_below(s, threshold) for pair in self._all_statuses() for s in pair if s is not None)

    def nothing_graded(self) -> str | None:
        """Why the run graded nothing (every API SKIP, a resumed run's rows too), or None when it graded some: a
        dump whose tensor files are missing is all SKIP rows, and no evidence is no pass."""
        if any(forward != SKIP for forward, _ in self._all_statuses()):
            return None
        return f"nothing was graded: all {self.checked + sum(self.previous.values())} APIs are SKIP"

    def gate(self, threshold: str, allow_empty: bool = False) -> str | None:
        """Why ``--fail-on threshold`` (error, warning or skip) fails the run, or None. Every row of the CSV
        counts, those of a resumed run too, and a run that graded nothing fails unless ``allow_empty``: a gate
        never passes on no evidence unless asked to."""
        pairs = self._all_statuses()
        empty = None if allow_empty else self.nothing_graded()
        if empty:
            return empty
        if threshold == "skip":
            return "some APIs are SKIP (--fail-on skip)" if any(SKIP in pair for pair in pairs) else None
        return f"some APIs are at or below '{threshold}' (--fail-on)" if self.any_at_or_below(threshold) else None

    def _all_statuses(self) -> list[tuple[str, str | None]]:
        return [pair for pair, n in (self.statuses + self.previous).items() if n > 0]

    def describe(self) -> str:
        return self._counted() + self._files()

    def _files(self) -> str:
        return f"  result:  {escape(str(self.result_path))}\n  details: {escape(str(self.details_path))}"

    def _counted(self) -> str:
        """The console's summary: the whole run's counts, a resumed run's rows included (its CSVs hold them all),
        with how many APIs this call checked and how many were done before."""
        whole = self.statuses + self.previous
        counts, bw = (", ".join(f"{k} {self._per_status(d, whole).get(k, 0)}" for k in STATUSES) for d in (0, 1))
        where = target_for(CheckOptions(device=self.device, target=self.target)).describe()
        rate = f"in {self.wall_seconds:.2f} s ({self.apis_per_second:.1f} APIs/s)"
        if self.resumed:
            now = f"{self.checked} checked now {rate}" if self.checked else "none was left to check"
            again = f": {self.resumed} done before, by the run this continues; {now}"
        else:
            again = f" {rate}"
        if self.filtered:
            again += f" ({self.filtered} calls with an already checked signature skipped by --filter_api)"
        late = (
            f"  timed out: {self.timed_out} APIs (SKIP, not graded; raise --timeout to grade them)\n"
            if self.timed_out
            else ""
        )
        modules = f"  {not_replayed(self.module_records)}\n" if self.module_records else ""
        legend = (
            "  warning: the rule failed by no more than the dtype explains; "
            "error: worse than an honest kernel in the target dtype\n"
            if self.standard == "default"
            else ""
        )
        return (
            f"precheck run_ut: {self.checked + self.resumed} APIs {where}{again}\n{self._kernels()}"
            f"  forward:  {counts}\n  backward: {bw}\n{late}{modules}{legend}"
        )

    def _kernels(self) -> str:
        """Whose kernels the verdicts are about: a dump from an NPU replayed on a CPU machine checks the CPU's,
        and only the outputs training recorded are the NPU's."""
        if not self.task:
            return ""
        if self.target == "recorded":
            return "  kernels: the training device's (the outputs the dump recorded); nothing is replayed here\n"
        kinds = {"compile": f"{self.device}'s through torch.compile", "mindspore": f"MindSpore's on {self.device}"}
        here = kinds.get(self.target, f"{self.device}'s")
        if self.task == "tensor":
            return (
                f"  kernels: {here} (each call replayed), and the training device's (the outputs the dump "
                "recorded, graded beside the replay)\n"
            )
        return (
            f"  kernels: {here} (each call replayed) only: a statistics dump saved no outputs of the training "
            "device's kernels (record a tensor dump, or compare it with a reference run)\n"
        )


def run_ut(
    api_info: str | os.PathLike,
    out_path: str | os.PathLike = ".",
    options: RunOptions | CheckOptions | None = None,
    *,
    graded: Mapping[str, ApiResult] | None = None,
    loaded: Dump | None = None,
    **keywords: Any,
) -> RunSummary:
    """Check every forward API of a dump as ``options`` say (a RunOptions; its CheckOptions alone; or any of its
    fields by name, ``device="cpu", workers=1``, as run_ut took them one by one); raise DumpError / DeviceError for
    a dump or device that cannot be used.

    Rows are written as APIs complete, so an interrupted run keeps every finished row; ``csv_path`` (the result
    CSV of an interrupted run) continues it in the same files, checking only the APIs it lacks. ``results`` of
    the summary hold the APIs checked by this call (``keep_results`` False keeps only the counts of statuses, so
    a run's memory does not grow with the number of records). ``graded``: rows already graded elsewhere, by case
    name (a step's collectives, graded across its ranks by precheck.ranks), written as they are instead of run,
    and rows of no record of the dump (a step's whole DTensor calls, precheck.ranks.whole_calls) written after
    their call's;
    ``loaded``: ``api_info``'s dump as load_dump read it (precheck.ranks reads each rank's once). ``api_info`` may
    be a dump's top folder holding one dump (``dump/step0/proc1/dump.json``); precheck.ranks runs a step folder of
    several.
    """
    start = time.perf_counter()
    run = RunOptions.of(options, **keywords)
    check_scheduler(run.backend, run.scheduler)  # before the run's files are opened
    found = find_dumps(api_info)
    if found.ranks:
        raise DumpError(f"{found.path}: a step of {len(found.ranks)} dumps; precheck.ranks.run_step runs them as one")
    if found.note:
        warnings.warn(found.note, stacklevel=2)
    dump = loaded if loaded is not None else load_dump(found.path, run.framework)
    check = resolved(for_framework(run.check, dump), run.device)
    identity = run_identity(dump.path, check, run.filter_api, run.api_lists) | _partial(dump)
    check = _usable_error_folder(check)
    keep = _Tally(run.keep_results)
    orders = {text(name): i for i, name in enumerate(dump.cases.names)}  # names as the CSVs hold them
    signatures = SignatureFilter() if run.filter_api else None
    if run.csv_path is None and (left := unfinished(out_path, identity)) is not None:
        warnings.warn(UnfinishedRun(left), stacklevel=2)
    with CsvReport(out_path, resume=run.csv_path, orders=orders, identity=identity) as report:
        _write(dump, report, replace(run, check=check), _Rows(keep, signatures, graded or {}, orders))
    keep.results.sort(key=lambda r: r.order)
    return RunSummary(
        report.result_path,
        report.details_path,
        check.device,
        check.target,
        time.perf_counter() - start,
        keep.results,
        len(report.completed),
        signatures.left_out if signatures else 0,
        keep.statuses,
        report.previous,
        check.standard,
        keep.timed_out,
        dump.cases.module_records,
        dump.task,
    )


@dataclass
class _Rows:
    """What a run keeps of its results, the calls --filter_api leaves out, the rows graded elsewhere, and each
    record's place in the CSVs (by name as they hold it)."""

    keep: _Tally
    signatures: SignatureFilter | None
    graded: Mapping[str, ApiResult]
    orders: dict[str, int]


def _write(dump: Dump, report: CsvReport, run: RunOptions, plan: _Rows) -> None:
    """Check the dump's cases into ``report``, each row on disk as it completes; Ctrl-C and a full disk leave the
    rows written whole, and say how many (Interrupted, WriteFailed)."""
    options, keep = run.check, plan.keep
    workers = worker_count(run.workers)
    bar = _progress_bar(len(dump.cases)) if run.progress else None  # once the files are open: an error has its line
    try:
        suspects, todo = _plan(dump, report, plan.signatures, run.api_lists, keep, plan.graded)
        if bar is not None:
            bar.update(len(dump.cases) - len(todo) - len(suspects))
        cases = [dump.cases.select(suspects), dump.cases.select(todo)]

        def choose(selected: Sequence[Case], isolate: bool) -> Backend:
            return backend_for(run.backend, selected, dump.data_dir, options, workers, run.scheduler, isolate, run.tls)

        if options.max_memory is None:
            started = max(choose(c, i == 0).processes(c) for i, c in enumerate(cases))
            options = replace(options, max_memory=default_max_memory(started))
        for result in _checked(cases, choose, report):
            keep(result)
            if bar is not None:
                bar.update(1)
        _added(plan.graded, plan.orders, report, keep)
    except KeyboardInterrupt as e:
        raise Interrupted(report.result_path, len(report.completed) + keep.total) from e
    except OSError as e:  # a full disk: the rows written so far are whole, and a resume continues them
        raise WriteFailed(e, report.result_path, len(report.completed) + keep.total) from e
    finally:
        if bar is not None:
            bar.close()  # before any message: a line of its own


@dataclass
class _Tally:
    """What a run keeps of its results as they come: the counts always, the results themselves unless told not
    to (``keep_results`` False: memory that does not grow with the number of records)."""

    keep_results: bool
    results: list[ApiResult] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)  # (forward, backward) -> APIs
    timed_out: int = 0

    def __call__(self, result: ApiResult) -> None:
        self.statuses[result.forward, result.backward] += 1
        self.timed_out += is_timed_out(result)
        if self.keep_results:
            self.results.append(result)

    @property
    def total(self) -> int:
        return sum(self.statuses.values())


def _checked(
    cases: list[Sequence[Case]], choose: Callable[[Sequence[Case], bool], Backend], report: CsvReport
) -> Iterator[ApiResult]:
    """Each result as it completes, on disk before it is yielded; the suspects of a resumed run (``cases[0]``)
    first, isolated in worker processes: one of them may kill its process."""
    for i, selected in enumerate(cases):
        if len(selected):
            for result in choose(selected, i == 0).run(selected, lambda c: report.start(c.name)):
                report.add(result)
                yield result


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM in the CLI) during a run: every finished row is in ``result_path``."""

    def __init__(self, result_path: Path, finished: int) -> None:
        super().__init__(f"interrupted; {finished} finished APIs are in {result_path}")
        self.result_path, self.finished = result_path, finished


class WriteFailed(PrecheckError, OSError):
    """An OSError during a run (a full disk): every row before it is whole in ``result_path``, which a resume
    continues once the cause is gone."""

    def __init__(self, cause: OSError, result_path: Path, finished: int) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), cause.filename)
        self.result_path, self.finished = result_path, finished

    def line(self, resume: Callable[[Path], str]) -> str:
        """The rows so far are whole: the line names them and the command that continues them."""
        return (
            f"cannot write results: {self}; {self.finished} finished APIs are in {self.result_path}; "
            f"continue with: {resume(self.result_path)}"
        )


class UnfinishedRun(UserWarning):
    """A new run found the CSVs of a run of the same dump and options that stopped before it finished (killed,
    crashed): rerunning it from the start would redo every finished API, and may die the same way, where a
    resume checks only the missing APIs and isolates the one that was running."""

    def __init__(self, result_path: Path) -> None:
        self.what = f"{result_path} holds a run of this dump and options that did not finish"
        super().__init__(f"{self.what}; run_ut(csv_path={str(result_path)!r}) continues it")
        self.result_path = result_path


def resolved(options: CheckOptions, device: str) -> CheckOptions:
    """The options with the device resolved and checked (DeviceError / ValueError for unusable ones); MindSpore
    places its own runs (auto: the CPU)."""
    if options.target == "mindspore":
        return replace(options, device="cpu" if device == "auto" else device)
    options = replace(options, device=resolve_device(device))
    if options.standard == "benchmark" and options.bench_device is None:
        options = replace(options, bench_device="cpu")  # the two-reference verdict needs its reference
    if options.force_random and not target_for(options).takes_generated_inputs:
        raise OptionError(
            f"--random and --target {options.target} exclude each other: recorded outputs come from the recorded inputs"
        )
    if options.bench_device is not None:
        options = replace(options, bench_device=resolve_device(options.bench_device))
    return options


def run_identity(
    dump_path: Path, options: CheckOptions, filter_api: bool, api_lists: ApiLists | None
) -> dict[str, object]:
    """What a run is, as its sidecar records it: the dump and every option that can change a row (a resume must
    use the same). Not where error data is saved, whether tensors are kept, nor --timeout (a resume may give a
    hanging API more time)."""
    chosen = asdict(options)
    for name in ("save_error_data", "keep_tensors", "timeout"):
        chosen.pop(name)
    lists = None if api_lists is None else [sorted(api_lists.white), sorted(api_lists.black)]
    return {**dump_identity(dump_path), **chosen, "filter_api": filter_api, "api_lists": lists, "versions": versions()}


def _partial(dump: Dump) -> dict[str, str]:
    """A dump its recorder closed short (precheck record interrupted: its ``partial`` field) is graded all the same,
    with one warning; the run record says it (``partial``), so its report says the run lacks APIs."""
    why = dump.index.header.get("partial")
    if not isinstance(why, str):
        early = ends_early(dump)
        if early is None:
            return {}
        warnings.warn(f"{dump.path}: {early}", stacklevel=3)
        return {"partial": early}
    warnings.warn(f"{dump.path}: a partial recording ({clip(why, 200)}): some of its calls are missing", stacklevel=3)
    return {"partial": f"the dump is partial: {clip(why, 200)}"}


def _usable_error_folder(options: CheckOptions) -> CheckOptions:
    """-save_error_data into a place that cannot be written: one warning, and the run goes on without it."""
    if not options.save_error_data:
        return options
    folder = Path(options.save_error_data)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        reason = e.strerror or type(e).__name__
        warnings.warn(f"cannot save error data in {folder} ({reason}); the run goes on without it", stacklevel=3)
        return replace(options, save_error_data=None)
    return options


def _plan(
    dump: Dump,
    report: CsvReport,
    signatures: SignatureFilter | None,
    api_lists: ApiLists | None,
    keep: Callable[[ApiResult], None],
    graded: Mapping[str, ApiResult],
) -> tuple[array, array]:
    """Indices of the cases to run (those running when an interrupted run died apart: they run in a worker);
    listed-out cases become their SKIP rows here, and those ``graded`` already their rows. Cases are decoded
    when they run, never held."""
    suspects, todo = array("q"), array("q")
    for order, name in enumerate(dump.cases.names):
        if name in graded:
            if text(name) not in report.completed:
                report.add(graded[name])
                keep(graded[name])
            continue
        if signatures is None and api_lists is None:
            if text(name) not in report.completed:  # nothing to learn from the record yet: not decoded
                (suspects if name in report.suspects else todo).append(order)
            continue
        case = dump.cases[order]
        if signatures is not None and not signatures.keep(case) or text(case.name) in report.completed:
            continue
        listed_out = api_lists.excluded(case) if api_lists else None
        if listed_out:
            result = skipped(case, listed_out, Reason.SKIP_LISTED_OUT)
            report.add(result)
            keep(result)
        else:
            (suspects if case.name in report.suspects else todo).append(order)
    return suspects, todo


def _added(
    graded: Mapping[str, ApiResult], orders: dict[str, int], report: CsvReport, keep: Callable[[ApiResult], None]
) -> None:
    """Rows graded elsewhere of no record of this dump (a step's DTensor calls graded as a whole,
    precheck.ranks.whole_calls), written after their call's row."""
    for name, result in graded.items():
        if text(name) not in orders and text(name) not in report.completed:
            report.add(result)
            keep(result)


def _progress_bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="API", desc="run_ut", dynamic_ncols=True, mininterval=0.2)
