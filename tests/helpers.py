"""Helpers the tests import: the real dumps under tests/data, msprobe's record encodings, small dumps cut from big ones.

Fixtures live in conftest.py; tests import these by name (``from helpers import ...``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"
REAL_DUMPS = {
    "mlp_fp32_tensor": 6,
    "gpt2_bf16_tensor": 47,
    "gpt2_bf16_statistics": 47,
    "bert_bf16_tensor": 52,
    "cnn_bf16_tensor": 13,
    "llama_fp32_statistics": 119,
    "encoder_fp32_tensor": 28,
    "composite_fp32_tensor": 28,
}


def real_dump_json(name: str) -> Path:
    """The dump.json of one of the recorded dumps (``DUMP/step0/procNNNN/dump.json``)."""
    found = sorted((DATA / name).glob("step*/*/dump.json"))
    assert len(found) == 1, f"expected exactly one dump.json under {DATA / name}, found {found}"
    return found[0]


def tensor_rec(
    dtype: str = "torch.float32",
    shape: Any = (2, 3),
    *,
    data_name: str | None = None,
    requires_grad: bool = False,
    type_: str = "torch.Tensor",
    **stats: Any,
) -> dict:
    """One encoded tensor argument as msprobe writes it (REFERENCE §1)."""
    rec = {
        "type": type_,
        "dtype": dtype,
        "shape": list(shape) if isinstance(shape, tuple) else shape,
        "Max": 1.0,
        "Min": -1.0,
        "Mean": 0.0,
        "Norm": 2.0,
        "requires_grad": requires_grad,
    }
    rec.update(stats)
    if data_name is not None:
        rec["data_name"] = data_name
    return rec


def forward_rec(*args: Any, kwargs: dict | None = None, output: list | None = None) -> dict:
    return {
        "input_args": list(args),
        "input_kwargs": kwargs or {},
        "output": output if output is not None else [tensor_rec()],
    }


def link_tensor_data(source: Path, into: Path) -> None:
    """``into/dump_tensor_data`` holding ``source``'s files as hard links (copies across file systems): a folder of
    the dump's own, since a dump_tensor_data that is a link out of its dump is refused."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, into / "dump_tensor_data", copy_function=link)


def one_api_dump(src: Path, api: str, into: Path) -> Path:
    """A copy of a dump that holds one API's forward and backward records."""
    doc = json.loads(src.read_text())
    doc["data"] = {k: v for k, v in doc["data"].items() if k.startswith(api + ".")}
    into.mkdir(parents=True)
    (into / "dump.json").write_text(json.dumps(doc))
    link_tensor_data(src.parent / "dump_tensor_data", into)
    return into / "dump.json"


def misbehaving_env() -> dict[str, str]:
    """The environment that registers the APIs of tests/misbehaving.py (crash, hang, sticky device error) as a
    plugin, in this process, in the workers it starts and in a ``python -m precheck`` it runs."""
    tests = str(Path(__file__).parent)
    path = os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH", "")]))
    return {"PRECHECK_PLUGINS": "misbehaving", "PYTHONPATH": path}


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
browser = pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (.ci/setup installs Debian's package)")


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium with a profile of its own under ``tmp_path``, no network, its console on stderr."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def dom_of(tmp_path: Path, page: Path, query: str = "") -> str:
    """The page's DOM after its script ran, asserting no console error and that the script finished."""
    done = chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", page.as_uri() + query)
    errors = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not errors, errors
    assert 'data-ready="' in done.stdout, "the page's script did not finish"
    return done.stdout
