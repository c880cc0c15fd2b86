"""A program recorded by ``precheck record`` computes what it computes without it (issue 41).

The wrappers go on at ``import torch``; a library imported after that replaces torch's functions (``F.gelu``,
``F.scaled_dot_product_attention``), a program may keep a wrapper inside its own, and ``torch.compile`` traces
whatever torch's names hold. Taking the wrappers off must leave each of these as the program made it, and a
compiled step must be the graph it is without precheck, with the same numbers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F  # noqa: N812 - torch's own name for it
from torch._dynamo import trace_rules

import precheck


def _names(root: Path) -> list[str]:
    (dump,) = root.glob("step0/*/dump.json")
    return list(json.loads(dump.read_text())["data"])


@pytest.fixture
def restored() -> Iterator[None]:
    """torch's names the tests replace, as they were before the test, whatever the test left."""
    saved = F.gelu, F.silu, torch.mm, torch.Tensor.__dict__.get("add")
    yield
    F.gelu, F.silu, torch.mm = saved[:3]
    if saved[3] is None and "add" in vars(torch.Tensor):
        del torch.Tensor.add


def test_a_replacement_the_program_made_while_recording_stays(tmp_path, restored):
    """A library imported after torch replaces torch's functions: the recorder's end keeps its replacements
    (it put torch's originals back over them, and the program computed something else after the recording)."""
    gelu, add, mm = (lambda x, approximate="none": x), (lambda self, other: self), (lambda a, b: a)
    with precheck.record(tmp_path / "dump"):
        F.gelu, torch.mm = gelu, mm  # a module's function
        torch.Tensor.add = add  # a method torch.Tensor inherits from its C base
        assert F.gelu(torch.ones(2)).tolist() == [1.0, 1.0]
    assert F.gelu is gelu and torch.mm is mm and vars(torch.Tensor)["add"] is add
    assert torch.ones(2).add(torch.ones(2)).tolist() == [1.0, 1.0]


def test_a_wrapper_the_program_wraps_calls_only_what_it_wrapped_once_off(tmp_path, restored):
    """``old = F.silu; F.silu = lambda x: old(x) * 2``: old is the recorder's wrapper. The program's function
    stays, and once the recording is over the wrapper inside it records nothing (not even in a recording that
    comes after) and computes silu."""
    with precheck.record(tmp_path / "dump"):
        old = F.silu
        doubled: Callable = lambda x, inplace=False: old(x) * 2  # noqa: E731 - the program's patch, as written
        F.silu = doubled
        F.silu(torch.ones(2))
    written = _names(tmp_path / "dump")
    assert written == ["Functional.silu.0.forward", "Tensor.__mul__.0.forward"]  # the wrapper inside, recorded
    assert F.silu is doubled
    assert torch.equal(F.silu(torch.ones(3)), torch.ops.aten.silu(torch.ones(3)) * 2)
    with precheck.record(tmp_path / "again"):
        F.silu(torch.ones(2))
    # the program's F.silu is wrapped as F.silu, and the old wrapper inside it records no second call
    assert _names(tmp_path / "again") == ["Functional.silu.0.forward"]
    assert _names(tmp_path / "dump") == written


def _model() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 1))
    return model, torch.randn(4, 8), torch.randn(4, 1)


def test_a_compiled_step_is_one_graph_with_the_same_numbers_under_the_recorder(tmp_path):
    """dynamo traced into the wrappers and broke the graph at the recorder's own work (os.getpid, a file's
    encoding, Tensor.tolist): 20 graphs instead of 1, and inductor's numbers changed. Now it traces the originals:
    calls inside the compiled graph are not recorded, the eager ones around it are."""
    model, x, y = _model()

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(model(x), y)

    expected = step(x, y)
    torch._dynamo.reset()
    with precheck.record(tmp_path / "explained"):
        explained = torch._dynamo.explain(step)(x, y)
    with precheck.record(tmp_path / "dump"):
        loss = torch.compile(step, backend="aot_eager")(x, y)
        scaled = torch.mul(loss, 2)  # eager: recorded
    torch._dynamo.reset()
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    assert loss.view(1).view(torch.int32).item() == expected.view(1).view(torch.int32).item()
    assert torch.equal(scaled, expected * 2)
    assert _names(tmp_path / "dump") == ["Torch.mul.0.forward"]


