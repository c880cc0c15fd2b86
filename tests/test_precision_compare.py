"""precheck api_precision_compare: msprobe's second stage on two details CSVs (ours, edited copies of ours, and
a real msprobe CSV)."""

from __future__ import annotations

import csv
import os
import re
import shutil
from pathlib import Path

import pytest
from helpers import DATA, real_dump_json

from precheck.commands.cli import main
from precheck.frames import reasons
from precheck.precision_compare import api_precision_compare
from precheck.run_ut import run_ut
from precheck.schema import PRECISION_DETAILS_HEADER

BOM = b"\xef\xbb\xbf"
RESULT_HEADER = ["API Name", "Forward Test Success", "Backward Test Success", "Message"]
# msprobe's details header of the second stage (STANDARDS.md §8), 28 columns
MSPROBE_DETAILS_HEADER = (
    "API Name,小值域错误比值,小值域判定结果,均方根误差比值,均方根误差判定结果,相对误差最大值比值,相对误差最大值判定结果,"  # noqa: E501
    "相对误差平均值比值,相对误差平均值判定结果,误差均衡性比值,误差均衡性判定结果,inf/nan错误率,inf/nan判定结果,"
    "相对误差错误率,相对误差判定结果,绝对误差错误率,绝对误差判定结果,二进制一致错误率,二进制一致错误率判定结果,ULP误差平均值,"
    "ULP误差大于阈值占比,ULP误差大于阈值占比比值,ULP误差判定结果,双千指标,双千指标判定结果,比对结果,比对算法,Message"
).split(",")
RMSE = "均方根误差"
MSPROBE_CSV = DATA / "msprobe" / "accuracy_checking_details_20261122032509.csv"


# ================================================================================================= helpers


def load(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:] if r]


def save(path: Path, header: list[str], rows: list[dict[str, str]]) -> Path:
    with open(path, "w", encoding="utf-8-sig", newline="") as f:  # keeps msprobe's BOM
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows([[r[h] for h in header] for r in rows])
    return path


def edited(src: Path, dst: Path, edit=None) -> Path:
    """A copy of a details CSV, its reasons file beside it (a random op's verdict stands by its code)."""
    header, rows = load(src)
    rows = edit(rows) or rows if edit else rows
    if reasons.path_for(src).is_file():
        shutil.copy(reasons.path_for(src), reasons.path_for(dst))
    return save(dst, header, rows)


def row(rows: list[dict[str, str]], name: str) -> dict[str, str]:
    found = [r for r in rows if r["API Name"] == name]
    assert len(found) == 1, name
    return found[0]


def api_of(name: str) -> str:
    return re.sub(r"\.(forward|backward)\.output\.\d+$", "", name)


class Outcome:
    def __init__(self, summary):
        self.summary = summary
        self.details_header, details = load(summary.details_path)
        self.result_header, results = load(summary.result_path)
        self.details = details
        self.results = results
        self.detail = {r["API Name"]: r for r in details}
        self.result = {r["API Name"]: r for r in results}


def run_compare(tmp_path: Path, base: Path, npu_edit=None, gpu_edit=None, **kw) -> Outcome:
    npu = edited(base, tmp_path / "npu.csv", npu_edit)
    gpu = edited(base, tmp_path / "gpu.csv", gpu_edit)
    return Outcome(api_precision_compare(npu, gpu, tmp_path / "out", **kw))


def set_cells(name: str, **cells):
    def edit(rows):
        for c, v in cells.items():
            row(rows, name)[c] = v

    return edit


# ================================================================================================ fixtures


@pytest.fixture(scope="module")
def mlp_csv(tmp_path_factory) -> Path:
    return run_ut(
        real_dump_json("mlp_fp32_tensor"), tmp_path_factory.mktemp("mlp"), device="cpu", workers=1
    ).details_path


@pytest.fixture(scope="module")
def gpt2_csv(tmp_path_factory) -> Path:
    return run_ut(
        real_dump_json("gpt2_bf16_tensor"), tmp_path_factory.mktemp("gpt2"), device="cpu", workers=1
    ).details_path


# ============================================================================================ output files


