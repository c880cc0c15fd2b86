"""A Dask worker's result crosses to the run as JSON text, and is rebuilt only as the result of the call asked."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from precheck.core.comparison import Comparison, Metrics
from precheck.core.reasons import Reason
from precheck.results import ApiResult, DetailRow, Direction, Status, failed
from precheck.scheduling.plain import Refused, from_plain, to_plain

CASE = SimpleNamespace(name="Torch.matmul.3", order=7, has_backward=True)


def _result() -> ApiResult:
    metrics = Metrics(cosine=math.nan, max_abs_err=math.inf, worst_index=5, nonfinite_mismatches=2, count=12)
    comparison = Comparison(
        Status.ERROR, "cosine nan", metrics, "torch.float64", "torch.bfloat16", (3, 4), "default",
        Reason.NONFINITE_MISMATCH, 2.5, "inf where the golden is finite", " (worst at index (1, 1))",
    )  # fmt: skip
    rows = [
        DetailRow(CASE.name, Direction.FORWARD, 0, comparison, target="a tensor", golden="kept on the worker"),
        DetailRow(CASE.name, Direction.BACKWARD, 1, Comparison(Status.PASS, "", None, "", "", None)),
    ]
    return ApiResult(CASE.name, CASE.order, Status.ERROR, Status.PASS, "bad", rows, inputs={"0": "kept"})


def test_a_result_crosses_as_json_with_every_value_but_its_tensors():
    back = from_plain(to_plain(_result()), CASE)
    expected = _result()
    kept_away = [DetailRow(d.api, d.direction, d.index, d.comparison) for d in expected.details]
    assert repr(back) == repr(ApiResult(**{**vars(expected), "details": kept_away, "inputs": None}))
    assert type(back.forward) is Status and type(back.details[0].comparison.reason) is Reason
    assert back.details[0].comparison.shape == (3, 4)
    assert from_plain(to_plain(failed(CASE, "crashed")), CASE) == failed(CASE, "crashed")


def _edited(path: list, value) -> str:
    data = json.loads(to_plain(_result()))
    place = data
    for key in path[:-1]:
        place = place[key]
    place[path[-1]] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"{}", "not JSON text but a bytes"),
        ("{", "not JSON: Expecting property name"),
        ("[1]", "result: not the fields of a ApiResult (list)"),
        (_edited(["name"], "Torch.exp.0"), "the result of 'Torch.exp.0' (order 7), not of this call"),
        (_edited(["order"], True), "result.order: bool 'True' is not a int"),
        (_edited(["forward"], "fine"), "result.forward: str 'fine' is not a Status"),
        (_edited(["details", 0, "comparison", "shape"], [3, "4"]), "result.details[0].comparison.shape[1]: str"),
        (
            _edited(["details", 0, "comparison", "metrics", "cosine"], "1"),
            "result.details[0].comparison.metrics.cosine: str '1' is not a float",
        ),
        (_edited(["details", 1, "target"], "x"), "result.details[1]: not the fields of a DetailRow"),
        (
            _edited(["details", 0, "comparison", "reason"], "pwned"),
            "result.details[0].comparison.reason: str 'pwned' is not a Reason",
        ),
    ],
)
def test_anything_but_the_result_of_the_call_asked_is_refused_in_one_line(text, why):
    with pytest.raises(Refused) as refused:
        from_plain(text, CASE)
    assert str(refused.value).startswith(why) and "\n" not in str(refused.value)
