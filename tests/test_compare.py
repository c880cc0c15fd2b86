"""precheck compare on real msprobe dumps (tests/data/compare, recorded by benchmarks/compare_record.py): the
compare CSV cell for cell against msprobe's own on the same pair, the first divergent record, the records CSV,
--precheck, alignment of different call sequences, L0 with a layer mapping, ranks, md5, statistics, overflow."""

from __future__ import annotations

import ast
import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from precheck.commands.cli import main
from precheck.compare.modes import MODES
from precheck.core.older_python import zip_strict
from tests.helpers import DATA

CMP = DATA / "compare"
MSPROBE = CMP / "msprobe"


def dump(variant: str) -> Path:
    return CMP / variant / "step0" / "rank0" / "dump.json"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def outputs(folder: Path) -> tuple[list[dict], list[dict], dict]:
    """(compare rows, record rows, summary) of the one compare in ``folder``."""
    rows = list(csv.DictReader(open(next(folder.glob("compare_result_*.csv")), encoding="utf-8")))
    records = list(csv.DictReader(open(next(folder.glob("compare_records_*.csv")), encoding="utf-8")))
    summary = json.loads(next(folder.glob("compare_summary_*.json")).read_text())
    return rows, records, summary


def compare(capsys, tmp_path, target: str, bench: str, *extra: str):
    code, out, err = run(capsys, "compare", "-target", str(dump(target)), "-bench", str(dump(bench)),
                         "-o", str(tmp_path), *extra)  # fmt: skip
    assert code == 0, err
    return (*outputs(tmp_path), out)


def _msprobe_headers() -> dict[str, list[str]]:
    """The compare headers as msprobe 26.2 builds them, read from its CompareConst source (vendored)."""
    source = (MSPROBE / "compare_const_26_2.py.txt").read_text()
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef))
    values: dict[str, object] = {}
    for node in cls.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                if isinstance(node.value, ast.List):
                    values[node.targets[0].id] = [values[e.id] for e in node.value.elts]
    v = values
    extract = v["EXTRACT_INDEX"]
    tensor = v["BASIC_INFO"] + v["BUILTIN_COMPARE_COLUMNS"] + v["SUMMARY_INFO"] + extract
    summary = v["BASIC_INFO"] + v["SUMMARY_COMPARE_INDEX"] + v["SUMMARY_INFO"] + extract
    md5 = v["BASIC_INFO"] + [v["NPU_MD5"], v["BENCH_MD5"]] + extract
    stack, data_name = v["STACK"], v["DATA_NAME"]
    # merge_result's get_dump_mode: the tensor header ends with Data_name, after the stack when there is one
    return {
        "tensor": tensor + [data_name],
        "tensor+stack": tensor + [stack, data_name],
        "statistics": summary,
        "statistics+stack": summary + [stack],
        "md5": md5,
        "md5+stack": md5 + [stack],
    }


@pytest.mark.parametrize("mode", ["tensor", "statistics", "md5"])
@pytest.mark.parametrize("stack", [False, True])
def test_headers_are_msprobes(mode, stack):
    assert MODES[mode].header(stack) == _msprobe_headers()[mode + ("+stack" if stack else "")]