def test_output_names_headers_and_bom(mlp_csv, tmp_path):
    out = tmp_path / "new" / "nested"
    summary = api_precision_compare(mlp_csv, mlp_csv, out)
    assert re.fullmatch(r"api_precision_compare_result_\d{14}\.csv", summary.result_path.name)
    assert re.fullmatch(r"api_precision_compare_details_\d{14}\.csv", summary.details_path.name)
    assert summary.result_path.name[-18:] == summary.details_path.name[-18:]  # one timestamp
    assert summary.result_path.parent == out and summary.details_path.parent == out
    assert sorted(p.name for p in out.iterdir()) == sorted([summary.result_path.name, summary.details_path.name])
    for path in (summary.result_path, summary.details_path):
        assert path.read_bytes().startswith(BOM)
    o = Outcome(summary)
    assert o.result_header == RESULT_HEADER
    assert o.details_header == PRECISION_DETAILS_HEADER == MSPROBE_DETAILS_HEADER
    assert len(PRECISION_DETAILS_HEADER) == 28
    with open(summary.details_path, encoding="utf-8-sig", newline="") as f:
        assert all(len(r) == 28 for r in csv.reader(f))
    with open(summary.result_path, encoding="utf-8-sig", newline="") as f:
        assert all(len(r) == 4 for r in csv.reader(f))


def test_identical_csvs_pass_every_graded_api_in_npu_order(gpt2_csv, tmp_path):
    o = run_compare(tmp_path, gpt2_csv)
    _, npu = load(gpt2_csv)
    assert [r["API Name"] for r in o.details] == [r["API Name"] for r in npu]
    apis = list(dict.fromkeys(api_of(r["API Name"]) for r in npu))
    assert [r["API Name"] for r in o.results] == apis
    assert len(apis) == 47
    random = {api_of(r["API Name"]) for r in npu if r["Message"].startswith("random op")}
    assert random and all(a.startswith(("Functional.dropout", "Functional.scaled_dot")) for a in random)
    for api in apis:
        res = o.result[api]
        assert res["Forward Test Success"] == "pass", res
        assert res["Backward Test Success"] in ("pass", " "), res
        assert o.summary.apis[api] == (res["Forward Test Success"], res["Backward Test Success"])
    for r in npu:
        d = o.detail[r["API Name"]]
        if r["Status"] == "SKIP":
            assert d["比对结果"] == "SKIP"
            continue
        assert d["比对结果"] == "pass"
        if "checked statistically" in r["Message"]:
            assert d["比对算法"] == " " and d["Message"] == r["Message"]
        elif r["DEVICE Dtype"] == "torch.int64":
            assert d["比对算法"] == "二进制一致法" and d["二进制一致错误率判定结果"] == "pass"
        else:
            assert d["比对算法"] == "标杆比对法"
            assert [
                d[c]
                for c in (
                    "小值域判定结果",
                    "均方根误差判定结果",
                    "相对误差最大值判定结果",
                    "相对误差平均值判定结果",
                    "误差均衡性判定结果",
                )
            ] == ["pass"] * 5
            assert float(d["均方根误差比值"]) <= 1.0


# ============================================================================================ benchmark ratios


@pytest.mark.parametrize(
    "name, direction",
    [
        ("Functional.layer_norm.0.forward.output.0", "Forward"),
        ("Functional.gelu.0.backward.output.0", "Backward"),
        ("Functional.linear.0.forward.output.0", "Forward"),
    ],
)
def test_rmse_three_times_the_gpu_is_error(mlp_csv, tmp_path, name, direction):
    o = run_compare(
        tmp_path,
        mlp_csv,
        npu_edit=set_cells(name, **{RMSE: "0.03000000000000"}),
        gpu_edit=set_cells(name, **{RMSE: "0.01000000000000"}),
    )
    d = o.detail[name]
    assert float(d["均方根误差比值"]) == pytest.approx(3.0)
    assert d["均方根误差判定结果"] == "error" and d["比对结果"] == "error"
    assert d["比对算法"] == "标杆比对法"
    assert d["小值域判定结果"] == d["相对误差最大值判定结果"] == d["相对误差平均值判定结果"] == "pass"
    res = o.result[api_of(name)]
    other = "Backward" if direction == "Forward" else "Forward"
    assert res[f"{direction} Test Success"] == "error"
    assert res[f"{other} Test Success"] == "pass"
    assert "RMSE" in res["Message"]
    assert sum(r["比对结果"] == "error" for r in o.details) == 1


