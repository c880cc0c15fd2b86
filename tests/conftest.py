"""Fixtures shared by the tests (helpers they import by name are in helpers.py).

The CPU kernels are pinned to AVX2 (torch's own kernels, MKL and oneDNN) before torch is imported here or in any
process a test starts: their vectorised paths round differently on an AVX-512 machine, and the pinned CSVs
(tests/golden_csv.py, written on an AVX2 machine) hold every cell to 14 decimals. A machine without AVX2 keeps
its own kernels. torch.compile's kernels get a cache of their own: inductor's cache key leaves out the pinned ISA,
and a softmax compiled for AVX-512 earlier on the same machine, read back under AVX2, computes garbage.

The recorded dumps' tensor folders are tracked as archives (tests/data/fixtures.py): each session first unpacks
those whose folder is missing or stale, before collection, so a fresh clone's first run finds every fixture."""

from __future__ import annotations

import os
import tempfile

for _name, _isa in (
    ("ATEN_CPU_CAPABILITY", "avx2"),
    ("MKL_ENABLE_INSTRUCTIONS", "AVX2"),
    ("ONEDNN_MAX_CPU_ISA", "AVX2"),
):
    os.environ.setdefault(_name, _isa)
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "torchinductor_precheck_avx2"))

import importlib.util  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

FIXTURES = Path(__file__).parent / "data" / "fixtures.py"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Unpack the fixtures' archives once per checkout. A hook, not a fixture: it runs before collection (a test
    module may list a dump's files while it is collected) and, under pytest-xdist, in the controller before the
    workers start; each worker then finds every folder fresh (fixtures.unpack locks and renames into place)."""
    spec = importlib.util.spec_from_file_location("precheck_test_fixtures", FIXTURES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    start = time.monotonic()
    done = module.unpack()
    if done:
        print(f"fixtures: unpacked {len(done)} archives ({time.monotonic() - start:.1f} s)", file=sys.stderr)


# The modules whose tests start processes, record or train programs, or run whole dumps under every standard: 610 of
# the suite's 750 seconds of tests (pytest --durations=0, 2026-11-29). `pytest -m "not slow" -n 2` is the fast suite
# a developer runs between edits (tests/README.md); CI runs them all. A module joins when its tests together take
# more than about 10 s.
SLOW_MODULES = frozenset({
    "test_survive.py", "test_resume.py", "test_record_sharded.py", "test_hostile_bounds.py", "test_golden_csv.py",
    "test_check_predicts.py", "test_testgen.py", "test_random_checks.py", "test_mindspore.py", "test_dask.py",
    "test_record_processes.py", "test_style.py", "test_codegen.py", "test_record_online.py", "test_record_hostile.py",
    "test_fuzz.py", "test_targets.py", "test_report.py", "test_forkserver.py", "test_nightly.py",
})  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow modules' tests ``slow``: ``-m "not slow"`` leaves them out."""
    for item in items:
        if Path(str(item.fspath)).name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


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


@pytest.fixture
def world_of_one():
    """A gloo process group of this process alone (rank 0 of 1), destroyed after the test."""
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        yield
    finally:
        dist.destroy_process_group()
