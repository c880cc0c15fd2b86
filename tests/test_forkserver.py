"""The fork server that pool workers come from: started early only for a dump that will likely run in a pool."""

from __future__ import annotations

from helpers import DATA

from precheck.scheduling import forkserver


def _dump(tmp_path, tensor_bytes: int = 0, json_bytes: int = 10):
    tmp_path.mkdir()
    dump = tmp_path / "dump.json"
    with open(dump, "wb") as f:
        f.truncate(json_bytes)  # sparse: only the size is read
    data = tmp_path / "dump_tensor_data"
    data.mkdir()
    for i in range(3):
        with open(data / f"t{i}.pt", "wb") as f:
            f.truncate(tensor_bytes // 3)
    return dump


def test_a_dump_of_large_tensor_files_or_many_records_is_likely_a_pool(tmp_path):
    assert forkserver.likely_pool(_dump(tmp_path / "a", tensor_bytes=300 * 2**20))
    assert forkserver.likely_pool(_dump(tmp_path / "b", json_bytes=5 * 2**20))
    assert not forkserver.likely_pool(_dump(tmp_path / "c", tensor_bytes=2**20))


def test_the_bundled_dumps_run_in_process_without_a_server_started_for_them():
    for name in ("gpt2_bf16_tensor", "opinfo_fp32_all", "opinfo_bf16_all_stats"):
        (dump,) = (DATA / name).glob("step*/*/dump.json")
        assert not forkserver.likely_pool(dump), name


def test_an_unreadable_path_is_not_a_pool_and_not_an_error(tmp_path):
    assert not forkserver.likely_pool(tmp_path / "missing" / "dump.json")


def test_a_worker_takes_the_plugins_and_stderr_of_the_run_not_of_the_server(tmp_path, monkeypatch, capfd):
    """The server started before PRECHECK_PLUGINS was set (a library user sets it between runs): a pool's workers
    still check the plugin's API, as spawned workers did."""
    from helpers import misbehaving_env
    from test_survive import make_dump

    from precheck.run_ut import run_ut

    forkserver.start_early()
    for key, value in misbehaving_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(str(DATA.parent))
    dump = make_dump(tmp_path / "dump.json", ["Torch.precheck_slow.0", "Torch.precheck_slow.1"])
    summary = run_ut(dump, tmp_path / "out", device="cpu", workers=2, backend="process")
    assert summary.counts == {"pass": 2}
