"""``precheck regress``: the regression gate between a run a team accepted (the baseline) and a new one.

Two result CSVs are judged API by API (precheck.regress.verdict, whose docstring has the rules); a step's run of
ranks is paired rank by rank first (precheck.regress.runs), so one command gates a whole step. The names a caller
needs are here: ``regress(baseline, current)`` gives a :class:`RegressReport`, ``write_report`` writes its files,
``report.exit_code()`` is the command's.
"""

from precheck.regress.files import REPORT_HTML, to_html, write_report
from precheck.regress.runs import regress
from precheck.regress.verdict import (
    FAIL,
    IMPROVED,
    MISSING,
    NEW,
    OUTCOMES,
    PASS_OUTCOME,
    REPORT_JSON,
    REPORT_MD,
    SETTINGS,
    STILL_FAILING,
    ApiOutcome,
    RankRuns,
    RegressError,
    RegressReport,
    ReportUnwritable,
    Statuses,
    api_outcome,
    direction_outcome,
    read_result_csv,
    settings_differ,
)

__all__ = [
    "FAIL",
    "IMPROVED",
    "MISSING",
    "NEW",
    "OUTCOMES",
    "PASS_OUTCOME",
    "REPORT_HTML",
    "REPORT_JSON",
    "REPORT_MD",
    "SETTINGS",
    "STILL_FAILING",
    "ApiOutcome",
    "RankRuns",
    "RegressError",
    "RegressReport",
    "ReportUnwritable",
    "Statuses",
    "api_outcome",
    "direction_outcome",
    "read_result_csv",
    "regress",
    "settings_differ",
    "to_html",
    "write_report",
]
