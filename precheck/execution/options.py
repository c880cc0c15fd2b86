"""What a run is asked to do, as one value: torch-free, so the command line can build and check it (and answer
``--help``) without loading torch, and a worker process receives it whole."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from precheck.errors import OptionError
from precheck.grader.choices import DEFAULT_COSINE, DEFAULT_MAX_ABS

if TYPE_CHECKING:
    from precheck.dump.selection import ApiLists
    from precheck.scheduling.tls import Tls

# The names of what a run grades and where its cases run, torch-free so that the command line offers them without
# loading torch: the built-in ones, and those register_target (execution/targets.py) and register_backend
# (scheduling/backends.py) add. The command line's choices are these lists themselves.
TARGETS: list[str] = ["device", "recorded", "compile", "mindspore"]
BACKENDS: list[str] = ["auto", "inprocess", "process", "dask"]


def check_scheduler(backend: str, scheduler: str | None) -> None:
    """The one check that a Dask scheduler goes with the dask backend (or auto), and dask with one: run_ut makes
    it before it opens its files, scheduling.backends as it picks a backend (a library caller's, or record's)."""
    if backend == "dask" and not scheduler:
        raise OptionError("--backend dask needs --scheduler ADDRESS")
    if scheduler and backend not in ("dask", "auto"):
        raise OptionError(f"--scheduler goes with --backend dask, not {backend}")


@dataclass(frozen=True)
class CheckOptions:
    device: str = "cpu"
    cosine: float = DEFAULT_COSINE
    max_abs: float = DEFAULT_MAX_ABS
    seed: int = 0  # seeds every generated input, together with the API name and argument place
    force_random: bool = False  # generate inputs from statistics even where the dump saved the data
    max_memory: int | None = None  # bytes one case may need; above it the case is a SKIP row
    standard: str = "default"  # precision standard (precheck.grader.standards), or "auto" per API class
    bench_device: str | None = None  # reference device for the benchmark standard (the same call, target dtypes)
    target: str = "device"  # device (re-run on `device`), recorded (the dump's outputs), compile, mindspore
    keep_tensors: bool = False  # keep inputs, target and golden outputs in the result (generated tests)
    save_error_data: str | None = None  # folder for the inputs and outputs of every API that is not pass
    timeout: float | None = None  # seconds one API may take in a pool worker (None: scaled by size)


@dataclass(frozen=True)
class RunOptions:
    """How one run_ut run goes, as one value (:func:`precheck.run_ut.run_ut`): what is graded and how
    (``check``), the device, where the cases run (``backend``, ``workers``, a Dask ``scheduler`` and its ``tls``
    files), which calls (msprobe's ``api_lists``, ``filter_api``: one call per signature), the run it continues
    (``csv_path``), the dump's ``framework`` where its own field is not to be used, whether the summary keeps
    every result (``keep_results``) and draws a progress bar. :meth:`of` takes run_ut's keywords of before."""

    check: CheckOptions = CheckOptions()
    device: str = "auto"
    workers: int | None = None
    progress: bool = False
    csv_path: str | os.PathLike | None = None
    api_lists: ApiLists | None = None
    filter_api: bool = False
    backend: str = "auto"
    scheduler: str | None = None
    tls: Tls | None = None
    keep_results: bool = True
    framework: str | None = None

    @classmethod
    def of(cls, options: RunOptions | CheckOptions | None = None, **keywords: Any) -> RunOptions:
        """The run's options from ``options`` (a RunOptions, or the CheckOptions of its grading) and any of its
        fields by name, as run_ut took them one by one (``device="cpu", workers=1``); TypeError names a keyword
        that is none of them."""
        unknown = sorted(set(keywords) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"run_ut() got unexpected keyword argument(s): {', '.join(unknown)}")
        if isinstance(options, RunOptions):
            return replace(options, **keywords)
        return cls(check=options or CheckOptions(), **keywords)
