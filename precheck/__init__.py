"""precheck: API precision pre-check and test generation for PyTorch.

The public face, each name loaded on first use so that ``import precheck`` is fast and imports no torch:

- :func:`precheck.check_dump`: run_ut as one library call, a dump's calls re-run and graded
  (:func:`precheck.run_ut.run_ut`);
- :func:`precheck.compare_dumps`: two dumps of one step compared as ``precheck compare`` does
  (:func:`precheck.compare.dumps.compare_dumps`);
- :func:`precheck.load`: a run's or a compare's CSVs as a pandas DataFrame;
- :func:`precheck.record`: a training step recorded as msprobe records it, without msprobe;
- :func:`precheck.grade` and :func:`precheck.assert_precise`: the grader's verdict on one output, and the
  assertion for your own tests (:mod:`precheck.grader`); :func:`precheck.honest_run` gives them run_ut's honest
  kernel of a call;
- :class:`precheck.PrecheckError`: the root of the errors precheck raises for bad input.

run_ut and the dump compare are named ``check_dump`` and ``compare_dumps`` here because ``precheck.run_ut`` and
``precheck.compare`` are their packages: importing one of them sets that attribute to the module.
"""

import sys
from importlib import import_module
from typing import Any

if sys.version_info < (3, 9):  # noqa: UP036 (an older Python gets one line, not a SyntaxError later)
    _OLD = f"precheck needs Python 3.9 or newer; this is Python {sys.version.split()[0]} ({sys.executable})"
    if sys.argv[:1] == ["-m"]:  # `python -m precheck ...`: a command answers in one line, exit 2
        sys.stderr.write(f"precheck: error: {_OLD}\n")
        raise SystemExit(2)
    raise ImportError(_OLD)

from precheck.version import __version__

_FACE = {  # each public name: the module it lives in, and its name there
    "check_dump": ("precheck.run_ut", "run_ut"),
    "compare_dumps": ("precheck.compare.dumps", "compare_dumps"),
    "load": ("precheck.frames", "load"),
    "record": ("precheck.recording.api", "record"),
    "grade": ("precheck.grader.verdict", "grade"),
    "assert_precise": ("precheck.grader.assertion", "assert_precise"),
    "honest_run": ("precheck.grader.honest", "honest_run"),
    "PrecheckError": ("precheck.errors", "PrecheckError"),
}
__all__ = ["__version__", *_FACE]


def __getattr__(name: str) -> Any:
    """A public name imports its module only when used: the commands that read CSVs import precheck too."""
    if name not in _FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _FACE[name]
    return getattr(import_module(module), attribute)


def __dir__() -> list[str]:
    """The public names with the module's own, so ``precheck.<TAB>`` in an interpreter or IDE offers the names
    that load on first use (``grade``, ``assert_precise``, ``honest_run`` ...), not only those already loaded."""
    return sorted({*globals(), *_FACE})
