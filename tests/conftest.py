"""Fixtures shared by the tests (helpers they import by name are in helpers.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def write_dump(tmp_path: Path) -> Callable[..., Path]:
    """Write ``{"task", "level", "framework", "dump_data_dir", "data"}`` to tmp_path/dump.json.

    ``data`` may be a dict (written as JSON, order kept) or a raw string (written verbatim, for JSON that only
    Python's encoder accepts, or that is broken on purpose)."""

    def write(
        data: Any,
        *,
        task: Any = "tensor",
        level: str = "L1",
        framework: str = "pytorch",
        name: str = "dump.json",
        raw: str | None = None,
    ) -> Path:
        path = tmp_path / name
        if raw is not None:
            path.write_text(raw, encoding="utf-8")
            return path
        doc = {"task": task, "level": level, "framework": framework, "dump_data_dir": None, "data": data}
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")  # json.dumps writes NaN/Infinity as msprobe
        return path

    return write
