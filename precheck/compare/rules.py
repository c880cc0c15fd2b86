"""The Result and Err_message of compare rows, by msprobe compare's rules (core/compare/indicator_analysis/ in
mindstudio-probe 26.2), applied to the rows of one record at a time.

Tensor mode: inf/nan on the target only, the one-thousandth ratio falling from above 0.9 at the inputs to below
0.1 at an output, requires_grad, scalar arguments, dtype and shape differing (error); the cosine falling by more
than 0.1 from inputs above 0.9 (warning). Statistics mode: the same with the L2norm's relative error (an output
above 50% while every input is below 10%: error; ten times the inputs': warning). md5 mode: CRC-32s differ
(error), an argument without a counterpart (warning).

One departure, on purpose: msprobe calls every row whose dtypes differ an error, so a bf16 run against an fp32
one is all errors. Here floating dtypes of the two sides may differ (that is what such a compare is for); only a
change of kind (a float against an integer) is the dtype error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from precheck.core.status import ERROR, PASS, WARNING
from precheck.schema import SEVERITY
from precheck.schema import CompareConst as C

_ALL_IGNORED = {"empty", "empty_like", "numpy", "to", "__setitem__", "empty_with_format", "new_empty_strided",
                "new_empty", "empty_strided"}  # fmt: skip
_INPUTS_IGNORED = {"_reduce_scatter_base", "_all_gather_base", "all_to_all_single", "batch_isend_irecv"}
_FLOATS = ("float", "half", "bfloat16", "double")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str) and value.endswith("%"):
        try:
            return float(value[:-1]) / 100
        except ValueError:
            return None
    return float(value) if isinstance(value, (int, float)) else None


def _extreme(rows: list[dict], column: str, lowest: bool) -> float:
    """msprobe's get_min_or_max_value: words and blanks are passed over, 1.0 / 0.0 when nothing is left."""
    value = 1.0 if lowest else 0.0
    for row in rows:
        x = _number(row.get(column))
        if x is not None:
            value = min(value, x) if lowest else max(value, x)
    return value


def _set(row: dict, level: str, message: str) -> None:
    if SEVERITY[level] > SEVERITY[row[C.RESULT]]:
        row[C.RESULT] = level
    row["_messages"].append(f"{level}: {message}")


def _matched(row: dict) -> bool:
    return row.get(C.BENCH_NAME) not in (None, C.N_A) and row.get(C.NPU_NAME) not in (None, C.N_A)


def _is_bad(value: Any) -> bool:
    return str(value).strip().lower() in ("inf", "-inf", "nan")


def _kind(dtype: Any) -> str:
    text = str(dtype).lower()
    return "float" if any(f in text for f in _FLOATS) else text.rsplit(".", 1)[-1]


def _common(rows: list[dict]) -> None:
    """The checks every non-md5 mode makes on each matched row."""
    for row in rows:
        if not _matched(row):
            continue
        if (_is_bad(row[C.NPU_MAX]) or _is_bad(row[C.NPU_MIN])) and not (
            _is_bad(row[C.BENCH_MAX]) or _is_bad(row[C.BENCH_MIN])
        ):
            _set(row, ERROR, "There is nan/inf/-inf in the maximum or minimum value of NPU.")
        npu_grad, bench_grad = row[C.NPU_REQ_GRAD], row[C.BENCH_REQ_GRAD]
        if npu_grad not in (C.N_A, None) and bench_grad not in (C.N_A, None) and npu_grad != bench_grad:
            _set(row, ERROR, "The Required_Grad of NPU and Bench are inconsistent")
        npu_dtype, bench_dtype = row[C.NPU_DTYPE], row[C.BENCH_DTYPE]
        if (
            npu_dtype not in (C.N_A, None)
            and bench_dtype not in (C.N_A, None)
            and _kind(npu_dtype) != _kind(bench_dtype)
        ):
            _set(row, ERROR, "The dtype of NPU and Bench are inconsistent.")
        if row[C.NPU_SHAPE] != row[C.BENCH_SHAPE]:
            _set(row, ERROR, "The shape of NPU and Bench are inconsistent.")