@pytest.mark.parametrize(
    ("target", "bench", "reference", "departures"),
    [
        # msprobe's text says "< 0.6" for a rule that tests < 0.1; an argument only the target has is "unmatched"
        ("fp32_tensor_gelu_bug", "fp32_tensor", "tensor_fp32_gelu_bug.csv", {"Err_message": 2, "Result": 1}),
        # msprobe calls every bf16-vs-fp32 row an error for its dtype alone (45 rows); here only a change of kind
        ("bf16_statistics_gelu_bug", "fp32_statistics", "statistics_bf16_gelu_bug.csv", {"Result": 45,
                                                                                          "Err_message": 45}),
        ("fp32_md5_gelu_bug", "fp32_md5", "md5_fp32_gelu_bug.csv", {"Result": 1, "Err_message": 1}),
        # a mix dump: module records among the API records, a module's parameters before its outputs
        ("fp32_mix_gelu_bug", "fp32_mix", "tensor_fp32_mix_gelu_bug.csv", {"Err_message": 3, "Result": 1}),
    ],
)  # fmt: skip
def test_cells_match_msprobes_compare(capsys, tmp_path, target, bench, reference, departures):
    rows, _, _, _ = compare(capsys, tmp_path, target, bench)
    theirs = list(csv.DictReader(open(MSPROBE / reference, encoding="utf-8")))
    assert [r["NPU Name"] for r in rows] == [r["NPU Name"] for r in theirs]
    differing: dict[str, int] = {}
    for ours, ref in zip_strict(rows, theirs):
        for column, value in ref.items():
            if column == "NPU_Stack_Info":
                continue  # the recording machine's paths
            if column == "MaxRelativeErr" and value != ours[column]:
                assert float(value) == pytest.approx(float(ours[column]), rel=1e-6)
            elif ours[column] != value:
                differing[column] = differing.get(column, 0) + 1
    assert differing == departures


def test_patched_kernel_is_the_first_divergence_and_prechecked_error(capsys, tmp_path):
    rows, records, summary, out = compare(capsys, tmp_path, "fp32_tensor_gelu_bug", "fp32_tensor", "--precheck")
    first = summary["first_divergent"]
    assert first["name"] == "Functional.gelu.0.forward" and first["verdict"] == "suspect"
    assert first["inputs_agree"] is True and first["input_deviation"] == 0.0
    assert first["precheck"]["forward"] == "error"
    assert "first divergent: Functional.gelu.0.forward: its inputs agree" in out
    assert "the API is suspect; precheck: forward error" in out
    by_name = {r["Record"]: r for r in records}
    assert [r["Verdict"] for r in records[:2]] == ["agree", "agree"]
    assert by_name["Functional.gelu.0.forward"]["Precheck"].startswith("forward error")
    # what follows only inherits, and each names the record its differing input came from
    assert by_name["Functional.linear.1.forward"]["Verdict"] == "inherited"
    assert by_name["Functional.linear.1.forward"]["Produced by"] == "Functional.gelu.0.forward"
    assert by_name["Torch.softmax.0.forward"]["Produced by"] == "Tensor.__add__.0.forward"
    assert summary["precheck_csv"] and Path(summary["precheck_csv"]).is_file()
    results = list(csv.DictReader(open(summary["precheck_csv"], encoding="utf-8-sig")))
    assert {r["API name"]: r["Forward Test Success"] for r in results}["Functional.gelu.0"] == "error"


def test_bf16_against_fp32_finds_the_patched_kernel_not_rounding(capsys, tmp_path):
    _, records, summary, _ = compare(capsys, tmp_path, "bf16_tensor_gelu_bug", "fp32_tensor")
    assert summary["first_divergent"]["name"] == "Functional.gelu.0.forward"
    assert summary["first_divergent"]["verdict"] == "suspect"
    verdicts = {r["Record"]: r["Verdict"] for r in records}
    assert verdicts["Functional.linear.0.forward"] == verdicts["Functional.layer_norm.0.forward"] == "agree"


def test_clean_bf16_forward_agrees_with_fp32(capsys, tmp_path):
    _, records, _, _ = compare(capsys, tmp_path, "bf16_tensor", "fp32_tensor")
    assert {r["Verdict"] for r in records if r["Direction"] == "forward"} == {"agree"}


def test_statistics_and_md5_dumps_find_it_too(capsys, tmp_path):
    _, _, summary, _ = compare(capsys, tmp_path / "s", "bf16_statistics_gelu_bug", "fp32_statistics")
    assert summary["mode"] == "statistics" and summary["first_divergent"]["name"] == "Functional.gelu.0.forward"
    rows, _, summary, _ = compare(capsys, tmp_path / "m", "fp32_md5_gelu_bug", "fp32_md5")
    assert summary["mode"] == "md5" and summary["first_divergent"]["name"] == "Functional.gelu.0.forward"
    result = {r["NPU Name"]: r["Result"] for r in rows}
    assert result["Functional.gelu.0.forward.input.0"] == "pass"
    assert result["Functional.gelu.0.forward.output.0"] == "error"