@pytest.mark.parametrize(
    "name, matmul",
    [
        ("Functional.linear.0.forward.output.0", True),
        ("Functional.linear.1.backward.output.0", True),
        ("Functional.layer_norm.0.forward.output.0", False),
        ("Functional.gelu.0.forward.output.0", False),
        ("Tensor.sum.0.forward.output.0", False),
    ],
)
def test_rmse_ratio_limit_is_strict_for_matmul_like_apis(mlp_csv, tmp_path, name, matmul):
    def outcome(npu: str, gpu: str) -> str:
        sub = tmp_path / f"{npu}-{gpu}"
        sub.mkdir()
        o = run_compare(sub, mlp_csv, npu_edit=set_cells(name, **{RMSE: npu}), gpu_edit=set_cells(name, **{RMSE: gpu}))
        return o.detail[name]["比对结果"]

    assert outcome("0.75", "0.5") == ("error" if matmul else "pass")  # 1.5x
    assert outcome("0.6", "0.5") == "pass"  # 1.2x: at the strict limit
    assert outcome("1.0", "0.5") == ("error" if matmul else "pass")  # 2x: at the default limit
    assert outcome("1.0000001", "0.5") == "error"


def test_gpu_error_below_the_floor_is_floored(mlp_csv, tmp_path):
    # fp32 floor 2^-14: a GPU RMSE of 1e-8 divides as 6.1e-5, so 3x of it is no error at all
    name = "Functional.layer_norm.0.forward.output.0"
    o = run_compare(
        tmp_path,
        mlp_csv,
        npu_edit=set_cells(name, **{RMSE: "0.00000003"}),
        gpu_edit=set_cells(name, **{RMSE: "0.00000001"}),
    )
    assert o.detail[name]["比对结果"] == "pass"
    assert float(o.detail[name]["均方根误差比值"]) == pytest.approx(3e-8 / 2**-14)
    sub = tmp_path / "above"
    sub.mkdir()
    o = run_compare(
        sub,
        mlp_csv,
        npu_edit=set_cells(name, **{RMSE: f"{2.5 * 2**-14:.14f}"}),
        gpu_edit=set_cells(name, **{RMSE: "0.00000001"}),
    )
    assert o.detail[name]["比对结果"] == "error"


@pytest.mark.parametrize("column", ["小值域错误占比", "相对误差最大值", "相对误差平均值"])
def test_other_benchmark_columns_are_judged(mlp_csv, tmp_path, column):
    name = "Functional.gelu.0.forward.output.0"
    limit = {"小值域错误占比": 2.0, "相对误差最大值": 10.0, "相对误差平均值": 2.0}[column]
    o = run_compare(
        tmp_path,
        mlp_csv,
        npu_edit=set_cells(name, **{column: f"{0.5 * limit * 1.01:.14f}"}),
        gpu_edit=set_cells(name, **{column: "0.5"}),
    )
    assert o.detail[name]["比对结果"] == "error"
    assert o.result["Functional.gelu.0"]["Forward Test Success"] == "error"


def test_error_balance_is_not_judged(mlp_csv, tmp_path):
    name = "Functional.gelu.0.forward.output.0"
    o = run_compare(
        tmp_path,
        mlp_csv,
        npu_edit=set_cells(name, **{"误差均衡性": "1.0"}),
        gpu_edit=set_cells(name, **{"误差均衡性": "0.0"}),
    )
    d = o.detail[name]
    assert float(d["误差均衡性比值"]) > 2
    assert d["比对结果"] == "pass"


# ======================================================================================== rows msprobe loses


def test_npu_row_without_gpu_row_is_skip_with_a_message(mlp_csv, tmp_path):
    gone = "Tensor.sum.0.forward.output.0"
    o = run_compare(tmp_path, mlp_csv, gpu_edit=lambda rows: [r for r in rows if r["API Name"] != gone])
    assert gone in o.detail  # not dropped
    assert o.detail[gone]["比对结果"] == "SKIP"
    assert "no row" in o.detail[gone]["Message"] and "GPU" in o.detail[gone]["Message"]
    res = o.result["Tensor.sum.0"]
    assert res["Forward Test Success"] == "SKIP" and res["Backward Test Success"] == "pass"
    assert "no row" in res["Message"]
    assert len(o.results) == 6


def test_api_missing_from_the_gpu_entirely_keeps_its_result_row(mlp_csv, tmp_path):
    o = run_compare(tmp_path, mlp_csv, gpu_edit=lambda rows: [r for r in rows if "Tensor.sum" not in r["API Name"]])
    res = o.result["Tensor.sum.0"]
    assert (res["Forward Test Success"], res["Backward Test Success"]) == ("SKIP", "SKIP")
    assert [r["API Name"] for r in o.results][-1] == "Tensor.sum.0"


