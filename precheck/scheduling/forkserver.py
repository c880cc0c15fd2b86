"""Where worker processes come from: forked from a server that imported torch once, where the platform has one.

A spawned worker imports torch and the API table itself, a second of one core each, during which a pool does
nothing: on the LLaMA-sized bf16 step that second was most of what kept ``-n 2`` from doubling ``-n 1``. The
fork server imports them once, and the command line starts it before the run imports torch, so the two imports
overlap; each worker is then a fork of a process that has run no torch op (no OpenMP team, no device context),
which is what makes forking it safe. This module imports nothing heavy, so it can be called first.

It is started early only for a dump that will likely run in a pool (judged by its files' sizes, before anything
is decoded): on a small dump, which runs in-process, the server's import would only compete with the run's own.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.context import BaseContext
from pathlib import Path

# Imported by the fork server before it forks any worker: the worker's own module and the API table.
PRELOAD = ["precheck.scheduling.preload"]
SAFE_PATH = "PYTHONSAFEPATH"


def worker_context() -> BaseContext:
    """The fork server's context where there is one (Linux, macOS), started if it is not running, else spawn's
    (Windows)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    _ensure_server()
    return context


@contextmanager
def main_left_out() -> Iterator[None]:
    """Start workers without the caller's main module. multiprocessing imports the parent's ``__main__`` in
    every child it starts; a worker runs only precheck's code, and a training script without an ``if __name__
    == "__main__"`` guard (recorded with ``precheck record --check``, or calling run_ut) would train again in
    each worker and start workers of its own."""
    main = sys.modules.get("__main__")
    saved = {k: v for k, v in vars(main).items() if k in ("__file__", "__spec__")} if main is not None else {}
    if "__file__" in saved:
        del main.__file__
    if "__spec__" in saved:
        main.__spec__ = None  # read by multiprocessing without a default
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(main, name, value)


def _ensure_server() -> None:
    """Start the fork server, unless it runs, with the working directory left off its import path.

    The server is a ``python -c`` whose import path starts with the working directory (Python 3.11 does not give
    it the run's path). A folder there named ``precheck``, such as the clone a user runs from beside, shadowed the
    installed package in the server; every worker forked from it inherited that empty package, died at start
    ("cannot import name '__version__' from 'precheck'") and the run ended. PYTHONSAFEPATH (Python 3.11+) keeps
    the directory off, as it is off for the ``precheck`` command itself; the server's children take the run's
    environment and path (process._Inherited), so nothing else sees the variable."""
    from multiprocessing import forkserver

    saved = os.environ.get(SAFE_PATH)
    os.environ[SAFE_PATH] = "1"
    try:
        forkserver.ensure_running()
    finally:
        if saved is None:
            del os.environ[SAFE_PATH]
        else:
            os.environ[SAFE_PATH] = saved


# Sizes past which the cost model (scheduling/costs.py) chooses a pool: about 4 s of serial work, at 2e-8 s an
# element of tensor files (bf16: 2 bytes) or 4 ms a record (about 1.5 KB of dump.json each).
LIKELY_POOL_TENSOR_BYTES = 256 * 2**20
LIKELY_POOL_JSON_BYTES = 4 * 2**20


def likely_pool(dump_json: str | Path) -> bool:
    """Whether a dump is heavy enough that its run will likely use a pool: its dump.json or its tensor files are
    large (the files are summed only until the bound is reached: a dump of 100,000 files costs no full scan)."""
    try:
        if os.path.getsize(dump_json) >= LIKELY_POOL_JSON_BYTES:
            return True
        total = 0
        with os.scandir(Path(dump_json).parent / "dump_tensor_data") as entries:
            for entry in entries:
                total += entry.stat(follow_symlinks=False).st_size
                if total >= LIKELY_POOL_TENSOR_BYTES:
                    return True
    except OSError:
        return False
    return False


def start_early() -> None:
    """Start the fork server now, in the background, so it imports torch while this process does the same."""
    worker_context()
