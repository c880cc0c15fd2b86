"""Why a row got its verdict, as a code: the report's advice, api_precision_compare's second stage and the console
read these, never the Message, whose prose is for people and may change with any release.

Torch-free: the commands that only read results (report, api_precision_compare) import it. A run keeps each
details row's code, the standard that judged it and the honest multiple in a file beside its CSVs
(precheck/frames/reasons.py); the msprobe CSVs themselves are unchanged.
"""

from __future__ import annotations

from precheck.core.older_python import StrEnum


class Reason(StrEnum):
    """What decided a row. A ``str`` so a code read back from a run's reasons file compares equal to this."""

    PASSED = "passed"  # the standard's rule held
    EMPTY = "empty"  # an output without elements
    # The default standard (grader/honest.py): the user's rule failed, the dtype's rounding explains it (warning) ...
    WITHIN_ROUNDING = "within_rounding"  # every element within one rounding
    HONEST_EXPLAINS = "honest_explains"  # no worse than an honest kernel of the dtype
    # ... or the target is materially worse than an honest kernel (error), by the first measure that says so.
    HONEST_NORMWISE = "honest_normwise"
    HONEST_WORST_ELEMENT = "honest_worst_element"
    HONEST_LEAN = "honest_lean"
    RULE_FAILED = "rule_failed"  # a metrics-only standard (Comparison.standard names it) failed
    NONFINITE_MISMATCH = "nonfinite_mismatch"  # inf/nan where the golden holds another value
    # The target's inf where the golden too is beyond the dtype's range (a warning, not an error): an fp16 step
    # whose scaled gradients overflow, which a GradScaler skips.
    OVERFLOW = "overflow"
    EXACT_MISMATCH = "exact_mismatch"  # integer or bool elements that differ
    VALUE_MISMATCH = "value_mismatch"  # a non-tensor output unequal to the golden's
    TYPE_MISMATCH = "type_mismatch"  # a tensor on one side only
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_KIND = "dtype_kind"  # floating point on one side only: msprobe's check_dtype_comparable
    STRUCTURE_MISMATCH = "structure_mismatch"  # output or gradient counts, keys, a gradient on one side only
    INDEX_OUT_OF_RANGE = "index_out_of_range"  # a selection's index output points outside its input (sort, argmax)
    # A recorded output a replay cannot grade beside its own: its file unreadable or of another dtype than its
    # record, or an output the call does not make. A bad record, never a pass (execution/training_outputs.py).
    BAD_RECORDED_OUTPUT = "bad_recorded_output"
    RANDOM_LAW = "random_law"  # a random op judged by the law of its outputs (grader/stochastic.py)
    STATISTICS = "statistics"  # graded on a dump's recorded statistics only (execution/statistics.py)
    TARGET_FAILED = "target_failed"  # the API crashed or its target run failed: one error row
    # The target's device failed in a way that leaves its process's device context untrusted (torch's
    # AcceleratorError or OutOfMemoryError, a device library's status): one error row, and a pool retires the
    # worker that ran it. Decided where the exception is caught (execution/sides.py), never from the Message.
    DEVICE_FAILED = "device_failed"
    # SKIP: not graded. The code says why, as the place that made the row knew it; the Message says it in words.
    SKIPPED = "skipped"  # a cause with no code of its own (a plugin target's skipped() without a code)
    TIMED_OUT = "timed_out"  # the check ran past its time limit
    SKIP_LISTED_OUT = "skip_listed_out"  # the white or black list leaves the API out
    SKIP_BAD_RECORD = "skip_bad_record"  # a dump record (or key) precheck cannot decode
    SKIP_UNSUPPORTED = "skip_unsupported"  # no entry for the API, or a MindSpore API without a PyTorch equivalent
    SKIP_OTHER_FRAMEWORK = "skip_other_framework"  # a MindSpore API in a dump read as PyTorch's
    SKIP_DEVICE_OP = "skip_device_op"  # another device's fused op
    SKIP_RANDOM = "skip_random"  # a random call no law of grader/stochastic.py can judge
    SKIP_MEMORY = "skip_memory"  # it would need more memory than --max-memory
    SKIP_MISSING_FILE = "skip_missing_file"  # a tensor file of its inputs is not in the dump's data folder
    SKIP_MISSING_RANK = "skip_missing_rank"  # a collective whose golden needs a rank's dump or record not given
    SKIP_INPUTS = "skip_inputs"  # its inputs cannot be rebuilt: a file refused or unreadable, odd statistics
    # a call on FakeTensors (DTensor's shape propagation: loss_parallel's): it computed no values, nothing to check
    SKIP_NO_DATA = "skip_no_data"
    SKIP_GOLDEN_FAILED = "skip_golden_failed"  # the golden (CPU float64) run failed: nothing to grade against
    SKIP_COMPILE_FAILED = "skip_compile_failed"  # torch.compile could not compile the call
    SKIP_NO_MINDSPORE = "skip_no_mindspore"  # no interpreter with MindSpore, or its worker cannot start
    SKIP_MINDSPORE_KERNEL = "skip_mindspore_kernel"  # MindSpore has no kernel for the call on this device
    SKIP_RECORDED_OUTPUT = "skip_recorded_output"  # target recorded: the recorded outputs cannot be graded
    SKIP_PRECHECK_FAULT = "skip_precheck_fault"  # precheck's own fault on this record (a bug to report)


HONEST = frozenset(
    {Reason.WITHIN_ROUNDING, Reason.HONEST_EXPLAINS, Reason.HONEST_NORMWISE, Reason.HONEST_WORST_ELEMENT,
     Reason.HONEST_LEAN}
)  # fmt: skip
"""The codes of the default standard's honest-kernel verdict (not a rule's)."""
BEYOND_ROUNDING = frozenset({Reason.HONEST_NORMWISE, Reason.HONEST_WORST_ELEMENT, Reason.HONEST_LEAN})
"""Errors: the target is materially worse than an honest kernel of its dtype."""