def test_duplicate_gpu_rows_are_skip_with_a_message(mlp_csv, tmp_path):
    dup = "Functional.gelu.0.forward.output.0"
    o = run_compare(tmp_path, mlp_csv, gpu_edit=lambda rows: rows + [dict(row(rows, dup))])
    d = o.detail[dup]
    assert d["比对结果"] == "SKIP"
    assert "several rows" in d["Message"] or "multiple" in d["Message"]
    assert o.result["Functional.gelu.0"]["Backward Test Success"] == "pass"
    assert o.result["Functional.linear.0"]["Forward Test Success"] == "pass"  # the run goes on
    assert len(o.details) == 17


def _blank_metrics(name: str, message: str, blank_dtypes: bool = False):
    def edit(rows):
        r = row(rows, name)
        for c in list(r)[4:21]:
            r[c] = " "
        if blank_dtypes:
            r["Bench Dtype"] = r["DEVICE Dtype"] = r["Shape"] = " "
        r["Status"], r["Message"] = "error", message

    return edit


def test_stage1_error_with_blank_metrics_stays_error(mlp_csv, tmp_path):
    name = "Functional.linear.1.forward.output.0"
    edit = _blank_metrics(name, "shape mismatch: target (4, 8) vs golden (4, 9)")
    o = run_compare(tmp_path, mlp_csv, npu_edit=edit, gpu_edit=edit)
    assert o.detail[name]["比对结果"] == "error"
    assert "shape mismatch" in o.detail[name]["Message"]
    assert o.result["Functional.linear.1"]["Forward Test Success"] == "error"
    assert "shape mismatch" in o.result["Functional.linear.1"]["Message"]


def test_stage1_error_with_blank_metrics_stays_error_when_only_the_npu_has_it(mlp_csv, tmp_path):
    name = "Functional.linear.1.backward.output.1"
    o = run_compare(tmp_path, mlp_csv, npu_edit=_blank_metrics(name, "shape mismatch"))
    assert o.detail[name]["比对结果"] == "error"
    assert o.result["Functional.linear.1"]["Backward Test Success"] == "error"
    assert o.result["Functional.linear.1"]["Forward Test Success"] == "pass"


def test_stage1_error_with_blank_metrics_and_blank_dtypes_stays_error(mlp_csv, tmp_path):
    name = "Functional.linear.1.forward.output.0"
    edit = _blank_metrics(name, "target raised RuntimeError: device kernel failed", blank_dtypes=True)
    o = run_compare(tmp_path, mlp_csv, npu_edit=edit, gpu_edit=edit)
    assert o.detail[name]["比对结果"] == "error"
    assert o.result["Functional.linear.1"]["Forward Test Success"] == "error"


# ============================================================================================= int outputs


@pytest.mark.parametrize(
    "rate, expected", [("0.00000000000000", "pass"), ("0.25000000000000", "error"), ("0.0000001", "error")]
)
def test_int_output_judged_by_binary_mismatch(gpt2_csv, tmp_path, rate, expected):
    name = "Tensor.__add__.0.forward.output.0"
    o = run_compare(tmp_path, gpt2_csv, npu_edit=set_cells(name, 二进制一致错误率=rate))
    d = o.detail[name]
    assert d["比对算法"] == "二进制一致法"
    assert float(d["二进制一致错误率"]) == float(rate)
    assert d["二进制一致错误率判定结果"] == d["比对结果"] == expected
    assert o.result["Tensor.__add__.0"]["Forward Test Success"] == expected
    if expected == "error":
        assert "二进制一致错误率" in d["Message"]


# =============================================================================================== inf / nan


@pytest.mark.parametrize(
    "npu, gpu, expected",
    [
        ("inf", "inf", "pass"),
        ("nan", "nan", "pass"),
        ("-inf", "-inf", "pass"),
        ("inf", "0.01", "error"),
        ("0.01", "nan", "error"),
        ("nan", "0.01", "error"),
        ("inf", "-inf", "error"),
        ("inf", "nan", "error"),
    ],
)
def test_inf_nan_metrics(mlp_csv, tmp_path, npu, gpu, expected):
    name = "Functional.gelu.0.forward.output.0"
    o = run_compare(tmp_path, mlp_csv, npu_edit=set_cells(name, **{RMSE: npu}), gpu_edit=set_cells(name, **{RMSE: gpu}))
    d = o.detail[name]
    assert d["均方根误差判定结果"] == d["比对结果"] == expected
    assert "inf/nan" in d["Message"]
    assert o.result["Functional.gelu.0"]["Forward Test Success"] == expected


