"""msprobe's vocabulary, written once: the statuses (spelling, order, colours), the CSV headers and the 17 metric
columns with their Chinese names, a details row's name, and the file names of a run.

Torch-free and import-free on purpose: it sits at the bottom of the layers (docs/architecture.md), so the writer,
the readers, the report and api_precision_compare all spell a cell or a file as msprobe does from one place, and
a change of msprobe's format is one edit here.
"""

from __future__ import annotations

import re

from precheck.core.older_python import StrEnum, zip_strict


class Status(StrEnum):
    """A verdict on an output or an API. A ``str`` so that a status read back from a CSV (``"pass"``) and one
    computed here compare equal and are written as msprobe writes them."""

    PASS = "pass"
    WARNING = "warning"
    ERROR = "error"
    SKIP = "SKIP"


# msprobe's order of the statuses (its summaries count them so); SEVERITY ranks them for combining (SKIP lowest:
# it never hides a graded output); WORST_FIRST is the order a report lists APIs in.
STATUSES = (Status.PASS, Status.WARNING, Status.ERROR, Status.SKIP)
SEVERITY: dict[str, int] = {Status.SKIP: -1, Status.PASS: 0, Status.WARNING: 1, Status.ERROR: 2}
WORST_FIRST = (Status.ERROR, Status.WARNING, Status.SKIP, Status.PASS)
_SPELLED = {s.lower(): s for s in STATUSES}
COLOURS = {Status.PASS: "#2e7d32", Status.WARNING: "#ef6c00", Status.ERROR: "#c62828", Status.SKIP: "#757575"}


def read_status(text: str) -> Status | None:
    """A status cell as msprobe or precheck spells it, in any case, spaces around ("Pass", "skip"); None for any
    other text (a blank cell included: the caller says what a blank means)."""
    return _SPELLED.get(text.strip().lower())


class Direction(StrEnum):
    FORWARD = "forward"
    BACKWARD = "backward"


# A details row's name, ``<API>.forward.output.<i>`` (precheck.results.DetailRow.name), read back.
ROW_NAME = re.compile(r"^(?P<api>.+)\.(?P<direction>forward|backward)\.output\.(?P<index>\d+)$")


def split_row_name(name: str) -> tuple[str, Direction, int] | None:
    """A details row's name read back (API, direction, index): the inverse of ``DetailRow.name``; None for a
    name that is not one."""
    m = ROW_NAME.match(name)
    return (m["api"], Direction(m["direction"]), int(m["index"])) if m else None


# The columns of compare's records CSV (precheck.compare.record_log writes it, precheck.frames.compare reads it).
RECORDS_HEADER = ["Record", "Direction", "Verdict", "Inputs agree", "Input deviation", "Output deviation",
                  "Worst input", "Worst output", "Produced by", "Precheck"]  # fmt: skip
RESULT_HEADER = ["API name", "Forward Test Success", "Backward Test Success", "Message"]
# The 17 metric columns of the details CSV, in its order, and the Metrics field each holds
# (precheck.core.comparison.Metrics; tests/test_grader.py holds them to its first 17 fields).
METRIC_HEADERS = ("余弦相似度", "最大绝对误差", "双百指标", "双千指标", "双万指标", "二进制一致错误率", "误差均衡性",
                  "均方根误差", "小值域错误占比", "相对误差最大值", "相对误差平均值", "inf/nan错误率", "相对误差错误率",
                  "绝对误差错误率", "ULP误差最大值", "ULP误差平均值", "ULP误差大于阈值占比")  # fmt: skip
METRIC_FIELDS = ("cosine", "max_abs_err", "rel_within_1e2", "rel_within_1e3", "rel_within_1e4", "binary_mismatch",
                 "error_balance", "rmse", "small_value_err_ratio", "max_rel_err", "mean_rel_err", "inf_nan_err_ratio",
                 "rel_err_ratio", "abs_err_ratio", "ulp_max", "ulp_mean", "ulp_above_ratio")  # fmt: skip
ENGLISH = dict(zip_strict(METRIC_HEADERS, METRIC_FIELDS))  # Chinese column -> Metrics field
CHINESE = dict(zip_strict(METRIC_FIELDS, METRIC_HEADERS))  # Metrics field -> Chinese column
DETAILS_HEADER = ["API Name", "Bench Dtype", "DEVICE Dtype", "Shape", *METRIC_HEADERS, "Status", "Message"]

