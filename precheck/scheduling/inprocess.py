"""The in-process backend: cases on a helper thread of this process, for dumps too small to pay for a pool.

Each case is waited for at most its timeout: a case past it is a SKIP row (not graded), its thread is left behind
(a hung C kernel cannot be interrupted) and the remaining cases run in worker processes. An API that crashes the process
takes an in-process run down; the resume journal (run_files/run_state.py) names the APIs that were running then, and
a resume checks those in worker processes (``isolate``).

A call known to crash a process instead of raising (one that switches off torch's checks of its arguments:
api_registry/unchecked.py) never runs here: such calls are set aside and checked after the others, in a worker
process whose death is that call's error row, so a hostile record costs its own row and no other. The rule is
read per call from what the record asks for, not per dump: a dump holding such a call still runs its other calls
here, without paying for a pool.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Generator, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass
from pathlib import Path

import torch

from api_registry.unchecked import unchecked
from precheck.dump.records import Case
from precheck.execution.check import check_case
from precheck.execution.options import CheckOptions
from precheck.results import ApiResult
from precheck.scheduling.costs import MAX_TIMEOUT
from precheck.scheduling.loop import Body, prepare_worker


@dataclass
class Handoff:
    """The cases this process must not run, for worker processes (backends.InProcess runs them there):
    ``width`` of them at once at most, one for calls set aside because they may crash their process."""

    cases: Iterator[Case]
    width: int


def in_process(
    cases: Sequence[Case] | Iterable[Case], data_dir: Path, body: Body
) -> Generator[ApiResult, None, Handoff]:
    """The cases on a helper thread of this process, each waited for at most its timeout. One past it is a
    SKIP row; its thread is abandoned (it may be stuck in a C kernel that nothing can interrupt, a daemon thread
    that dies with the process) and the cases after it are handed off, undecoded, to worker processes, as are
    the calls that may crash the process (api_registry/unchecked.py), which come last."""
    # One intra-op thread here too, so a CPU target computes bit for bit what a pool worker computes: the
    # verdicts never depend on -n. Work small enough to run here gains little from threads anyway.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    inline = _Inline(data_dir, body.options)
    crashing: list[Case] = []  # set aside, never run in this process
    try:
        source = iter(cases)
        for i, case in enumerate(source):
            if unchecked(case.kwargs):
                crashing.append(case)
                continue
            result = inline.check(case, body.start(case))
            if result is None:
                yield body.late(case)
                left = len(cases) - i - 1 if isinstance(cases, Sized) else 1  # a stream's length is not known
                return Handoff(itertools.chain(crashing, source), left + len(crashing))
            yield result
        return Handoff(iter(crashing), min(1, len(crashing)))
    finally:
        inline.close()
        torch.set_num_threads(threads)


# Helpers left in a case (past its timeout, or a run stopped by a signal): they may still be running torch.
_LEFT: list[threading.Thread] = []


def in_flight() -> bool:
    """Whether a helper left in a case still runs. The interpreter's shutdown must not meet it: a daemon thread
    that takes the GIL back from a torch kernel during finalization is unwound through torch's noexcept C++
    frames, and the process ends in std::terminate (exit -6) whatever code it was exiting with."""
    return any(t.is_alive() for t in _LEFT)


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
        prepare_worker()
        while (case := self.requests.get()) is not None:
            try:
                self.replies.put((check_case(case, data_dir, options), None))
            except BaseException as e:  # Ctrl-C, a stop the run is to act on (it reaches the waiting thread)
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
        still in flight (past its timeout, or a Ctrl-C) is not waited for: the run ends now, and the program
        leaves without the interpreter's shutdown (in_flight, commands/cli.main)."""
        self.requests.put(None)
        if not self.busy:
            self.thread.join()
        else:
            _LEFT.append(self.thread)