def test_a_tensor_dump_against_a_statistics_dump_compares_statistics(capsys, tmp_path):
    rows, _, summary, _ = compare(capsys, tmp_path, "fp32_tensor_gelu_bug", "fp32_statistics")
    assert summary["mode"] == "statistics" and "Max diff" in rows[0]


def test_different_call_sequences_are_aligned_not_shifted(capsys, tmp_path):
    rows, records, summary, out = compare(capsys, tmp_path, "fp32_tensor_unfused_ln", "fp32_tensor")
    runs = [(r["side"], r["first"], r["last"], r["count"]) for r in summary["unmatched"]]
    assert runs[:2] == [
        ("bench", "Functional.layer_norm.0.forward", "Functional.layer_norm.0.forward", 1),
        ("target", "Tensor.mean.0.forward", "Tensor.__add__.1.forward", 10),
    ]
    assert "only in the target: Tensor.mean.0.forward .. Tensor.__add__.1.forward (10 records)" in out
    bench_of = {r["NPU Name"]: r["Bench Name"] for r in rows}
    # the residual add is the target's third __add__ and the bench's first: paired by the alignment
    assert bench_of["Tensor.__add__.2.forward.output.0"] == "Tensor.__add__.0.forward.output.0"
    assert bench_of["Functional.gelu.0.forward.input.0"] == "Functional.gelu.0.forward.input.0"
    assert {r["Verdict"] for r in records if r["Record"].startswith(("Functional.linear", "Functional.gelu"))} == {
        "agree"
    }
    assert {r["Result"] for r in rows if r["NPU Name"] == "N/A"} == {"unmatched"}


def test_module_dumps_with_a_layer_mapping(capsys, tmp_path):
    _, _, unmapped, _ = compare(capsys, tmp_path / "a", "fp32_l0_renamed_gelu_bug", "fp32_l0")
    assert unmapped["unmatched"], "renamed modules do not match by name"
    mapping = tmp_path / "layer_mapping.yaml"
    mapping.write_text("Block:\n  fc_in: up\n  norm: ln\n  fc_out: down\n")
    rows, records, summary, out = compare(
        capsys, tmp_path / "b", "fp32_l0_renamed_gelu_bug", "fp32_l0", "-lm", str(mapping)
    )
    assert summary["unmatched"] == []
    bench_of = {r["NPU Name"]: r["Bench Name"] for r in rows}
    assert bench_of["Module.block.fc_in.Linear.forward.0.input.0"] == "Module.block.up.Linear.forward.0.input.0"
    assert bench_of["Module.block.norm.LayerNorm.forward.0.parameters.weight"] == (
        "Module.block.ln.LayerNorm.forward.0.parameters.weight"
    )
    # the GELU lives inside Block, between two children: the first record that differs is fc_out, whose
    # input no recorded module produced; Block itself is the suspect
    assert summary["first_divergent"]["name"] == "Module.block.fc_out.Linear.forward.0"
    assert summary["first_divergent"]["verdict"] == "inherited"
    assert "which no earlier record of the dump produced" in out
    assert [s["name"] for s in summary["suspects"]] == ["Module.block.Block.forward.0"]


def test_ranks_are_compared_rank_by_rank(capsys, tmp_path):
    for side, variant in (("t", "fp32_tensor_gelu_bug"), ("b", "fp32_tensor")):
        for rank in ("rank0", "rank1"):
            shutil.copytree(CMP / variant / "step0" / "rank0", tmp_path / side / "step0" / rank)
    code, out, err = run(capsys, "compare", "-target", str(tmp_path / "t"), "-bench", str(tmp_path / "b"),
                         "-o", str(tmp_path / "out"))  # fmt: skip
    assert code == 0, err
    names = sorted(p.name.rsplit("_", 1)[0] for p in (tmp_path / "out").glob("compare_result_*.csv"))
    assert names == ["compare_result_rank0", "compare_result_rank1"]
    assert out.count("first divergent: Functional.gelu.0.forward") == 2
    shutil.rmtree(tmp_path / "b" / "step0" / "rank1")
    code, _, err = run(capsys, "compare", "-target", str(tmp_path / "t"), "-bench", str(tmp_path / "b"))
    assert code == 2 and "has no step0/rank1" in err and err.count("\n") == 1


