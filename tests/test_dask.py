"""--backend dask: the same run spread over a Dask cluster of real worker processes gives the same CSVs."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from helpers import misbehaving_env

import api_registry
from precheck.commands.cli import main
from precheck.execution.options import CheckOptions
from precheck.run_ut import run_ut
from tests.test_survive import make_dump

distributed = pytest.importorskip("distributed")

DATA = Path(__file__).parent / "data"
GPT2 = DATA / "gpt2_bf16_tensor/step0/proc8493/dump.json"
GPT2_STATS = DATA / "gpt2_bf16_statistics/step0/proc8497/dump.json"


def read(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f))


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    ) as c:
        yield c.scheduler_address


@pytest.mark.parametrize("dump", [GPT2, GPT2_STATS], ids=["tensor", "statistics"])
def test_dask_run_equals_local_run(tmp_path, cluster, dump):
    options = CheckOptions(standard="auto")
    local = run_ut(dump, tmp_path / "local", device="cpu", workers=1, options=options)
    remote = run_ut(dump, tmp_path / "dask", device="cpu", options=options, scheduler=cluster)
    assert read(remote.result_path) == read(local.result_path)
    assert read(remote.details_path) == read(local.details_path)


def test_dask_cli_options(tmp_path, cluster, capsys):
    assert (
        main(["run_ut", "-api_info", str(GPT2), "-o", str(tmp_path), "-q", "--backend", "dask", "--scheduler", cluster])
        == 0
    )
    assert "47 APIs" in capsys.readouterr().out
    assert main(["run_ut", "-api_info", str(GPT2), "-o", str(tmp_path), "-q", "--backend", "dask"]) == 2
    assert "--backend dask needs --scheduler ADDRESS" in capsys.readouterr().err


def _misbehaving_on_one_worker(tmp_path, monkeypatch, names: list[str]):
    """A run of the misbehaving test APIs ``names`` on a one-worker local cluster, each call given 5 s."""
    for key, value in misbehaving_env().items():
        monkeypatch.setenv(key, value)  # the test APIs, in the cluster's workers too
    api_registry.registry.cache_clear()
    dump = make_dump(tmp_path / "dump.json", names)
    try:
        with distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        ) as c:
            return run_ut(
                dump, tmp_path / "out", device="cpu", options=CheckOptions(timeout=5), scheduler=c.scheduler_address
            )
    finally:
        monkeypatch.delenv("PRECHECK_PLUGINS")
        api_registry.registry.cache_clear()


def test_a_task_past_its_timeout_is_a_skip_row_and_its_worker_is_restarted(tmp_path, monkeypatch):
    names = ["Torch.tanh.0", "Torch.precheck_hang.0", "Torch.sigmoid.0", "Torch.exp.0"]
    summary = _misbehaving_on_one_worker(tmp_path, monkeypatch, names)
    got = {r.name: (r.forward, r.message) for r in summary.results}
    assert got["Torch.precheck_hang.0"] == ("SKIP", "timed out after 5 s; not graded")
    # one worker: the APIs after the hang ran on the worker that replaced it
    assert got["Torch.tanh.0"][0] == got["Torch.sigmoid.0"][0] == got["Torch.exp.0"][0] == "pass"
    assert [r[0] for r in read(summary.result_path)[1:]] == [
        "Torch.tanh.0",
        "Torch.precheck_hang.0",
        "Torch.sigmoid.0",
        "Torch.exp.0",
    ]


def test_a_killed_worker_and_a_system_exit_are_their_calls_rows_not_timeouts(tmp_path, monkeypatch):
    """A call that kills its Dask worker is that call's "worker crashed" row (it was "timed out", or Dask's
    KilledWorker after it had killed four workers); SystemExit is the call's raised SystemExit, as in-process."""
    names = ["Torch.tanh.0", "Torch.precheck_kill.0", "Torch.precheck_sys_exit.0", "Torch.exp.0"]
    summary = _misbehaving_on_one_worker(tmp_path, monkeypatch, names)
    got = {r.name: (r.forward, r.message) for r in summary.results}
    assert got["Torch.precheck_kill.0"][0] == "error"
    assert got["Torch.precheck_kill.0"][1].startswith("worker crashed: Dask's worker tcp://")
    exited = ("error", "the call raised SystemExit: 0, which would have ended the run")
    assert got["Torch.precheck_sys_exit.0"] == exited
    assert got["Torch.tanh.0"][0] == got["Torch.exp.0"][0] == "pass"


def test_a_step_checked_online_on_dask_ships_each_calls_tensors_with_it(tmp_path, cluster):
    """precheck record --check --scheduler: the workers are never told where this machine keeps the tensors (a
    cluster on other machines could not read them); each case's files travel with it, and the rows are those of
    record-then-run_ut."""
    import torch

    import precheck
    from tests.test_record import _model_dumps

    steps = {}
    for name, check in (("offline", {}), ("dask", {"check": True, "scheduler": cluster})):
        torch.manual_seed(0)
        _, loss = _model_dumps("mlp")(torch.float32)
        with precheck.record(tmp_path / name, step=0, **check) as recorder:
            loss().backward()
        steps[name] = recorder
    offline = run_ut(steps["offline"].written[0], tmp_path / "csv", workers=1)
    (details,) = (tmp_path / "dask").glob("accuracy_checking_details_*.csv")
    assert read(details) == read(offline.details_path)
    assert list((steps["dask"].written[0].parent / "dump_tensor_data").iterdir()) == []