def _scalars(inputs: list[dict]) -> None:
    for row in inputs:
        if not _matched(row) or "class" not in str(row[C.NPU_DTYPE]) or "class" not in str(row[C.BENCH_DTYPE]):
            continue
        if str(row[C.NPU_SHAPE]) == "[]" and row[C.NPU_MAX] != row[C.BENCH_MAX]:
            _set(row, ERROR, "The scalar parameters of NPU and Bench are inconsistent.")


def _tensor_rules(inputs: list[dict], outputs: list[dict]) -> None:
    if not outputs:
        return
    if (
        _extreme(inputs, C.ONE_THOUSANDTH_ERR_RATIO, True) > 0.9
        and _extreme(outputs, C.ONE_THOUSANDTH_ERR_RATIO, True) < 0.1
    ):
        _set(outputs[0], ERROR, "The input/parameters of One Thousandth Err Ratio > 0.9 while the output < 0.1.")
    cos_in, cos_out = _extreme(inputs, C.COSINE, True), _extreme(outputs, C.COSINE, True)
    if cos_in > 0.9 and cos_in - cos_out > 0.1:
        _set(outputs[0], WARNING, "The input/parameters of Cosine > 0.9, and input/parameters - output > 0.1")


def _statistics_rules(inputs: list[dict], outputs: list[dict]) -> None:
    rel_in = abs(_extreme(inputs, C.NORM_RELATIVE_ERR, False))
    if rel_in < 0.1:
        for row in outputs:
            x = _number(row.get(C.NORM_RELATIVE_ERR))
            if x is not None and abs(x) > 0.5:
                _set(row, ERROR, "The NormRelativeErr of output is greater than 0.5.")
    if outputs:
        rel_out = abs(_extreme(outputs, C.NORM_RELATIVE_ERR, False))
        if (rel_in == 0 and rel_out > 0.1) or (rel_in and rel_out / rel_in > 10):
            _set(outputs[0], WARNING, "The norm relative error of output is 10 times that of input.")


def judge_tensors(inputs: list[dict], outputs: list[dict]) -> None:
    """The tensor mode's rules: what every mode but md5 checks, then the one-thousandth ratio's fall."""
    _common(inputs + outputs)
    _scalars(inputs)
    _tensor_rules(inputs, outputs)


def judge_statistics(inputs: list[dict], outputs: list[dict]) -> None:
    """The statistics mode's rules: what every mode but md5 checks, then the L2norm's relative error's growth."""
    _common(inputs + outputs)
    _scalars(inputs)
    _statistics_rules(inputs, outputs)


def judge_md5(inputs: list[dict], outputs: list[dict]) -> None:
    """The md5 mode's rule: two CRC-32s differ (error), or one side has none (warning)."""
    empty = (C.N_A, C.NAN, "", None)
    for row in inputs + outputs:
        if row[C.NPU_MD5] != row[C.BENCH_MD5]:
            if row[C.NPU_MD5] in empty or row[C.BENCH_MD5] in empty:
                _set(row, WARNING, "The parameter of NPU does not match the bench.")
            else:
                _set(row, ERROR, "The CRC-32 value of NPU differs from that of the bench.")


def judge(rows: list[dict], api: str, rules: Callable[[list[dict], list[dict]], None]) -> None:
    """Set ``Result`` and ``Err_message`` on the rows of one record (rows of an unmatched record say so);
    ``rules``: its compare mode's (precheck.compare.modes), on the input and output rows msprobe checks."""
    for row in rows:
        row[C.RESULT], row["_messages"] = PASS, row.pop("_notes", [])
    bare = api.split(".")[1] if "." in api else api
    inputs = [r for r in rows if ".output." not in str(r[C.NPU_NAME])]
    outputs = [r for r in rows if ".output." in str(r[C.NPU_NAME])]
    if bare in _ALL_IGNORED:
        inputs, outputs = [], []
    elif bare in _INPUTS_IGNORED:
        inputs = []
    rules(inputs, outputs)
    for row in rows:
        if not _matched(row):
            row[C.RESULT] = C.UNMATCHED
            row["_messages"] = ["No bench data matched."]
        row[C.ERROR_MESSAGE] = json.dumps(row.pop("_messages"))
