"""The in-process backend: cases on a helper thread of this process, for dumps too small to pay for a pool.

Each case is waited for at most its timeout: a case past it is an error row, its thread is left behind (a hung C
kernel cannot be interrupted) and the remaining cases run in worker processes. An API that crashes the process
takes an in-process run down; the resume journal (report/runfiles.py) names the APIs that were running then, and
a resume checks those in worker processes (``isolate``).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

from precheck.dump.records import Case
from precheck.execution.check import check_case
from precheck.execution.options import CheckOptions
from precheck.results import ApiResult, failed
from precheck.scheduling.costs import MAX_TIMEOUT, case_timeout
from precheck.scheduling.process import Supervisor


def in_process(
    cases: Sequence[Case], data_dir: Path, options: CheckOptions, workers: int, on_start: Callable[[Case], None]
) -> Iterator[ApiResult]:
    """The cases on a helper thread of this process, each waited for at most its timeout. One past it is an
    error row; its thread is abandoned (it may be stuck in a C kernel that nothing can interrupt, a daemon
    thread that dies with the process) and the cases after it run in worker processes."""
    # One intra-op thread here too, so a CPU target computes bit for bit what a pool worker computes: the
    # verdicts never depend on -n. Work small enough to run here gains little from threads anyway.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    inline = _Inline(data_dir, options)
    try:
        source = iter(cases)
        for i, case in enumerate(source):
            on_start(case)
            timeout = case_timeout(case, options)
            result = inline.check(case, timeout)
            if result is None:
                yield failed(case, f"timed out after {timeout:g} s")
                left = len(cases) - i - 1
                if left:
                    yield from Supervisor(data_dir, options, min(workers, left)).run(source, on_start)
                return
            yield result
    finally:
        inline.close()
        torch.set_num_threads(threads)


class _Inline:
    """A helper thread that checks one case at a time for the thread that waits on it."""

    def __init__(self, data_dir: Path, options: CheckOptions) -> None:
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.replies: queue.SimpleQueue = queue.SimpleQueue()
        self.busy = False  # a case is in flight: past its timeout or interrupted, it may never come back
        self.thread = threading.Thread(target=self._serve, args=(data_dir, options), name="precheck-check")
        self.thread.daemon = True
        self.thread.start()

    def _serve(self, data_dir: Path, options: CheckOptions) -> None:
        torch.set_num_threads(1)  # the thread count is per thread where torch uses OpenMP
        while (case := self.requests.get()) is not None:
            try:
                self.replies.put((check_case(case, data_dir, options), None))
            except BaseException as e:  # SystemExit from an API ends the run, as it would in this thread
                self.replies.put((None, e))

    def check(self, case: Case, timeout: float) -> ApiResult | None:
        """The case's result, or None when it took longer than ``timeout`` (this helper is then stuck)."""
        self.busy = True
        self.requests.put(case)
        try:
            result, error = self.replies.get(timeout=min(timeout, MAX_TIMEOUT))
        except queue.Empty:
            return None
        self.busy = False
        if error is not None:
            raise error
        return result

    def close(self) -> None:
        """Ends the helper and waits for it when it is idle, so a run does not shut the interpreter down under a
        live thread (a heavy -n 1 run once ended in std::terminate, exit code -6, after writing its CSVs). A case
        still in flight (past its timeout, or a Ctrl-C) is not waited for: the run ends now, as before."""
        self.requests.put(None)
        if not self.busy:
            self.thread.join()
