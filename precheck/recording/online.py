"""``precheck record --check``: each call checked while the step runs, with no tensor file on disk.

A call becomes a case as soon as it is whole: at once when no backward record will come, when its backward
record arrives otherwise, at the end of the step for a backward that never ran. The case is decoded from the
record exactly as run_ut decodes it from dump.json, and its tensors are in shared memory (files of a tmpfs,
``/dev/shm``, never the disk), so a case is checked as an offline run of the recorded dump checks it: the same
rows. Cases go through a bounded queue to the backend's loop (in this process, a pool, a Dask cluster on this
machine); a full queue makes the step wait while the checkers are behind, and a call's tensors are released
once its case is checked. The queue does not bound the shared memory (every call awaiting its backward holds its
forward's tensors there): the store has a byte budget (precheck.recording.store), and a call whose tensors do
not fit it is a SKIP row that says so, never an error in the user's call. With ``keep_failing`` the tensors of a
call graded error are kept in the dump's dump_tensor_data/, so ``precheck repro`` runs on it. The CSVs, the
reasons file and the report come out when the step ends. A rank of a distributed run writes its CSVs into its
dump's folder (``step0/rank1/``), as run_ut of the step folder writes each rank's into ``rank1/``, and no page
of its own: the step's one page over every rank is written once all of them are done (``precheck record`` writes
it when the command ends; ``precheck report DUMP/step0`` writes it for a program recording itself).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from api_registry import lookup
from precheck.core.reasons import Reason
from precheck.core.status import ERROR
from precheck.dump.decode import Case, decode_case
from precheck.dump.steps import rank_number
from precheck.execution.check import check_case
from precheck.execution.options import CheckOptions
from precheck.execution.runner import one_line
from precheck.recording.dumpfile import DumpFile
from precheck.recording.encode import data_names
from precheck.recording.runlog import STORE_PREFIX
from precheck.recording.session import Recorder
from precheck.recording.store import Store
from precheck.results import ApiResult
from precheck.run_files.csv_files import CsvReport
from precheck.run_files.run_state import mark_partial
from precheck.run_ut import resolved, run_identity
from precheck.scheduling.backends import Backend, InProcess, backend_for, check_backend
from precheck.scheduling.costs import default_max_memory
from precheck.scheduling.dask_cluster import Shipped
from precheck.scheduling.tls import Tls

__all__ = ["OnlineCheck", "attach"]

_END = object()


@dataclass
class OnlineCheck:
    """The checking side of a recording: told of each record, it hands whole calls to the backend."""

    out_dir: Path
    options: CheckOptions = field(default_factory=CheckOptions)
    backend: str = "inprocess"
    workers: int = 1
    scheduler: str | None = None
    keep_failing: bool = False
    report: bool = True
    store_size: int | None = None  # bytes of tensor files the shared memory holds at once (None: Store's default)
    tls: Tls | None = None  # a tls:// scheduler's certificates
    result_paths: list[Path] = field(default_factory=list)
    _store: Store | None = None
    _queue: queue.Queue | None = None
    _thread: threading.Thread | None = None
    _pending: dict[str, tuple[int, dict]] = field(default_factory=dict)
    _files: dict[str, list[str]] = field(default_factory=dict)
    _forwards: int = 0
    _csv: CsvReport | None = None
    _dump: DumpFile | None = None
    _failure: BaseException | None = None
    _note: Callable[..., None] = field(default=lambda *_: None, repr=False)
    _here: bool = False  # the backend checks in this process: its random calls are checked where they are made
    _writing: threading.Lock = field(default_factory=threading.Lock, repr=False)  # one result at a time to the CSVs
    _pid: int = field(default_factory=os.getpid)

    def attach(self, recorder: Recorder) -> None:
        """Check what ``recorder`` records; its tensor files go to shared memory instead of the dump. An unknown
        backend is refused here, before the step (the first case, in a backward hook, is no place for it)."""
        check_backend("dask" if self.scheduler else self.backend, self.scheduler)
        self._store = Store(self.store_size, f"{STORE_PREFIX}{os.getpid()}-")
        recorder.store, recorder.store_save = self._store.path, self._store.save
        recorder.store_release = self._store.release
        recorder.files = "kept" if self.keep_failing else "none"  # dump.json names no file that is not there
        recorder.on_record, recorder.on_step_end = self.record, self.step_end
        self.result_paths, self._note = recorder.results, recorder.note
        self._note("store", self._store.path)  # precheck record removes it, whatever way this process ends

    def record(self, name: str, record: dict, awaits_backward: bool, dump: DumpFile) -> None:
        """One record written by the recorder: a case once its call is whole."""
        self._dump = dump
        stem, _, kind = name.rpartition(".")
        self._files.setdefault(stem, []).extend(data_names(record))
        if kind == "forward":
            order, self._forwards = self._forwards, self._forwards + 1
            if awaits_backward:
                self._pending[stem] = (order, record)
            else:
                self._submit(stem, order, record, None)
        elif stem in self._pending:
            order, forward = self._pending.pop(stem)
            self._submit(stem, order, forward, record)

    def step_end(self, dump: DumpFile) -> None:
        """The step's last record is written: the calls whose backward never ran are checked forward only, and the
        step's CSVs and report are finished."""
        for stem, (order, forward) in list(self._pending.items()):
            self._submit(stem, order, forward, None)
        self._pending.clear()
        if self._queue is not None:
            self._queue.put(_END)
            self._thread.join()  # type: ignore[union-attr]
            self._queue = self._thread = None
            self._finish(self._csv)  # type: ignore[arg-type]
            self._csv = None
        self._forwards = 0
        if self._failure is not None:
            failure, self._failure = self._failure, None  # the next step starts clean
            raise failure

    def _finish(self, csv: CsvReport) -> None:
        """The step's CSVs closed, and its report written; both say they are partial when the check failed."""
        csv.close()
        self.result_paths.append(csv.result_path)
        if self._failure is not None:
            why = f"the check failed: {one_line(self._failure)}"
            mark_partial(csv.sidecar_path, why)
            self._note("partial", csv.result_path, why)
        self._note("csv", csv.result_path)
        if self.report and not self._ranked():
            from precheck.report.html import write_report

            self._note("report", write_report(csv.details_path))

    def close(self) -> None:
        """Release the shared memory (a step that ended has none left; an interrupted one may). Not in a forked
        child exiting through atexit: the memory is the parent's, still checking from it."""
        if self._store is not None and os.getpid() == self._pid:
            self._store.close()

    def _submit(self, stem: str, order: int, forward: dict, backward: dict | None) -> None:
        if self._queue is None:
            self._start()
        case = decode_case(stem, stem.rpartition(".")[0], order, forward, backward)
        refused = self._store.refused(self._files.get(stem, []))  # type: ignore[union-attr]
        if refused is not None and case.problem is None:
            case = replace(case, problem=refused, problem_reason=Reason.SKIP_MEMORY)
        item = self._checked_here(case) if self._here and _draws(case) else case
        self._queue.put(item)  # type: ignore[union-attr]  # blocks while the checkers are behind: the step waits

    def _checked_here(self, case: Case) -> ApiResult:
        """A random call checked on the thread that made it, inside the program's call. Its draw seeds the process's
        generators (torch's random APIs take no generator of their own), which is unseen only by a thread that
        waits for it: drawn on the checking thread, a draw the program made meanwhile came from the check's seed,
        and the generator was rewound after it (the losses changed, 7 runs in 10). A pool's or a cluster's
        workers draw in processes of their own."""
        with _as_checked_elsewhere(self.options.device):
            return check_case(case, self._store.path, self.options)  # type: ignore[union-attr]

    def _start(self) -> None:
        options = resolved(self.options, self.options.device)
        if options.max_memory is None:
            options = replace(options, max_memory=default_max_memory(self.workers))
        self.options = options
        name = "dask" if self.scheduler else self.backend
        # a Dask cluster gets each case's files with it, never this machine's path (its workers may be elsewhere)
        where = Path("(shipped with each case)") if name == "dask" else self._store.path  # type: ignore[union-attr]
        # made here, in the step's thread: an unknown backend is the user's error at once, not a dead checker
        runner = backend_for(name, [], where, options, self.workers, self.scheduler, tls=self.tls)  # type: ignore[arg-type]
        self._here = isinstance(runner, InProcess)
        out = self._dump.path.parent if self._ranked() else self.out_dir  # type: ignore[union-attr]
        self._csv = CsvReport(out, identity=run_identity(self._dump_path(), options, False, None))
        self._note("csv-open", self._csv.result_path)
        self._queue = queue.Queue(maxsize=2 * max(1, self.workers))
        ship = self._shipped if name == "dask" else None
        self._thread = threading.Thread(target=self._check, args=(runner, ship), name="precheck-online", daemon=True)
        self._thread.start()

    def _ranked(self) -> bool:
        """Whether this step's dump is a rank's of a distributed run (``step0/rank1/dump.json``)."""
        return self._dump is not None and rank_number(self._dump.path.parent.name) is not None

    def _dump_path(self) -> Path:
        return self.out_dir / "dump.json" if self._dump is None else self._dump.path

    def _cases(self) -> Any:
        """The cases for the backend, in the order they come; a call already checked where it was made is
        written at its turn."""
        while (item := self._queue.get()) is not _END:  # type: ignore[union-attr]
            if isinstance(item, ApiResult):
                self._csv.start(item.name)  # type: ignore[union-attr]
                self._add(item)
            else:
                yield item

    def _add(self, result: ApiResult) -> None:
        with self._writing:
            self._csv.add(result)  # type: ignore[union-attr]
            self._release(result)

    def _check(self, runner: Backend, ship: Shipped | None) -> None:
        try:
            for result in runner.stream(self._cases(), lambda case: self._csv.start(case.name), ship):  # type: ignore[union-attr]
                self._add(result)
        except BaseException as e:  # the step must not hang on a queue nobody reads: drain it, report at the end
            self._failure = e
            while self._queue.get() is not _END:  # type: ignore[union-attr]
                pass

    def _shipped(self, case: Case) -> dict[str, bytes]:
        """A case's tensor files, sent with it to a Dask worker: the cluster need not see this machine's shared
        memory."""
        names, store = self._files.get(case.name, ()), self._store.path  # type: ignore[union-attr]
        return {name: (store / name).read_bytes() for name in names if (store / name).is_file()}

    def _release(self, result: ApiResult) -> None:
        """A checked call's tensors leave shared memory; kept in the dump when it failed and that was asked."""
        keep = self.keep_failing and ERROR in (result.forward, result.backward) and self._dump is not None
        keep_in = self._dump.data_dir if keep else None  # type: ignore[union-attr]
        self._store.release(self._files.pop(result.name, []), keep_in)  # type: ignore[union-attr]


