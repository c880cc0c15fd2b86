"""Imported by Python at start-up in a process ``precheck record`` runs (its folder is first on PYTHONPATH).

It starts nothing by itself: once the program imports torch, precheck.recording.auto starts recording as
PRECHECK_RECORD says. A sitecustomize the environment already had is imported too, as if this one were absent:
it is the module ``import sitecustomize`` gives the program (``from sitecustomize import setup`` works).
"""

import importlib
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain() -> None:
    """Import the sitecustomize this one shadows, if any, and leave it as sys.modules' sitecustomize."""
    this = sys.modules.pop("sitecustomize", None)
    path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    saved, sys.path[:] = sys.path[:], path
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        sys.modules["sitecustomize"] = this  # none: this one stays, so a later import does not run it again
    finally:
        sys.path[:] = saved


_chain()
if os.environ.get("PRECHECK_RECORD"):
    from precheck.recording.auto import when_torch_loads

    when_torch_loads()
