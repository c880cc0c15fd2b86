"""``precheck apis --check`` names exactly the SKIP rows a run of the same dump makes, on every bundled dump.

The check reads the dump and runs nothing; each SKIP it misses is a call a user learns is unchecked only after
the run, and each it invents is a call they needlessly distrust.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from helpers import DATA, one_api_dump

from precheck.execution.mindspore_target import ENV
from precheck.run_ut import run_ut
from precheck.support import would_skip

DUMPS = sorted(DATA.glob("**/dump.json"))
OPINFO_BF16 = DATA / "opinfo_bf16_all_stats/step0/proc6907/dump.json"
OPINFO_FP32 = DATA / "opinfo_fp32_all/step0/proc5223/dump.json"


def _predicted_and_run(dump: Path, out: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Each call the check would SKIP with its reason, and each call the run made a SKIP row with its message."""
    _, reasons = would_skip(dump)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a dump's own oddities, said in its rows
        summary = run_ut(dump, out, device="cpu", workers=1, backend="inprocess")
    predicted = {name: reason for reason, names in reasons.items() for name in names}
    return predicted, {r.name: r.message for r in summary.results if r.forward == "SKIP"}


@pytest.mark.parametrize("dump", DUMPS, ids=[str(d.parent.relative_to(DATA)) for d in DUMPS])
def test_check_predicts_the_runs_skip_rows(dump: Path, tmp_path: Path, monkeypatch) -> None:
    """MindSpore statistics dumps, whose calls MindSpore re-runs, are run with no MindSpore to find: every call a
    SKIP the check predicts (test_mindspore runs them with it)."""
    monkeypatch.setenv(ENV, str(tmp_path / "no-python"))
    predicted, ran = _predicted_and_run(dump, tmp_path / "out")
    assert set(predicted) == set(ran), {
        "predicted only": set(predicted) - set(ran),
        "run only": set(ran) - set(predicted),
    }


def test_attention_whose_mask_cannot_be_recovered_is_predicted(tmp_path: Path) -> None:
    """Multi-head attention with dropout over 3 keys and bias_k (4 rows) but 1 value column per head: no mask can
    be solved from its output, which the shapes alone say; the check and the run give the same reason."""
    dump = one_api_dump(OPINFO_FP32, "Functional.multi_head_attention_forward.0", tmp_path / "dump")
    predicted, ran = _predicted_and_run(dump, tmp_path / "out")
    reason = "random op: dropout inside attention: the mask cannot be recovered when L_k > E_v (4 > 1)"
    assert predicted == {"Functional.multi_head_attention_forward.0": reason}
    assert ran["Functional.multi_head_attention_forward.0"] == reason


def test_mha_returning_per_head_weights_is_graded(tmp_path: Path) -> None:
    """The same call returning each head's weights (average_attn_weights=False) shows its mask in them: the check
    predicts no SKIP and the run grades it by its law."""
    dump = one_api_dump(OPINFO_FP32, "Functional.multi_head_attention_forward.0", tmp_path / "dump")
    doc = json.loads(dump.read_text())
    doc["data"]["Functional.multi_head_attention_forward.0.forward"]["input_kwargs"]["average_attn_weights"] = {
        "type": "bool",
        "value": False,
    }
    dump.write_text(json.dumps(doc))
    predicted, ran = _predicted_and_run(dump, tmp_path / "out")
    assert predicted == {} and ran == {}


def test_tensor_split_by_a_tensor_of_indices_is_graded_in_statistics_mode(tmp_path: Path) -> None:
    """A statistics dump records only Max 3 / Min 1 of tensor_split's indices [1, 2, 3]: drawn from those they
    split elsewhere (it was a SKIP, 'recorded gradient 0 has shape (1, 5, 5), the output (3, 5, 5)'). The recorded
    outputs' lengths along dim are the split points, and the call grades."""
    doc = json.loads(OPINFO_BF16.read_text())
    doc["data"] = {k: v for k, v in doc["data"].items() if k.startswith("Torch.tensor_split.0.")}
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(doc))
    summary = run_ut(dump, tmp_path / "out", device="cpu", workers=1)
    (row,) = summary.results
    assert (row.forward, row.backward) == ("pass", "pass"), row.message
    assert "input_args[1]: read from the recorded outputs' shapes" in row.message
    assert summary.details_path.read_text(encoding="utf-8-sig").count("Torch.tensor_split.0.forward.output.") == 4


def test_missing_mindspore_is_predicted_for_a_statistics_dump(tmp_path: Path, monkeypatch, capsys) -> None:
    from precheck.commands.cli import main

    monkeypatch.setenv(ENV, str(tmp_path / "no-python"))
    dump = DATA / "mindspore/fp32_statistics/step0/proc4751/dump.json"
    assert main(["apis", "--check", str(dump)]) == 0
    out = capsys.readouterr().out
    assert "48 forward records, 48 would be SKIP rows, 0 checked" in out
    assert f"{ENV}={tmp_path / 'no-python'}: no such interpreter" in out
    assert main(["apis", "--check", str(DATA / "mindspore/fp32_tensor/step0/proc4737/dump.json")]) == 0
    assert "0 would be SKIP rows" in capsys.readouterr().out  # graded against its recorded outputs, no MindSpore


def _ms_inplace_dump(task: str, root: Path) -> Path:
    """The bundled MindSpore dump's ``x + y`` recorded as ``x += y`` (Tensor.__iadd__, MindSpore's in-place
    add): the bundled MindSpore dumps hold no in-place call, whose values and gradients are the same."""
    src = DATA / f"mindspore/fp32_{task}/step0" / ("proc4751" if task == "statistics" else "proc4737") / "dump.json"
    doc = json.loads(src.read_text())
    doc["data"] = {
        k.replace("__add__", "__iadd__"): v for k, v in doc["data"].items() if k.startswith("Tensor.__add__.0.")
    }
    root.mkdir()
    if task == "tensor":
        (root / "dump_tensor_data").mkdir()
        for name in json.dumps(doc["data"]).split('"data_name": "')[1:]:
            name = name.split('"')[0]
            (root / "dump_tensor_data" / name).write_bytes((src.parent / "dump_tensor_data" / name).read_bytes())
    (root / "dump.json").write_text(json.dumps(doc))
    return root / "dump.json"


@pytest.mark.parametrize("target", ["recorded", "mindspore"])
def test_mindspore_inplace_call_is_graded_forward_and_backward(target: str, tmp_path: Path, monkeypatch) -> None:
    from precheck.execution.mindspore_target import MindSporeUnavailable, mindspore_python
    from precheck.execution.options import CheckOptions

    if target == "mindspore":
        try:
            monkeypatch.setenv(ENV, mindspore_python())
        except MindSporeUnavailable:
            pytest.skip("no MindSpore interpreter (bash .ci/setup --test makes .venv-mindspore)")
    for task in ("statistics", "tensor") if target == "mindspore" else ("tensor",):
        dump = _ms_inplace_dump(task, tmp_path / task)
        summary = run_ut(dump, tmp_path / f"out-{task}", device="cpu", workers=1, options=CheckOptions(target=target))
        (row,) = summary.results
        assert (row.name, row.forward, row.backward) == ("Tensor.__iadd__.0", "pass", "pass"), row.message
        assert would_skip(dump)[1] == {}