def test_compare_json_as_msprobe_takes_it(capsys, tmp_path):
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(dump("fp32_md5_gelu_bug")), "bench_path": str(dump("fp32_md5"))}))
    code, out, err = run(capsys, "compare", "-i", str(spec), "-o", str(tmp_path / "o"))
    assert code == 0, err
    assert "first divergent: Functional.gelu.0.forward" in out


def test_overflow_names_where_inf_is_born(capsys, tmp_path):
    bugged = DATA / "detection" / "dev" / "cross_entropy_fp16_overflow_fp16" / "step0"
    code, out, _ = run(capsys, "overflow", str(next(bugged.iterdir())))
    assert code == 0
    assert out.splitlines()[1:] == [
        "  Functional.cross_entropy.0.forward: Functional.cross_entropy.0.forward.output.0 holds inf"
    ]
    clean = DATA / "detection" / "dev" / "clean_cnn_fp16" / "step0"
    code, out, _ = run(capsys, "compare", "-target", str(next(bugged.iterdir())), "-bench",
                       str(next(clean.iterdir())), "-o", str(tmp_path))  # fmt: skip
    assert "first overflow on the target only: Functional.cross_entropy.0.forward" in out
    # the dump's own folder, as the README names it, holds one step0/proc*/dump.json: it is that dump
    assert run(capsys, "overflow", str(bugged.parent))[1] == run(capsys, "overflow", str(next(bugged.iterdir())))[1]
    two = tmp_path / "two"
    for rank in ("rank0", "rank1"):
        shutil.copytree(next(bugged.iterdir()), two / "step0" / rank)
    code, _, err = run(capsys, "overflow", str(two))
    assert (code, err) == (2, f"precheck: error: {two}: holds 2 dumps (step0/rank0, step0/rank1); name one\n")
    # a causal mask filled with -inf is not an overflow: the -inf was an argument
    gpt = DATA / "detection" / "dev" / "clean_gpt_fp32" / "step0"
    assert "no record turns finite inputs into inf or nan" in run(capsys, "overflow", str(next(gpt.iterdir())))[1]


