"""Helpers the tests import: the real dumps under tests/data, msprobe's record encodings, small dumps cut from big ones.

Fixtures live in conftest.py; tests import these by name (``from helpers import ...``)."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from api_registry import lookup

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


def _rec(t: torch.Tensor, data: Path | None, name: str, requires_grad: bool = False) -> dict:
    """One tensor as msprobe records it: its statistics, and its file where ``data`` (tensor mode) is given."""
    if data is not None:
        torch.save(t, data / name)
    s = t.double()
    stats = {"Max": s.max().item(), "Min": s.min().item(), "Mean": s.mean().item(), "Norm": s.norm().item()}
    shape = tuple(t.shape)
    return tensor_rec(str(t.dtype), shape, data_name=name if data else None, requires_grad=requires_grad, **stats)


def _inplace_call(data: Path | None, api: str, args: list, kwargs: dict, noise: float) -> dict[str, dict]:
    """The forward and backward records of one in-place call, made by running it as training ran it: on a non-leaf
    input (a layer's output), whose value before the call is the recorded input and after it the recorded output;
    the backward record holds the gradients at the in-place op's node (``noise``: a bugged device's outputs)."""
    func = lookup(api.rsplit(".", 1)[0]).func
    leaves = [a.detach().requires_grad_(True) if isinstance(a, torch.Tensor) else a for a in args]
    inputs = [a * 1 if isinstance(a, torch.Tensor) else a for a in leaves]
    encoded = [
        _rec(a, data, f"{api}.forward.input.{i}.pt", True) if isinstance(a, torch.Tensor) else a
        for i, a in enumerate(args)
    ]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        out = func(*[a if isinstance(a, torch.Tensor) else a["value"] for a in inputs], **kwargs)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad(out, [a for a in leaves if isinstance(a, torch.Tensor)], grad_out)
    out = out.detach() * (1 + noise)
    kwargs_rec = {k: {"type": "bool", "value": v} for k, v in kwargs.items()}
    return {
        f"{api}.forward": forward_rec(*encoded, kwargs=kwargs_rec, output=[_rec(out, data, f"{api}.out.pt")]),
        f"{api}.backward": {
            "input": [_rec(grad_out, data, f"{api}.backward.input.0.pt")],
            "output": [_rec(g, data, f"{api}.backward.output.{i}.pt") for i, g in enumerate(grads)],
        },
    }


def inplace_dump(root: Path, task: str, noise: float = 0.0) -> Path:
    """A dump of in-place calls from real tensors: ``F.relu(x, inplace=True)`` (keyword), ``F.dropout(x, 0.5,
    True, True)`` (positional), ``x.add_(y)`` and ``x += y``."""
    data = root / "dump_tensor_data" if task == "tensor" else None
    (data or root).mkdir(parents=True)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 32, generator=gen), torch.randn(32, 32, generator=gen)
    flags = [{"type": "float", "value": 0.5}, {"type": "bool", "value": True}, {"type": "bool", "value": True}]
    records = {
        **_inplace_call(data, "Functional.relu.0", [x], {"inplace": True}, noise),
        **_inplace_call(data, "Functional.dropout.0", [x, *flags], {}, 0.0),
        **_inplace_call(data, "Tensor.add_.0", [x, y], {}, noise),
        **_inplace_call(data, "Tensor.__iadd__.0", [x, y], {}, noise),
    }
    doc = {"task": task, "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": records}
    (root / "dump.json").write_text(json.dumps(doc), encoding="utf-8")
    return root / "dump.json"


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
browser = pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (.ci/setup --test installs Debian's package)")


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


# `precheck report` with files limited to 4 KiB (SIGXFSZ ignored: the write fails with EFBIG), as a disk that
# fills up, or a kill, part-way through the page.
_WRITE_STOPS = """
import resource, signal, sys
from precheck.commands.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
sys.exit(main(["report", sys.argv[1]]))
"""


def report_with_a_full_disk(folder: Path) -> subprocess.CompletedProcess:
    """``precheck report FOLDER`` in a child process whose files cannot grow past 4 KiB."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-c", _WRITE_STOPS, str(folder)], capture_output=True, text=True, env=env, timeout=120
    )


def run_step_inprocess(step: Path, out: Path) -> Any:
    """A step folder of ranks run as one (precheck.ranks.run_step) in this process, one worker."""
    from precheck.dump.steps import find_dumps
    from precheck.ranks import run_step

    return run_step(find_dumps(step), out, device="cpu", workers=1, backend="inprocess")


def collective_rows(summary: Any) -> dict[tuple[str, str], dict[str, str]]:
    """(rank folder, API name) -> its result row, for every Distributed.* row of a step's run."""
    from precheck.run_files.csv_files import read_csv_rows

    return {
        (rank, row["API name"]): row
        for rank, run in summary.ranks.items()
        for row in read_csv_rows(run.result_path)[1]
        if row["API name"].startswith("Distributed.")
    }


@contextmanager
def without_collector() -> Iterator[None]:
    """The cyclic garbage collector off: what is freed inside is freed by its last reference going, as a run's
    memory needs it to be (a cycle holding a case's tensors lives until a collection happens to run)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
