"""What a run is asked to do, as one value: torch-free, so the command line can build and check it (and answer
``--help``) without loading torch, and a worker process receives it whole."""

from __future__ import annotations

from dataclasses import dataclass

from precheck.errors import OptionError
from precheck.grader.choices import DEFAULT_COSINE, DEFAULT_MAX_ABS

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