def test_a_broken_record_is_one_row_and_the_compare_goes_on(capsys, tmp_path):
    doc = json.loads(dump("fp32_tensor_gelu_bug").read_text())
    doc["data"]["Functional.gelu.0.forward"] = [1, 2]
    doc["data"]["Functional.linear.1.forward"]["output"][0]["data_name"] = "../../etc/passwd"
    shutil.copytree(dump("fp32_tensor_gelu_bug").parent, tmp_path / "t")
    (tmp_path / "t" / "dump.json").write_text(json.dumps(doc))
    code, _, err = run(capsys, "compare", "-target", str(tmp_path / "t"), "-bench", str(dump("fp32_tensor")),
                       "-o", str(tmp_path / "o"))  # fmt: skip
    assert code == 0, err
    rows, records, _ = outputs(tmp_path / "o")
    broken = [r for r in rows if r["NPU Name"] == "Functional.gelu.0.forward"]
    assert broken[0]["Result"] == "error" and "a record that is list, not an object" in broken[0]["Err_message"]
    assert {r["Record"]: r["Verdict"] for r in records}["Functional.gelu.0.forward"] == "unreadable"
    outside = next(r for r in rows if r["NPU Name"] == "Functional.linear.1.forward.output.0")
    assert outside["Cosine"] == "unsupported"
    assert "not compared: ../../etc/passwd: refused, the path leaves the dump directory" in outside["Err_message"]
    assert rows[-1]["NPU Name"].startswith("Functional.linear.0.backward.")  # the run went on to the end


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-target", "/nonexistent/dump.json", "-bench", "/tmp"], "/nonexistent/dump.json: no such file"),
        (["-target", str(CMP / "fp32_md5" / "msprobe_config.json"), "-bench", str(dump("fp32_md5"))], "not an msprobe"),
        (["-target", str(dump("fp32_md5"))], "give -target and -bench"),
        (["-target", str(dump("fp32_l0")), "-bench", str(dump("fp32_l0")), "-lm", "/nonexistent.yml"], "no such"),
    ],
)  # fmt: skip
def test_unusable_input_is_one_line(capsys, argv, message):
    code, out, err = run(capsys, "compare", *argv)
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_compare_loads_no_torch(tmp_path):
    code = (
        "import sys; from precheck.commands.cli import main; "
        f"main(['compare', '-target', {str(dump('fp32_tensor_gelu_bug'))!r}, '-bench', {str(dump('fp32_tensor'))!r}, "
        f"'-o', {str(tmp_path)!r}]); assert 'torch' not in sys.modules, 'torch was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_logits_first_failing_token(capsys, tmp_path):
    logits = CMP / "logits"
    code, out, err = run(capsys, "logits", "-target", str(logits / "bf16"), "-bench", str(logits / "fp32_logits.pt"),
                         "-o", str(tmp_path))  # fmt: skip
    assert code == 0, err
    assert "24 tokens; the first failing token is 2 (cosine 0.983324" in out
    assert "the generated text parts at token 10 (top-1 differs)" in out
    rows = list(csv.DictReader(open(next(tmp_path.glob("logits_compare_*.csv")), encoding="utf-8")))
    assert [r["Result"] for r in rows[:3]] == ["pass", "pass", "error"]
    assert rows[10]["Top-1 agrees"] == "False" and rows[9]["Top-1 agrees"] == "True"
    code, _, err = run(capsys, "logits", "-target", str(logits / "bf16"), "-bench", str(CMP))
    assert code == 2 and "no .npy or .pt files" in err


def test_mindspore_against_pytorch(capsys, tmp_path):
    rows, records, summary, _ = compare(capsys, tmp_path / "a", "ms_fp32_tensor", "pt_fp32_tensor_for_ms")
    assert summary["unmatched"] == [] and summary["first_divergent"] is None
    bench_of = {r["NPU Name"]: r for r in rows}
    row = bench_of["MintFunctional.linear.0.forward.input.0"]
    assert row["Bench Name"] == "Functional.linear.0.forward.input.0"
    assert row["NPU Dtype"] == row["Bench Dtype"] == "torch.float32"  # "Float32" spelled as PyTorch does
    assert bench_of["Mint.softmax.0.forward.output.0"]["Bench Name"] == "Torch.softmax.0.forward.output.0"
    # PyTorch records linear's bias gradient first and its weight gradient transposed: paired by shape
    grads = bench_of["MintFunctional.linear.0.backward.output.2"]
    assert grads["Bench Name"] == "Functional.linear.0.backward.output.0" and float(grads["Cosine"]) == 1.0
    assert float(bench_of["MintFunctional.linear.0.backward.output.1"]["Cosine"]) > 0.9999
    _, _, summary, _ = compare(capsys, tmp_path / "b", "ms_fp32_tensor_relu_bug", "pt_fp32_tensor_for_ms", "--precheck")
    assert summary["first_divergent"]["name"] == "MintFunctional.relu.0.forward"
    assert summary["first_divergent"]["inputs_agree"] is True
    # --precheck replays the MindSpore suspect against PyTorch's float64 relu: the leaky kernel is an error
    prechecked = summary["first_divergent"]["precheck"]
    assert (prechecked["forward"], prechecked["backward"]) == ("error", "error")


def test_mindspore_names_read_as_pytorchs_only_across_frameworks():
    from precheck.compare.mapping import NameMap

    across = NameMap(cross_framework=True)
    assert across.key("Mint.add.3.forward") == "Torch.add.3.forward"
    assert across.key("MintFunctional.gelu.0.backward") == "Functional.gelu.0.backward"
    assert across.key("Cell.net.fc.Dense.forward.0") == "Module.net.fc.Dense.forward.0"
    same = NameMap()  # MindSpore against MindSpore: names stay as recorded
    assert same.key("Cell.net.fc.Dense.forward.0") == "Cell.net.fc.Dense.forward.0"
    assert same.key("Mint.add.3.forward") == "Mint.add.3.forward"


def test_logits_of_different_lengths_say_what_was_compared(capsys, tmp_path):
    import numpy as np

    for side, count in (("t", 3), ("b", 5)):
        (tmp_path / side).mkdir()
        for k in range(count):
            np.save(tmp_path / side / f"logits_{k}.npy", np.arange(10, dtype=np.float32) * (k + 1))
    code, out, err = run(capsys, "logits", "-target", str(tmp_path / "t"), "-bench", str(tmp_path / "b"),
                         "-o", str(tmp_path))  # fmt: skip
    assert code == 0, err
    assert "the target has 3 tokens, the bench 5: the first 3 are compared" in out
    assert "3 tokens, all agree" in out


def _huge_npy(path: Path) -> None:
    """192 bytes whose header declares 10^12 float32 elements (numpy would allocate 3.6 TiB to read it)."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }".ljust(117) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + bytes(64))


def _structured_npy(path: Path) -> None:
    import numpy as np

    np.save(path, np.zeros((4, 16, 64), dtype=[("a", "<f4"), ("b", "<i4")]))


def _deflated(path: Path, damage: str) -> None:
    """``path`` (a torch.save archive) rewritten with deflated entries, then its storage's CRC or stream damaged."""
    with zipfile.ZipFile(path) as z:
        entries = [(i.filename, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            z.writestr(name, data)
        storage = next(i for i in z.infolist() if "/data/" in i.filename)
        if damage == "crc":
            storage.CRC ^= 1  # the central directory's, which zipfile checks the stream against
    if damage == "stream":  # 0xff starts a deflate block of the reserved type: an invalid stream
        raw = bytearray(path.read_bytes())
        start = storage.header_offset + 30 + len(storage.filename.encode())
        raw[start : start + storage.compress_size] = b"\xff" * storage.compress_size
        path.write_bytes(bytes(raw))


HOSTILE_FILES = {
    "npy of 10^12 elements": ("npy", _huge_npy, "header declares (1000000000000,) float32"),
    "structured npy": ("npy", _structured_npy, "an array of dtype [('a', '<f4'), ('b', '<i4')], not numbers"),
    "deflated pt, bad CRC": ("pt", lambda p: _deflated(p, "crc"), "zipfile.BadZipFile: Bad CRC-32"),
    "deflated pt, corrupt stream": ("pt", lambda p: _deflated(p, "stream"), "zlib.error: Error -3"),
}


@pytest.mark.parametrize("hostile", HOSTILE_FILES)
def test_a_hostile_tensor_file_is_its_rows_unreadable_and_the_compare_goes_on(capsys, tmp_path, hostile):
    """One file numpy, zipfile or zlib fail on is that row's "unreadable" with the file named; every other row is
    compared and the summary written (these ended the whole compare with a traceback)."""
    suffix, write, reason = HOSTILE_FILES[hostile]
    shutil.copytree(dump("fp32_tensor").parent, tmp_path / "t")
    name = f"Functional.gelu.0.forward.input.0.{suffix}"
    doc = json.loads((tmp_path / "t" / "dump.json").read_text())
    doc["data"]["Functional.gelu.0.forward"]["input_args"][0]["data_name"] = name
    (tmp_path / "t" / "dump.json").write_text(json.dumps(doc))
    write(tmp_path / "t" / "dump_tensor_data" / name)
    clean, _, _, _ = compare(capsys, tmp_path / "clean", "fp32_tensor", "fp32_tensor")
    code, _, err = run(capsys, "compare", "-target", str(tmp_path / "t"), "-bench", str(dump("fp32_tensor")),
                       "-o", str(tmp_path / "o"))  # fmt: skip
    assert code == 0 and "Traceback" not in err, err
    rows, _, summary = outputs(tmp_path / "o")
    assert [r["NPU Name"] for r in rows] == [r["NPU Name"] for r in clean]
    bad = next(r for r in rows if r["NPU Name"] == "Functional.gelu.0.forward.input.0")
    assert f"not compared: {name}: unreadable: " in bad["Err_message"] and reason in bad["Err_message"]
    assert bad["Cosine"] == "unsupported" and summary["rows"] == len(clean)


def test_a_hostile_logits_file_is_its_tokens_unreadable_row(capsys, tmp_path):
    """One per-token file that cannot be read is its token's row, "unreadable" with the file named; the other
    tokens are compared (it ended logits with a traceback)."""
    shutil.copytree(CMP / "logits" / "bf16", tmp_path / "t")
    (tmp_path / "t" / "logits_3.npy").unlink()
    _huge_npy(tmp_path / "t" / "logits_3.npy")
    code, out, err = run(capsys, "logits", "-target", str(tmp_path / "t"), "-bench",
                         str(CMP / "logits" / "fp32_logits.pt"), "-o", str(tmp_path / "o"))  # fmt: skip
    assert code == 0 and "Traceback" not in err, err
    rows = list(csv.DictReader(open(next((tmp_path / "o").glob("logits_compare_*.csv")), encoding="utf-8")))
    assert len(rows) == 24 and [r["Result"] for r in rows[:4]] == ["pass", "pass", "error", "unreadable"]
    assert rows[3]["Message"].startswith("logits_3.npy: unreadable: its header declares (1000000000000,)")
    assert "the first failing token is 2" in out and "1 tokens not compared, the first 3: logits_3.npy" in out


def _limited_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a regression reading /dev/zero stops at 4 GiB


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_stack_json_that_is_no_regular_file_is_one_line_and_the_compare_runs(tmp_path, kind):
    """A FIFO as stack.json hung the compare, a link to /dev/zero grew it past 2.6 GB in seconds: either is one
    line naming it, and the compare runs without the stacks. In a child with a timeout: a regression fails here,
    it does not hang the suite."""
    shutil.copytree(dump("fp32_tensor").parent, tmp_path / "t")
    stack = tmp_path / "t" / "stack.json"
    stack.unlink()
    if kind == "fifo":
        os.mkfifo(stack)
    else:
        stack.symlink_to("/dev/zero")
    argv = ["compare", "-target", str(tmp_path / "t"), "-bench", str(dump("fp32_tensor")), "-o", str(tmp_path / "o")]
    done = subprocess.run([sys.executable, "-m", "precheck", *argv], capture_output=True, text=True, timeout=60,
                          preexec_fn=_limited_memory, cwd=Path(__file__).parent.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"precheck: warning: {stack}: not a regular file; compared without the call stacks\n"
    rows, _, summary = outputs(tmp_path / "o")
    assert len(rows) == summary["rows"] > 0 and "NPU_Stack_Info" not in rows[0]


def test_a_stack_json_over_the_size_limit_is_one_line(capsys, tmp_path, monkeypatch):
    from precheck.compare import stacks

    monkeypatch.setattr(stacks, "MAX_STACKS", 1 << 20)
    shutil.copytree(dump("fp32_tensor").parent, tmp_path / "t")
    (tmp_path / "t" / "stack.json").write_bytes(b" " * (1 << 20) + b"{}")
    code, _, err = run(capsys, "compare", "-target", str(tmp_path / "t"), "-bench", str(dump("fp32_tensor")),
                       "-o", str(tmp_path / "o"))  # fmt: skip
    stack = tmp_path / "t" / "stack.json"
    assert code == 0, err
    assert err == f"precheck: warning: {stack}: over 1 MiB, larger than any stack.json; compared without the call " \
        "stacks\n"  # fmt: skip