# api_precision_compare's CSVs (msprobe's second stage); its result CSV has "API Name" where stage 1's has "API name".
PRECISION_RESULT_HEADER = ["API Name", "Forward Test Success", "Backward Test Success", "Message"]
# The columns a second-stage standard fills, as msprobe fills them: the benchmark's (ratio, verdict) pairs in
# precheck.grader.standards.benchmark_ratios' order, and each single-side standard's (THRESHOLD: absolute and
# accumulative); then the row's verdict and the standard that gave it.
BENCHMARK_COLUMNS = (("小值域错误比值", "小值域判定结果"), ("均方根误差比值", "均方根误差判定结果"),
                     ("相对误差最大值比值", "相对误差最大值判定结果"), ("相对误差平均值比值", "相对误差平均值判定结果"),
                     ("误差均衡性比值", "误差均衡性判定结果"))  # fmt: skip
INF_NAN_COLUMNS = ("inf/nan错误率", "inf/nan判定结果")
THRESHOLD_COLUMNS = ("相对误差错误率", "相对误差判定结果", "绝对误差错误率", "绝对误差判定结果")
BINARY_COLUMNS = ("二进制一致错误率", "二进制一致错误率判定结果")
ULP_COLUMNS = ("ULP误差平均值", "ULP误差大于阈值占比", "ULP误差大于阈值占比比值", "ULP误差判定结果")
THOUSANDTH_COLUMNS = ("双千指标", "双千指标判定结果")
VERDICT_COLUMN, STANDARD_COLUMN = "比对结果", "比对算法"
PRECISION_DETAILS_HEADER = ["API Name", *(c for pair in BENCHMARK_COLUMNS for c in pair), *INF_NAN_COLUMNS,
                            *THRESHOLD_COLUMNS, *BINARY_COLUMNS, *ULP_COLUMNS, *THOUSANDTH_COLUMNS, VERDICT_COLUMN,
                            STANDARD_COLUMN, "Message"]  # fmt: skip
# Its 比对算法 cell: msprobe's name of the standard that judged a row (the last two are precheck's own standards).
STANDARD_NAMES = {"benchmark": "标杆比对法", "absolute": "绝对阈值法", "ulp": "ULP误差比对法", "binary": "二进制一致法",
                  "thousandth": "双千指标法", "accumulative": "累积误差比对法", "default": "precheck默认标准",
                  "msprobe": "msprobe单标杆标准"}  # fmt: skip


class CompareConst:
    """msprobe compare's CSV, as its CompareConst (mindstudio-probe 26.2's core/common/const.py) spells it: the
    columns of a row, the lists each mode's header is built of (precheck.compare.modes), and the words its cells
    hold where there is no number. The writer (precheck.compare), the reader (precheck.frames.compare) and the
    page read them here, so precheck's compare CSV and msprobe's stay one format."""

    NPU_NAME, BENCH_NAME = "NPU Name", "Bench Name"
    NPU_DTYPE, BENCH_DTYPE = "NPU Dtype", "Bench Dtype"
    NPU_SHAPE, BENCH_SHAPE = "NPU Tensor Shape", "Bench Tensor Shape"
    NPU_REQ_GRAD, BENCH_REQ_GRAD = "NPU Requires_grad", "Bench Requires_grad"
    NPU_MAX, NPU_MIN, NPU_MEAN, NPU_NORM = "NPU max", "NPU min", "NPU mean", "NPU l2norm"
    BENCH_MAX, BENCH_MIN, BENCH_MEAN, BENCH_NORM = "Bench max", "Bench min", "Bench mean", "Bench l2norm"
    MAX_DIFF, MIN_DIFF, MEAN_DIFF, NORM_DIFF = "Max diff", "Min diff", "Mean diff", "L2norm diff"
    COSINE, EUC_DIST, MAX_ABS_ERR = "Cosine", "EucDist", "MaxAbsErr"
    MAX_RELATIVE_ERR, MIN_RELATIVE_ERR = "MaxRelativeErr", "MinRelativeErr"
    MEAN_RELATIVE_ERR, NORM_RELATIVE_ERR = "MeanRelativeErr", "NormRelativeErr"
    ONE_THOUSANDTH_ERR_RATIO, FIVE_THOUSANDTHS_ERR_RATIO = "One Thousandth Err Ratio", "Five Thousandths Err Ratio"
    NPU_MD5, BENCH_MD5 = "NPU MD5", "BENCH MD5"
    REQ_GRAD_CONSIST, RESULT, ERROR_MESSAGE = "Requires_grad Consistent", "Result", "Err_message"
    STACK, DATA_NAME = "NPU_Stack_Info", "Data_name"

    # Each side's own columns (a row's cells are filled a side at a time), and msprobe's lists of columns.
    NPU_INFO = (NPU_NAME, NPU_DTYPE, NPU_SHAPE, NPU_REQ_GRAD)
    BENCH_INFO = (BENCH_NAME, BENCH_DTYPE, BENCH_SHAPE, BENCH_REQ_GRAD)
    BASIC_INFO = [c for pair in zip_strict(NPU_INFO, BENCH_INFO) for c in pair]
    NPU_STATS, BENCH_STATS = (NPU_MAX, NPU_MIN, NPU_MEAN, NPU_NORM), (BENCH_MAX, BENCH_MIN, BENCH_MEAN, BENCH_NORM)
    SUMMARY_INFO = [*NPU_STATS, *BENCH_STATS]
    SUMMARY_COMPARE_INDEX = [MAX_DIFF, MIN_DIFF, MEAN_DIFF, NORM_DIFF, MAX_RELATIVE_ERR, MIN_RELATIVE_ERR,
                             MEAN_RELATIVE_ERR, NORM_RELATIVE_ERR]  # fmt: skip
    BUILTIN_COMPARE_COLUMNS = (COSINE, EUC_DIST, MAX_ABS_ERR, MAX_RELATIVE_ERR, ONE_THOUSANDTH_ERR_RATIO,
                               FIVE_THOUSANDTHS_ERR_RATIO)  # fmt: skip
    MD5_COLUMNS = [NPU_MD5, BENCH_MD5]
    EXTRACT_INDEX = [REQ_GRAD_CONSIST, RESULT, ERROR_MESSAGE]

    # A cell with no number: no counterpart or no value, a metric msprobe does not compute for the tensor (0-d),
    # tensors of different shapes, inf/nan at different places.
    N_A, UNSUPPORTED, SHAPE_UNMATCH, NAN = "N/A", "unsupported", "shape unmatched", "Nan"
    # A Result cell: the statuses, and precheck's word for a row with no counterpart, in the order counts are told.
    UNMATCHED = "unmatched"
    RESULTS = (Status.PASS, Status.WARNING, Status.ERROR, UNMATCHED)


