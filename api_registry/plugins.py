"""APIs from outside precheck: the modules named in PRECHECK_PLUGINS (comma-separated, importable) each define
``ENTRIES = {"Torch.my_op": callable, ...}``, checked like any other API (standard class ``other``, the callable as
its own golden in float64). A team's custom ops go there, and so do the test suite's APIs that crash and hang on
purpose; worker processes inherit the variable, so they see the same APIs.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

ENV = "PRECHECK_PLUGINS"


class PluginError(ImportError):
    """A module named in PRECHECK_PLUGINS cannot be imported or defines no ENTRIES mapping."""


def plugin_entries() -> dict[str, Callable[..., Any]]:
    entries: dict[str, Callable[..., Any]] = {}
    for name in filter(None, (part.strip() for part in os.environ.get(ENV, "").split(","))):
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise PluginError(f"{ENV}: cannot import {name}: {e}") from None
        table = getattr(module, "ENTRIES", None)
        if not isinstance(table, dict) or not all(isinstance(k, str) and callable(v) for k, v in table.items()):
            raise PluginError(f"{ENV}: {name} defines no ENTRIES mapping of API names to callables")
        entries.update(table)
    return entries
