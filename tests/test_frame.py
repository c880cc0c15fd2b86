"""precheck.load: a run's CSVs, ours or msprobe's, as one typed pandas DataFrame."""

from __future__ import annotations

import csv
import math

import pytest
from helpers import DATA, real_dump_json

from precheck import load
from precheck.core.older_python import zip_strict
from precheck.frames.run import ENGLISH, LoadError
from precheck.run_ut import run_ut

MSPROBE_DETAILS = DATA / "msprobe" / "accuracy_checking_details_20261122032509.csv"


@pytest.fixture(scope="module")
def gpt2_run(tmp_path_factory):
    return run_ut(real_dump_json("gpt2_bf16_tensor"), tmp_path_factory.mktemp("gpt2"), device="cpu", workers=1)


def _rows(path):
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.DictReader(f))


def test_a_row_per_details_row_with_typed_metrics_and_both_column_names(gpt2_run):
    frame = load(gpt2_run.details_path)
    rows = _rows(gpt2_run.details_path)
    assert len(frame) == len(rows)
    assert list(frame["call"] + "." + frame["direction"] + ".output." + frame["output"].astype(str)) == [
        r["API Name"] for r in rows
    ]
    for chinese, english in ENGLISH.items():
        assert frame[english].dtype == "float64"
        assert frame[english].equals(frame[chinese])
        for value, cell in zip_strict(frame[english], (r[chinese] for r in rows)):
            assert math.isnan(value) if not cell.strip() else value == float(cell)
    assert set(frame["status"]) <= {"pass", "warning", "error", "SKIP"}
    addmm = frame[frame["call"] == "Torch.addmm.0"]
    assert set(addmm["api"]) == {"Torch.addmm"} and set(addmm["prefix"]) == {"Torch"}
    assert set(addmm["direction"]) == {"forward", "backward"} and set(addmm["dtype"]) == {"torch.bfloat16"}


def test_the_result_csv_is_joined_per_api(gpt2_run):
    frame = load(gpt2_run.details_path.parent)  # the output folder: its newest run
    results = {r["API name"]: r for r in _rows(gpt2_run.result_path)}
    for call, forward, backward in zip_strict(frame["call"], frame["forward_status"], frame["backward_status"]):
        assert forward == results[call]["Forward Test Success"].strip()
        assert backward == results[call]["Backward Test Success"].strip()
    assert len(load(gpt2_run.result_path)) == len(frame)  # the result CSV finds its details CSV


def test_msprobe_csvs_load_too():
    frame = load(MSPROBE_DETAILS)
    assert len(frame) == len(_rows(MSPROBE_DETAILS))
    embedding = frame[frame["call"] == "Functional.embedding.0"].set_index(["direction", "output"])
    assert embedding.loc[("forward", 0), "cosine"] == 1.0
    assert math.isnan(embedding.loc[("forward", 0), "rel_within_1e2"])  # msprobe's blank: not measured
    assert embedding.loc[("backward", 0), "status"] == "SKIP"
    assert "forward_status" not in frame  # msprobe's result CSV does not share the details' timestamp here


def test_bad_paths_are_one_line_naming_the_path(tmp_path):
    with pytest.raises(LoadError, match=f"{tmp_path}: no accuracy_checking_details"):
        load(tmp_path)
    bogus = tmp_path / "accuracy_checking_details_1.csv"
    bogus.write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(LoadError, match="not an accuracy_checking CSV, missing columns: API Name"):
        load(bogus)
    with pytest.raises(LoadError, match="no such file"):
        load(tmp_path / "missing.csv")