# precheck compare's modes (precheck.compare.modes.MODES), as its summary JSON's "mode" names them.
COMPARE_MODES = ("tensor", "statistics", "md5")

# A run's files in its output folder, by its stem (``<YYYYmmddHHMMSS>`` or ``<ts>_<n>``).
RESULT = "accuracy_checking_result_{}.csv"
DETAILS = "accuracy_checking_details_{}.csv"
JOURNAL = "accuracy_checking_result_{}.journal"
SIDECAR = "accuracy_checking_result_{}.run.json"
REASONS = "accuracy_checking_reasons_{}.jsonl"
PRECISION_RESULT = "api_precision_compare_result_{}.csv"
PRECISION_DETAILS = "api_precision_compare_details_{}.csv"
RESULT_NAME = re.compile(r"^accuracy_checking_result_(\d{14}(?:_\d+)?)\.csv$")  # a run's stem in group 1
RESULT_PREFIX, DETAILS_PREFIX = RESULT.split("{")[0], DETAILS.split("{")[0]
_RESULT_PART, _DETAILS_PART = "_result_", "_details_"  # what tells a run's two CSVs apart in a renamed pair too
REPORT = "report_{}.html"  # the run's page (precheck report)

# precheck compare's files, by the tail they share: ``_<ts>``, or ``<suffix>_<ts>`` (``_rank0_<ts>``) for a rank's.
COMPARE_RESULT = "compare_result{}.csv"
COMPARE_RECORDS = "compare_records{}.csv"
COMPARE_SUMMARY = "compare_summary{}.json"
COMPARE_REPORT = "compare_report{}.html"
COMPARE_STEP = "compare_step{}.json"  # a step of ranks' verdict, beside its ranks' compares (precheck.compare.steps)
COMPARE_KINDS = tuple(t.split("{")[0] for t in (COMPARE_RESULT, COMPARE_RECORDS, COMPARE_SUMMARY))


def run_stem(details: str) -> str:
    """The stem of the run whose details CSV is named ``details``; a details CSV renamed by hand keeps its name
    less ``.csv`` as its stem (its report is ``report_<stem>.html``)."""
    return details.removeprefix(DETAILS_PREFIX).removesuffix(".csv")


def details_of(result: str) -> str:
    """The name of the details CSV beside the result CSV ``result`` (``rank0_accuracy_checking_result_<ts>.csv``
    pairs with ``rank0_accuracy_checking_details_<ts>.csv``)."""
    return result.replace(_RESULT_PART, _DETAILS_PART, 1)


def result_of(details: str) -> str:
    """The name of the result CSV beside the details CSV ``details``; ``details`` itself when it names none."""
    return details.replace(_DETAILS_PART, _RESULT_PART, 1)


def compare_tail(name: str) -> str | None:
    """The tail a compare's files share, read from one's name (``compare_records_rank0_<ts>.csv`` ->
    ``_rank0_<ts>``), so that any of them finds the others; None for a name that is not a compare's."""
    kind = next((k for k in COMPARE_KINDS if name.startswith(k)), None)
    return None if kind is None else name.removeprefix(kind).rsplit(".", 1)[0]