# ========================================================================================= malformed names


@pytest.mark.parametrize(
    "bad",
    [
        "garbage",
        "Functional.linear.0.sideways.output.0",
        "Functional.linear.0.forward.output.x",
        "Functional.linear.0.forward.input.0",
    ],
)
def test_malformed_api_name_is_skip(mlp_csv, tmp_path, bad):
    name = "Functional.linear.1.backward.output.2"
    o = run_compare(
        tmp_path, mlp_csv, npu_edit=set_cells(name, **{"API Name": bad}), gpu_edit=set_cells(name, **{"API Name": bad})
    )
    d = o.detail[bad]
    assert d["比对结果"] == "SKIP"
    assert d["Message"] == f"The API name {bad} is invalid."
    assert o.result[bad]["Forward Test Success"] == "SKIP"
    assert f"The API name {bad} is invalid." in o.result[bad]["Message"]
    assert o.result["Functional.linear.1"]["Backward Test Success"] == "pass"  # its other rows still count


# ================================================================================================ standard


def test_auto_standard_judges_by_api_class(mlp_csv, tmp_path):
    o = run_compare(tmp_path, mlp_csv, standard="auto")
    assert o.detail["Functional.linear.0.forward.output.0"]["比对算法"] == "ULP误差比对法"
    assert o.detail["Functional.layer_norm.0.forward.output.0"]["比对算法"] == "标杆比对法"
    assert o.detail["Tensor.sum.0.forward.output.0"]["比对算法"] == "累积误差比对法"
    assert o.detail["Functional.gelu.0.forward.output.0"]["比对算法"] == "绝对阈值法"


def test_auto_standard_writes_the_numbers_it_judged(mlp_csv, tmp_path):
    """As msprobe: each single-side standard fills its own metric and verdict columns, never all blank."""
    o = run_compare(tmp_path, mlp_csv, standard="auto")
    npu = {r["API Name"]: r for r in load(mlp_csv)[1]}
    judged = {
        "Functional.linear.0.forward.output.0": ("ULP误差平均值", "ULP误差大于阈值占比", "ULP误差大于阈值占比比值"),
        "Tensor.sum.0.forward.output.0": ("相对误差错误率", "绝对误差错误率"),
        "Functional.gelu.0.forward.output.0": ("相对误差错误率", "绝对误差错误率"),
    }
    for name, columns in judged.items():
        row = o.detail[name]
        for column in columns:
            assert row[column].strip(), f"{name}: {column} is blank"
        if "ULP误差平均值" in columns:
            assert float(row["ULP误差平均值"]) == pytest.approx(float(npu[name]["ULP误差平均值"]))
            assert row["ULP误差判定结果"] == row["比对结果"]
        else:
            assert float(row["相对误差错误率"]) == pytest.approx(float(npu[name]["相对误差错误率"]))
            verdicts = {row["相对误差判定结果"], row["绝对误差判定结果"]}
            assert verdicts <= {"pass", "error"} and ("error" in verdicts) == (row["比对结果"] == "error")


def test_a_share_rule_needs_more_than_one_element_of_the_rows_shape(gpt2_csv, tmp_path):
    """The default standard's 99%-within-1e-2 rule on a bf16 gradient of 64 elements: one element is no evidence
    of a rate (the row's Shape gives the count), two are; without a Shape the share alone decides."""
    name = "Functional.layer_norm.0.backward.output.1"
    assert next(r for r in load(gpt2_csv)[1] if r["API Name"] == name)["Shape"] == "(64,)"

    def npu(within: float, **cells: str):
        metrics = {"余弦相似度": "0.9999", "最大绝对误差": "0.01", "双百指标": repr(within), "双千指标": "1.0"}
        return set_cells(name, **metrics, **cells)

    for case in ("one", "two", "blank"):
        (tmp_path / case).mkdir()
    o = run_compare(tmp_path / "one", gpt2_csv, npu_edit=npu(63 / 64), standard="default")
    assert o.detail[name]["比对结果"] == "warning", o.detail[name]["Message"]
    o = run_compare(tmp_path / "two", gpt2_csv, npu_edit=npu(62 / 64), standard="default")
    assert o.detail[name]["比对结果"] == "error"
    assert "96.8750% of elements within 1e-2 relative error" in o.detail[name]["Message"]
    o = run_compare(tmp_path / "blank", gpt2_csv, npu_edit=npu(63 / 64, Shape=" "), standard="default")
    assert o.detail[name]["比对结果"] == "error"


