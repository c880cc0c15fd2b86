"""Which record and item of the bench precheck compare pairs with each of the target's, against msprobe's own
MindSpore-vs-PyTorch layer-mapping fixture (tests/data/compare/msprobe_layer_mapping, from msprobe's unit tests)
and small made-up dumps: exact names pair wherever they stand, same names pair only where the tensors can,
API names a layer mapping gives are applied."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from precheck.commands.cli import main
from tests.helpers import DATA

FIXTURE = DATA / "compare" / "msprobe_layer_mapping"


def _compare(capsys, out: Path, target: Path, bench: Path, *extra: str) -> tuple[list[dict], dict, str]:
    code = main(["compare", "-target", str(target), "-bench", str(bench), "-o", str(out), *extra])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    rows = list(csv.DictReader(open(next(out.glob("compare_result_*.csv")), encoding="utf-8")))
    return rows, json.loads(next(out.glob("compare_summary_*.json")).read_text()), stdout


def test_pairs_equal_msprobes_expected_data_mapping_on_its_own_fixture(capsys, tmp_path):
    rows, summary, _ = _compare(capsys, tmp_path, FIXTURE / "mindspore_data", FIXTURE / "pytorch_data",
                                "-lm", str(FIXTURE / "layer_mapping.yaml"))  # fmt: skip
    paired = {r["NPU Name"]: r["Bench Name"] for r in rows if r["NPU Name"] != "N/A"}
    expected = json.loads((FIXTURE / "expected_data_mapping.json").read_text())
    assert len(expected) == 44
    assert {k: paired.get(k) for k in expected} == expected
    assert set(paired) == set(expected)
    # the [5, 2] int32 add has no counterpart: it is no longer paired with the bench's scalar add and blamed
    assert summary["first_divergent"]["name"] != "Tensor.__add__.0.forward"
    assert {"side": "target", "first": "Tensor.__add__.0.forward", "last": "Tensor.__bool__.1.forward",
            "count": 2} in summary["unmatched"]  # fmt: skip


def test_a_step_folder_of_one_rank_or_proc_folder_is_compared_as_msprobe_takes_it(capsys, tmp_path):
    for side, variant, folder in (("t", "fp32_tensor_gelu_bug", "rank0"), ("b", "fp32_tensor", "proc0")):
        shutil.copytree(DATA / "compare" / variant / "step0" / "rank0", tmp_path / side / "step1" / folder)
    _, summary, out = _compare(capsys, tmp_path / "out", tmp_path / "t" / "step1", tmp_path / "b" / "step1")
    assert "first divergent: Functional.gelu.0.forward" in out
    assert summary["first_divergent"]["name"] == "Functional.gelu.0.forward"
    assert [p.name.rsplit("_", 1)[0] for p in (tmp_path / "out").glob("compare_result_*.csv")] == [
        "compare_result_rank0"
    ]
    shutil.copytree(tmp_path / "t" / "step1" / "rank0", tmp_path / "t" / "step1" / "rank1")
    code = main(["compare", "-target", str(tmp_path / "t" / "step1"), "-bench", str(tmp_path / "b" / "step1")])
    _, err = capsys.readouterr()
    assert code == 2 and "holds 1 rank or proc folders with a dump.json, the target 2" in err


def test_an_amplified_record_reads_amplified_in_the_console_and_the_reports_suspects(capsys, tmp_path):
    cmp = DATA / "compare"
    _, summary, out = _compare(capsys, tmp_path, cmp / "fp32_tensor_gelu_bug" / "step0" / "rank0",
                               cmp / "fp32_tensor" / "step0" / "rank0", "--report")  # fmt: skip
    assert {s["name"]: s["verdict"] for s in summary["suspects"]}["Functional.gelu.0.backward"] == "amplified"
    assert "  amplified: Functional.gelu.0.backward (output deviation" in out
    assert "suspect: Functional.gelu.0.backward" not in out
    page = next(tmp_path.glob("compare_report_*.html")).read_text(encoding="utf-8")
    suspects = page[page.index('<section id="suspects">') :]
    item = next(li for li in suspects.split("<li>")[1:] if li.startswith("Functional.gelu.0.backward"))
    assert "times more: amplified" in item and "suspect" not in item.split("</li>")[0]


class _CountedRenames(dict):
    """A class's renames that count how many of them any walk over them visits."""

    visited = 0

    def items(self):
        for item in super().items():
            _CountedRenames.visited += 1
            yield item

    def __iter__(self):
        return (origin for origin, _ in self.items())

    def keys(self):
        return list(iter(self))

    def values(self):
        return [bench for _, bench in self.items()]


def test_a_layer_mapping_renames_paths_with_work_linear_in_its_renames(monkeypatch):
    from precheck.compare.mapping import NameMap

    # the first matching name in the mapping wins, whatever its span; a child is renamed under its own class
    names = NameMap(layers={"TopLayer": {"enc.blk": "encoder", "enc": "trunk", "head": "lm"}, "Block": {"fc": "up"}})
    names.learn(["Module.enc.blk.Block.forward.0", "Module.enc.Enc.forward.0"])
    assert names.api("Module.enc.blk.fc.Linear") == "Module.encoder.up.Linear"
    assert names.api("Module.enc.other.Linear") == "Module.trunk.other.Linear"
    assert names.api("Module.head.Linear") == "Module.lm.Linear"
    names = NameMap(layers={"TopLayer": {"enc": "trunk", "enc.blk": "encoder"}})
    assert names.api("Module.enc.blk.Linear") == "Module.trunk.blk.Linear"
    # thousands of renames under one class, as many module records: each rename is looked at a bounded number
    # of times (the walk over every rename for every step made a compare quadratic: 16 million visits here)
    n = 4000
    monkeypatch.setattr(_CountedRenames, "visited", 0)
    names = NameMap(layers={"TopLayer": _CountedRenames({f"m{i}": f"n{i}" for i in range(n)})})
    assert [names.api(f"Module.m{i}.Linear") for i in range(n)] == [f"Module.n{i}.Linear" for i in range(n)]
    assert names.api("Module.other.Linear") == "Module.other.Linear"
    assert _CountedRenames.visited <= 2 * n