def test_dynamo_knows_torchs_functions_after_a_recording_it_first_compiled_in(tmp_path):
    """dynamo reads its tables of torch's functions from their names at its first compile. Read while the
    wrappers were on, they held the wrappers: after the recording, torch.Tensor.add and torch.layer_norm were
    unknown to dynamo, and every graph compiled after it broke there."""
    model, x, y = _model()

    def after(x: torch.Tensor) -> torch.Tensor:
        return torch.Tensor.add(x, 1).sum() + super(torch.Tensor, x).mul(2).sum() + model(x).sum()

    torch._dynamo.reset()
    try:
        with precheck.record(tmp_path / "dump"):
            trace_rules.get_tensor_method.cache_clear()  # this process's first compile: in the recording
            trace_rules.get_torch_obj_rule_map.cache_clear()
            torch.compile(lambda x: F.layer_norm(x, (8,)).sum(), backend="eager")(x)
        explained = torch._dynamo.explain(after)(x)
    finally:
        torch._dynamo.reset()
        trace_rules.get_tensor_method.cache_clear()  # read again, as without precheck, for the tests after this
        trace_rules.get_torch_obj_rule_map.cache_clear()
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


TRAIN = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
F.gelu = lambda x, approximate="none": x * torch.sigmoid(1.702 * x)  # a library imported after torch patches gelu
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    loss = F.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(loss.item().hex())
"""


def test_a_recorded_training_run_has_the_losses_it_has_without_precheck(tmp_path):
    """The target: ``precheck record`` changes no result of the program, in the recorded steps or after them."""
    (tmp_path / "train.py").write_text(TRAIN)
    plain = subprocess.run([sys.executable, "train.py"], capture_output=True, text=True, cwd=tmp_path, check=True)
    cmd = [sys.executable, "-m", "precheck", "record", "-o", "dump", "--", sys.executable, "train.py"]
    recorded = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert recorded.returncode == 0, recorded.stderr
    losses = plain.stdout.split()
    assert len(losses) == 3 and recorded.stdout.split()[:3] == losses


def test_two_recorders_that_overlap_leave_torch_as_it_was(tmp_path):
    """The first of two overlapping recordings ends first: the second put back the first's wrapper, which stayed
    in torch for good (an inert function in vars(torch.Tensor) where torch's own method was inherited)."""
    add, mm = torch.Tensor.add, torch.mm
    first = precheck.record(tmp_path / "a")
    second = precheck.record(tmp_path / "b")
    first.close()
    second.close()
    assert torch.Tensor.add is add and "add" not in vars(torch.Tensor) and torch.mm is mm


def test_a_value_the_recorder_cannot_take_never_fails_the_users_call(tmp_path, monkeypatch):
    """The recorder's own work raised into the user's call (a quantized tensor's statistics, a dict with tuple
    keys): the call returns as without precheck, and the step's dump.json says which call was not recorded."""
    from precheck.recording import encode

    def broken(*args, **kwargs):
        raise RuntimeError("statistics of this tensor cannot be taken")

    monkeypatch.setattr(encode.Encoder, "values", broken)
    x = torch.ones(3)
    with precheck.record(tmp_path / "dump", task="statistics"):
        y = torch.exp(x)
    assert torch.equal(y, torch.ops.aten.exp(x))
    (dump,) = (tmp_path / "dump").glob("step0/*/dump.json")
    doc = json.loads(dump.read_text(encoding="utf-8"))
    assert "Torch.exp: RuntimeError: statistics of this tensor cannot be taken" in doc["partial"]


def test_the_first_forward_hook_leaves_a_compiled_model_one_graph(tmp_path):
    """record -- CMD waits for the model's first forward with a global pre-hook; dynamo traced it and broke the
    graph at its frame walk (3 graphs instead of 1, kept after the hook came off)."""
    from precheck.recording.first_forward import FirstForward
    from precheck.recording.session import Recorder

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    recorder = Recorder(tmp_path / "dump")
    waiting = FirstForward(recorder)
    try:
        explained = torch._dynamo.explain(lambda x: model(x).relu())(torch.ones(2, 4))  # the hook inside the trace
    finally:
        waiting.drop()
        recorder.close()
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def test_sigterm_is_the_programs_own_again_once_the_recorded_steps_are_behind(tmp_path):
    """record -- CMD handles SIGTERM while it records (to close the dump first); its handler stayed on after the
    last recorded step, so a rank stuck in a C call ignored its launcher's SIGTERM until it was SIGKILLed."""
    import sys

    from precheck.recording.launch import run_recorded

    said = tmp_path / "said.txt"
    program = (
        "import pathlib, signal, torch\n"
        "w = torch.nn.Parameter(torch.ones(2)); opt = torch.optim.SGD([w], lr=0.1)\n"
        "for _ in range(2):\n"
        "    (w * 2).sum().backward(); opt.step()\n"
        f"pathlib.Path({str(said)!r}).write_text(str(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL))\n"
    )
    done = run_recorded(tmp_path / "dump", [sys.executable, "-c", program])
    assert done.returncode == 0 and len(done.dumps) == 1
    assert said.read_text() == "True"
