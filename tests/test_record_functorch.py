"""torch.func under the recorder (issue 46): the program computes what it computes without precheck, and the dump
names only files that are on disk, each whole.

torch.func.grad's tensors are functorch wrappers torch.save cannot write: the writer stopped at the first, every
later file of the step was lost while dump.json named them. torch.func.jacrev runs the recorder's backward hook
under vmap, where a tensor has no value to take: the hook raised into autograd and ended the training.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import precheck
from precheck.core.older_python import zip_strict
from precheck.recording.encode import data_names
from precheck.recording.files import TensorFiles


def _dump(root: Path) -> tuple[dict, set[str], Path]:
    (path,) = root.glob("step0/*/dump.json")
    doc = json.loads(path.read_text(encoding="utf-8"))
    return doc, set(data_names(doc["data"])), path.parent / "dump_tensor_data"


def _loss(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x @ w).sum()


def _step(transform: str) -> list[torch.Tensor]:
    """One training step that calls ``transform`` on its way, and the values it computes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh())
    x, w = torch.randn(2, 4), torch.randn(4, 3, requires_grad=True)
    if transform == "grad":
        made = torch.func.grad(_loss)(w, x)
    elif transform == "jacrev":
        made = torch.func.jacrev(_loss)(w, x)
    elif transform == "vmap":
        made = torch.func.vmap(lambda r: model(r).exp())(x)
    elif transform == "functional_call":
        made = torch.func.functional_call(model, dict(model.named_parameters()), (x,))
    else:
        made = torch.func.functionalize(lambda t: torch.sin(t).add_(1))(x)
    loss = torch.cos(model(x)).sum() + made.sum()
    loss.backward()
    return [made.detach(), loss.detach(), w.grad if w.grad is not None else torch.zeros(()), model[0].weight.grad]


@pytest.mark.parametrize("level", ["L1", "mix"])
@pytest.mark.parametrize("transform", ["grad", "jacrev", "vmap", "functional_call", "functionalize"])
def test_a_step_through_torch_func_computes_what_it_does_without_precheck(tmp_path, transform, level):
    """jacrev raised from the recorder's backward hook into autograd (exit 1 without the test): every hook is
    guarded as the forward wrapper is, and what it could not record is said in dump.json's partial."""
    plain = _step(transform)
    with precheck.record(tmp_path / "dump", level=level):
        recorded = _step(transform)
    assert all(torch.equal(a, b) for a, b in zip_strict(plain, recorded))
    doc, named, data = _dump(tmp_path / "dump")
    assert "Functional.linear.0.forward" in doc["data"] and "Torch.cos.0.forward" in doc["data"]
    assert named <= {p.name for p in data.iterdir()}  # every file dump.json names is there


@pytest.mark.parametrize(("level", "failing", "named"), [("L1", ".backward", "Tensor.__add__.0.backward"),
    ("mix", "Module.", "Module.0.Linear."), ("mix", "parameters_grad", "Module.0.Linear.bias")])  # fmt: skip
def test_a_hook_the_recorder_fails_in_never_fails_the_users_backward(tmp_path, monkeypatch, level, failing, named):
    """The guard covered the forward wrapper only: an autograd or module hook whose recording raised ended the
    user's backward. Each hook's failure is the recording's loss, said in dump.json's partial."""
    from precheck.recording import encode

    values = encode.Encoder.values

    def broken(self: encode.Encoder, value: object, stem: str) -> object:
        if failing in stem:
            raise RuntimeError("this value cannot be recorded")
        return values(self, value, stem)

    plain = _step("functional_call")
    monkeypatch.setattr(encode.Encoder, "values", broken)
    with precheck.record(tmp_path / "dump", level=level):
        recorded = _step("functional_call")
    assert all(torch.equal(a, b) for a, b in zip_strict(plain, recorded))
    doc, _, _ = _dump(tmp_path / "dump")
    assert f"the recorder failed to record, the first {named}" in doc["partial"]
    assert "RuntimeError: this value cannot be recorded" in doc["partial"]


def test_torch_func_grad_keeps_every_file_of_the_step(tmp_path):
    """The writer stopped at grad's first wrapped tensor: 5 of 29 files were on disk, dump.json named the rest.
    Its tensors are saved unwrapped, as msprobe saves them, and each file holds the value the call saw."""
    with precheck.record(tmp_path / "dump"):
        w, x = torch.ones(4, 3), torch.full((2, 4), 0.5)
        torch.func.grad(_loss)(w, x)
        torch.exp(x)  # a call after grad's
    doc, named, data = _dump(tmp_path / "dump")
    assert "partial" not in doc
    assert {p.name for p in data.iterdir()} == named and "Torch.exp.0.forward.output.0.pt" in named
    assert torch.equal(torch.load(data / "Torch.sin.0.forward.input.0.pt"), x @ w)


def test_a_file_that_cannot_be_saved_is_that_calls_loss_alone(tmp_path):
    """A vmap's batched tensor has no value to save: its record names no file and has no statistics (as msprobe
    writes it), dump.json says partial naming it, and every file after it is saved."""
    with precheck.record(tmp_path / "dump"):
        x = torch.ones(2, 3)
        torch.func.vmap(torch.sin)(x)
        torch.exp(x)
    doc, named, data = _dump(tmp_path / "dump")
    sin = doc["data"]["Torch.sin.0.forward"]["input_args"][0]
    assert "data_name" not in sin and sin["Max"] is None
    assert "Torch.exp.0.forward.input.0.pt" in named and named == {p.name for p in data.iterdir()}
    assert "tensor file(s) not saved (their records name none), the first Torch.sin.0.forward." in doc["partial"]


def test_a_save_that_fails_halfway_leaves_no_torn_file_and_the_next_is_saved(tmp_path, monkeypatch):
    """A save that failed (a full disk) left its half-written file under the name dump.json reads, and the writer
    saved nothing after it."""
    real = torch.save

    def failing(obj: object, path: Path) -> None:
        if "first" in str(path):
            Path(path).write_bytes(b"PK\x03\x04 half a zip")
            raise OSError(28, "No space left on device")
        real(obj, path)

    monkeypatch.setattr(torch, "save", failing)
    files = TensorFiles()
    files.save(torch.ones(3), tmp_path / "first.pt")
    files.save(torch.ones(3), tmp_path / "second.pt")
    files.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["second.pt"]
    assert files.failed == {"first.pt": "OSError: [Errno 28] No space left on device"}