def _draws(case: Case) -> bool:
    """Whether checking ``case`` draws random numbers (api_registry's random calls)."""
    entry = None if case.problem else lookup(case.api)
    return entry is not None and entry.random_reason(case.args, case.kwargs) is not None


@contextmanager
def _as_checked_elsewhere(device: str) -> Iterator[None]:
    """The program's thread as a checking thread is while a check runs on it: no autocast (the check sets the
    dtypes it replays in) and no inference mode; what the program set is back after."""
    with ExitStack() as stack:
        stack.enter_context(torch.inference_mode(False))
        for kind in dict.fromkeys(("cpu", device.split(":")[0])):
            stack.enter_context(torch.autocast(kind, enabled=False))
        yield


def attach(recorder: Recorder, check: dict[str, Any]) -> OnlineCheck:
    """An online check of ``recorder``'s calls as ``precheck record --check`` configures it (``check``: out,
    backend, workers, scheduler, keep_failing, report, store_size, tls (its CA, certificate and key files), and
    the CheckOptions fields it grades by)."""
    online = OnlineCheck(
        Path(check["out"]).resolve(),
        CheckOptions(**check.get("options", {})),
        check.get("backend", "inprocess"),
        int(check.get("workers", 1)),
        check.get("scheduler"),
        bool(check.get("keep_failing", False)),
        bool(check.get("report", True)),
        check.get("store_size"),
        None if check.get("tls") is None else Tls(*check["tls"]),
    )
    online.attach(recorder)
    return online
