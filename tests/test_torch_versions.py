"""torch 2.1 to the newest: a torch outside that range gets one line (below: refused, above: a warning), a torch
that lacks what the recorder hooks into stops the program before it runs, and what older torch spells otherwise
(its pytree without key paths) gives the same answers. The compatibility pass (.ci/compat) runs these, and the
tests in tests/compat.txt, on torch 2.1.2 itself."""

from __future__ import annotations

import collections
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from precheck import compat, torch_range, walk
from precheck.commands.cli import main
from precheck.compat import RECORDING_NEEDS, is_compiling, lacking
from precheck.core.older_python import zip_strict

DATA = Path(__file__).parent / "data"
MLP = DATA / "mlp_fp32_tensor/step0/proc8486/dump.json"
RANGE = f"torch {torch_range.FLOOR[0]}.{torch_range.FLOOR[1]} to {torch_range.NEWEST[0]}.{torch_range.NEWEST[1]}"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_torch_below_the_floor_is_refused_in_one_line_before_run_ut_reads_anything(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(torch_range, "installed_torch", lambda: "2.0.1+cu118")
    code, out, err = _run(capsys, "run_ut", "-api_info", str(MLP), "-o", str(tmp_path / "out"), "-d", "cpu")
    assert code == 2 and out == "" and not (tmp_path / "out").exists()
    assert err == (
        f"precheck: error: torch 2.0.1+cu118 is older than precheck supports ({RANGE}): run_ut needs torch>=2.1\n"
    )


def test_a_torch_newer_than_the_newest_tested_is_warned_of_and_the_run_goes_on(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(torch_range, "installed_torch", lambda: "2.14.0")
    code, out, err = _run(capsys, "run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "-d", "cpu", "-q")
    assert code == 0 and "forward:  pass 6, warning 0, error 0, SKIP 0" in out
    assert err.splitlines() == [
        f"precheck: warning: torch 2.14.0 is newer than precheck has been tested on ({RANGE}); run_ut goes on"
    ]


def test_commands_that_only_read_csvs_do_not_ask_for_a_torch(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(torch_range, "installed_torch", lambda: "1.13.1")
    header = "\ufeffAPI name,Forward Test Success,Backward Test Success,Message\r\n"
    for name in ("old.csv", "new.csv"):
        (tmp_path / name).write_bytes((header + "Torch.add.0,pass, , \r\n").encode())
    argv = ["regress", "--baseline", str(tmp_path / "old.csv"), "--current", str(tmp_path / "new.csv")]
    code, _, err = _run(capsys, *argv, "-o", str(tmp_path))
    assert code == 0 and "1.13.1" not in err and "older" not in err
    assert err.startswith("precheck: warning: neither run has a run record")  # CSVs alone: no settings compared


def test_record_refuses_a_torch_below_the_floor_before_the_program_starts(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(torch_range, "installed_torch", lambda: "2.0.1")
    ran = tmp_path / "ran"
    program = [sys.executable, "-c", f"open({str(ran)!r}, 'w')"]
    code, _, err = _run(capsys, "record", "-o", str(tmp_path / "d"), "--", *program)
    assert code == 2 and not ran.exists()
    assert err == f"precheck: error: torch 2.0.1 is older than precheck supports ({RANGE}): record needs torch>=2.1\n"


def test_a_programs_torch_that_lacks_a_recorders_hook_stops_it_at_its_import_and_says_what(tmp_path):
    """The program's interpreter may have another torch than precheck's: it is asked at its import of torch. A
    torch without the module hooks stops the program there (nothing of it ran, nothing was half recorded), and
    precheck record names what it lacks instead of blaming the program for not importing torch."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '2.4.0'\n")
    ran, program = tmp_path / "ran", tmp_path / "train.py"
    program.write_text(f"import torch\nopen({str(ran)!r}, 'w')\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "site")}
    command = [sys.executable, "-m", "precheck", "record", "-o", str(tmp_path / "d"), "--", sys.executable]
    command.append(str(program))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and not ran.exists()
    assert (
        "torch 2.4.0 has no torch.nn.modules.module.register_module_forward_pre_hook, which precheck record "
        "needs; the program was stopped at its import of torch, before anything ran" in done.stderr
    )
    assert "imported torch with precheck installed" not in done.stderr + done.stdout


def test_this_torch_has_what_the_recorder_needs():
    assert lacking(RECORDING_NEEDS) == []


def test_is_compiling_is_true_only_while_dynamo_traces():
    seen = []

    def f(x: torch.Tensor) -> torch.Tensor:
        seen.append(is_compiling())
        return x + 1

    torch.compile(f, backend="eager")(torch.zeros(2))
    assert seen == [True] and not is_compiling()


_Pair = collections.namedtuple("_Pair", "first second")


@pytest.mark.filterwarnings("ignore::FutureWarning")  # the private helpers the walk uses on torch 2.1 only
def test_a_pytree_without_key_paths_walks_to_the_same_leaves_and_places(monkeypatch):
    """torch 2.1's pytree has no key paths and no is_leaf (and counts a Size as a node): the walk over its node
    table gives what the key-path walk gives on a newer torch."""
    tree = (
        _Pair(torch.ones(1), torch.Size([2, 3])),
        {"x": [None, torch.max(torch.ones(2, 2), 1)], "y": collections.OrderedDict(k=3)},
    )

    def walked() -> tuple:
        remade = walk.map_placed(tree, lambda leaf, place: place, "input_args")
        return walk.flatten(tree), walk.placed(tree, "input_args"), remade

    newer = walked() if walk._KEY_PATHS else None
    monkeypatch.setattr(walk, "_KEY_PATHS", False)
    leaves, places, remade = walked()
    assert [p for p, _ in places] == [
        "input_args[0].first", "input_args[0].second", "input_args[1].x[0]", "input_args[1].x[1][0]",
        "input_args[1].x[1][1]", "input_args[1].y.k",
    ]  # fmt: skip
    assert leaves[1] == torch.Size([2, 3]) and leaves[2] is None and len(leaves) == 6
    assert remade[0] == _Pair("input_args[0].first", "input_args[0].second") and remade[1]["y"]["k"] == places[-1][0]
    if newer is not None:
        assert repr(newer) == repr((leaves, places, remade))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_nextafter_of_a_16_bit_float_is_torchs_where_torch_has_none(dtype, monkeypatch):
    """torch 2.1's CPU has no nextafter for float16 or bfloat16, which generating inputs from statistics uses: the
    one on the bits gives torch's own neighbour for every value of the dtype, towards each kind of target."""
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    towards = [torch.full_like(x, t) for t in (math.inf, -math.inf, 0.0, -0.0, 1.0, -2.5, math.nan)]
    wanted = [torch.nextafter(x, t) for t in towards] if compat._has_nextafter(dtype) else None
    monkeypatch.setattr(compat, "_has_nextafter", lambda _: False)
    got = [compat.nextafter(x, t) for t in towards]
    assert got[0][x == 0].view(torch.int16).tolist() == [1, 1]  # +-0 up: the smallest subnormal
    assert bool((got[0] > x)[x.isfinite() & (x < torch.finfo(dtype).max)].all())
    assert bool((got[1] < x)[x.isfinite() & (x > torch.finfo(dtype).min)].all())
    if wanted is not None:
        for want, have in zip_strict(wanted, got):
            assert torch.equal(want.view(torch.int16), have.view(torch.int16)) or bool(
                ((want.view(torch.int16) == have.view(torch.int16)) | (want.isnan() & have.isnan())).all()
            )


def test_a_gqa_attention_recorded_under_a_newer_torch_replays_with_its_arithmetic():
    """enable_gqa came in torch 2.5 (transformers passes it): on a torch without it the call is replayed with each
    key and value head repeated for its group of query heads, its gradients summed back."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 3, 8, dtype=torch.float64, generator=gen)
    k, v = (torch.randn(1, 2, 3, 8, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(2))
    weights = torch.softmax((q @ k.repeat_interleave(2, -3).transpose(-2, -1) / math.sqrt(8)).tril().masked_fill(
        ~torch.ones(3, 3, dtype=torch.bool).tril(), -math.inf), -1)  # fmt: skip
    want = weights @ v.repeat_interleave(2, -3)
    by_keyword = compat._attention_with_gqa(q, k, v, is_causal=True, enable_gqa=True)
    assert torch.allclose(by_keyword, want)
    by_keyword.sum().backward()
    assert k.grad.shape == k.shape and v.grad.shape == v.shape
    if compat._takes_enable_gqa():
        assert torch.allclose(
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), want
        )


def test_a_dtype_only_a_newer_torch_has_is_named_as_one(monkeypatch):
    """A dump recorded under torch 2.13 may hold uint16-64 or float8 tensors, which torch 2.1 has not: the record's
    SKIP reason says so, not that the dtype is unknown."""
    from precheck.dump import decode

    monkeypatch.delitem(decode._TORCH_DTYPES, "torch.uint16", raising=False)
    with pytest.raises(decode.RecordError) as e:
        decode.parse_dtype("torch.uint16", "input_args[0].dtype")
    assert str(e.value) == (
        f"input_args[0].dtype: dtype torch.uint16 is not in torch {torch.__version__} (a newer torch recorded it)"
    )
    with pytest.raises(decode.RecordError, match=r"unknown dtype 'torch.float99'"):
        decode.parse_dtype("torch.float99", "input_args[0].dtype")


_COMPILE_IN_A_WORKER = """
import multiprocessing, sys
def work(queue):
    import torch
    from precheck.execution.sides import compiled
    compiled(torch.nn.functional.relu, ("relu",))  # its compile is a minute of C++: made, it is not run
    queue.put(True)
if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    worker = context.Process(target=work, args=(queue,), daemon=True)
    worker.start()
    print(queue.get(timeout=120))
    worker.join()
"""


def test_target_compile_can_compile_in_a_daemonic_pool_worker(tmp_path):
    """torch 2.1's inductor starts its compile workers as multiprocessing children when it is first imported, which
    precheck's pool workers (daemonic) may not have: run_ut --target compile was a SKIP row for every API there
    ("daemonic processes are not allowed to have children")."""
    script = tmp_path / "compile_in_a_worker.py"
    script.write_text(_COMPILE_IN_A_WORKER)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr[-2000:]