# ===================================================================================================== CLI


def test_cli_writes_both_files_and_prints_their_paths(mlp_csv, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["api_precision_compare", "-npu", str(mlp_csv), "-gpu", str(mlp_csv), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    result = next(out.glob("api_precision_compare_result_*.csv"))
    details = next(out.glob("api_precision_compare_details_*.csv"))
    assert str(result) in printed and str(details) in printed
    assert "6 APIs" in printed


@pytest.mark.parametrize("which", ["npu", "gpu"])
def test_cli_missing_file_exits_2_with_one_line(mlp_csv, tmp_path, capsys, which):
    missing = str(tmp_path / "nope.csv")
    npu, gpu = (missing, str(mlp_csv)) if which == "npu" else (str(mlp_csv), missing)
    assert main(["api_precision_compare", "-npu", npu, "-gpu", gpu, "-o", str(tmp_path / "o")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "nope.csv" in lines[0] and lines[0].startswith("precheck: error:")
    assert "Traceback" not in captured.err


def test_cli_csv_that_is_not_a_details_csv_exits_2(mlp_csv, tmp_path, capsys):
    result_csv = next(mlp_csv.parent.glob("accuracy_checking_result_*.csv"))
    garbage = tmp_path / "garbage.csv"
    garbage.write_bytes(b"\xff\xfe\x00not,a,csv\n")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    for bad in (result_csv, garbage, empty, tmp_path):
        assert main(["api_precision_compare", "-npu", str(bad), "-gpu", str(mlp_csv), "-o", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and err.startswith("precheck: error:"), err
    assert (
        main(["api_precision_compare", "-npu", str(mlp_csv), "-gpu", str(result_csv), "-o", str(tmp_path / "o")]) == 2
    )
    assert "missing columns" in capsys.readouterr().err


@pytest.mark.parametrize("which", ["npu", "gpu"])
def test_cli_refuses_a_device_or_a_fifo_in_one_line_without_reading_it(mlp_csv, tmp_path, capsys, which):
    fifo = tmp_path / "details.csv"
    os.mkfifo(fifo)  # no writer: opening it to read would wait forever
    for bad in ("/dev/zero", str(fifo)):  # /dev/zero never ends: it was read until memory ran out (5.5 GB)
        npu, gpu = (bad, str(mlp_csv)) if which == "npu" else (str(mlp_csv), bad)
        assert main(["api_precision_compare", "-npu", npu, "-gpu", gpu, "-o", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert err == f"precheck: error: {bad}: not a regular file (-{which}): a details CSV is one\n"


# =================================================================================== a real msprobe CSV


def test_msprobe_details_csv_as_the_gpu_side(gpt2_csv, tmp_path):
    assert MSPROBE_CSV.exists()
    gpu = tmp_path / MSPROBE_CSV.name
    shutil.copy(MSPROBE_CSV, gpu)
    summary = api_precision_compare(gpt2_csv, gpu, tmp_path / "out")
    o = Outcome(summary)
    _, npu = load(gpt2_csv)
    apis = list(dict.fromkeys(api_of(r["API Name"]) for r in npu))
    assert [r["API Name"] for r in o.results] == apis
    assert [r["API Name"] for r in o.details] == [r["API Name"] for r in npu]
    _, msprobe = load(gpu)
    names = {r["API Name"] for r in msprobe}
    for r in npu:
        d = o.detail[r["API Name"]]
        if r["API Name"] not in names:
            assert d["比对结果"] == "SKIP" and "no row" in d["Message"]
    # msprobe ran no dropout: those rows have no GPU match; everything else is graded
    assert o.result["Functional.dropout.0"]["Forward Test Success"] == "SKIP"
    assert o.result["Torch.addmm.0"]["Forward Test Success"] in ("pass", "error")
    assert o.result["Functional.pad.0"]["Forward Test Success"] == "pass"
    graded = [d for d in o.details if d["比对结果"] in ("pass", "error")]
    assert len(graded) > 100


def test_msprobe_details_csv_as_the_npu_side(gpt2_csv, tmp_path):
    summary = api_precision_compare(MSPROBE_CSV, gpt2_csv, tmp_path / "out")
    o = Outcome(summary)
    _, npu = load(MSPROBE_CSV)
    assert [r["API Name"] for r in o.results] == list(dict.fromkeys(api_of(r["API Name"]) for r in npu))
    assert len(o.details) == len(npu)
