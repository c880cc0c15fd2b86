"""--backend dask: the same run spread over a Dask cluster of real worker processes gives the same CSVs."""

from __future__ import annotations

import csv
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import misbehaving_env

import api_registry
from precheck.commands.cli import main
from precheck.execution.options import CheckOptions
from precheck.run_ut import run_ut
from precheck.scheduling import dask_cluster
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
    assert not (steps["dask"].written[0].parent / "dump_tensor_data").exists()


@pytest.fixture
def threads_cluster():
    """A cluster whose worker runs in this process, over TCP: what a worker sends is serialized as a remote
    one's is, and a test can give the worker its own task function."""
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://", dashboard_address=None, silence_logs=40
    ) as c:
        yield c.scheduler_address


RAN = []


def _ran() -> str:
    RAN.append("code a worker sent ran in the run's process")
    return "pwned"


class _Hostile:
    def __reduce__(self):
        return (_ran, ())


def _pickle_not_json(case, *args):
    """What a hostile worker sends as a task's result: a pickle, whose loading calls _ran."""
    from distributed.protocol.serialize import Serialized, serialize

    return Serialized(*serialize(_Hostile(), serializers=["pickle"]))


def _another_calls_result(case, *args):
    from precheck.results import skipped
    from precheck.scheduling.plain import to_plain

    return to_plain(skipped(replace(case, name="Torch.exp.0"), "not graded"))


@pytest.mark.parametrize(
    ("task", "why"),
    [
        (_pickle_not_json, "not plain data (Data serialized with pickle but only able to deserialize"),
        (_another_calls_result, "the result of 'Torch.exp.0' (order 0), not of this call"),
    ],
)
def test_a_workers_result_is_plain_data_for_its_call_or_refused_never_unpickled(
    tmp_path, threads_cluster, monkeypatch, capfd, task, why
):
    RAN.clear()
    monkeypatch.setattr(dask_cluster, "_check_remote", task)
    dump = make_dump(tmp_path / "dump.json", ["Torch.tanh.0"])
    (result,) = run_ut(dump, tmp_path / "out", device="cpu", scheduler=threads_cluster).results
    assert RAN == []
    assert (result.forward, result.message.partition(why)[0]) == ("error", "dask worker's result refused: ")
    assert "Traceback" not in capfd.readouterr().err


def _self_signed(folder: Path) -> tuple[str, str]:
    """A certificate that is its own authority, and its key, made by openssl in a few milliseconds."""
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=precheck-test"],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="makes its certificate with the openssl command")
def test_a_tls_scheduler_is_reached_with_the_tls_options_and_refused_without(tmp_path, capsys):
    cert, key = _self_signed(tmp_path)
    roles = {
        f"tls_{role}_{part}": path
        for role in ("scheduler", "worker", "client")
        for part, path in (("cert", cert), ("key", key))
    }
    cluster_security = distributed.Security(tls_ca_file=cert, require_encryption=True, **roles)
    dump = make_dump(tmp_path / "dump.json", ["Torch.tanh.0"])
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tls://",
        security=cluster_security,
        dashboard_address=None,
        silence_logs=40,
    ) as c:
        address = c.scheduler_address
        argv = ["run_ut", "-api_info", str(dump), "-o", str(tmp_path), "-q", "--scheduler", address]
        assert main([*argv, "--tls-ca-file", cert, "--tls-cert", cert, "--tls-key", key]) == 0
        assert "1 APIs" in capsys.readouterr().out
        assert main(argv) == 2  # no certificate: the cluster lets no one in without one
    assert capsys.readouterr().err.startswith(
        f"precheck: error: cannot connect to the Dask scheduler {address}: TLS expects"
    )
    assert main([*argv[:-2], "--tls-ca-file", cert, "--tls-cert", cert]) == 2
    assert "--tls-ca-file, --tls-cert and --tls-key go with --scheduler" in capsys.readouterr().err
    assert main([*argv[:-1], "tcp://127.0.0.1:1", "--tls-ca-file", cert, "--tls-cert", cert]) == 2
    assert "the TLS options need a tls:// scheduler address, not 'tcp://127.0.0.1:1'" in capsys.readouterr().err
