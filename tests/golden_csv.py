"""The details and result CSVs of every bundled dump, as a pinned grader wrote them: the regression net of the
grader's numbers (tests/test_golden_csv.py compares today's CSVs with them, cell by cell).

    .venv/bin/python tests/golden_csv.py            # rewrite tests/data/golden_csv/csvs.json.xz

Only rewrite the file when a change of the CSVs is intended, and say so in the commit: the file is what a user's
CSVs looked like, to the 14 printed decimals.
"""

from __future__ import annotations

import json
import lzma
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden_csv" / "csvs.json.xz"
DUMPS = (
    "mlp_fp32_tensor",
    "gpt2_bf16_tensor",
    "gpt2_bf16_statistics",
    "bert_bf16_tensor",
    "cnn_bf16_tensor",
    "llama_fp32_statistics",
    "encoder_fp32_tensor",
    "composite_fp32_tensor",
    "opinfo_fp32_all",
    "opinfo_bf16_all_stats",
)
# Standards whose details columns or verdicts come from different metrics: default (cosine, max abs and the
# msprobe cascade's shares), accumulative (its own split of the threshold columns), benchmark (a reference run's
# metrics) and auto (every standard, routed by API class).
STANDARDS = ("default", "accumulative", "benchmark", "auto")
TARGETS = ("device", "recorded")
# Calls whose numbers move beyond 9 digits from CPU to CPU even with the kernels pinned to AVX2, by dump, then by
# call, with the targets where they move: the device kernel itself (fp32 matmuls, erf, linalg), or the float64
# golden of an ill-conditioned call (inv, solve, pinv, qr: LAPACK's float64 rounding times the condition number).
# Measured as every row that differed between the pinned file (written on an AVX2 machine) and an AMX machine.
KERNEL_DEPENDENT: dict[str, dict[str, list[str]]] = json.loads(
    (DATA / "golden_csv" / "kernel_dependent.json").read_text()
)


def runs() -> list[tuple[str, str, str]]:
    """Every (dump, target, standard) the golden file holds."""
    return [(d, t, s) for d in DUMPS for t in TARGETS for s in STANDARDS]


def key(dump: str, target: str, standard: str) -> str:
    return f"{dump}/{target}/{standard}"


def csv_texts(dump: str, target: str, standard: str) -> dict[str, str]:
    """The result and details CSV of one run on the CPU, in-process, as text (their names hold a timestamp)."""
    from precheck.execution.options import CheckOptions
    from precheck.run_ut import run_ut

    (dump_json,) = sorted((DATA / dump).glob("step*/*/dump.json"))
    with tempfile.TemporaryDirectory() as out:
        summary = run_ut(
            dump_json,
            out,
            device="cpu",
            workers=1,
            options=CheckOptions(standard=standard, target=target),
            keep_results=False,
        )
        return {
            "result": summary.result_path.read_text(encoding="utf-8-sig"),
            "details": summary.details_path.read_text(encoding="utf-8-sig"),
        }


def load() -> dict[str, dict[str, str]]:
    return json.loads(lzma.decompress(GOLDEN.read_bytes()))


def main() -> None:
    captured = {}
    for run in runs():
        captured[key(*run)] = csv_texts(*run)
        print(key(*run), file=sys.stderr)
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_bytes(lzma.compress(json.dumps(captured, sort_keys=True).encode(), preset=9 | lzma.PRESET_EXTREME))
    print(f"{GOLDEN}: {GOLDEN.stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    import os

    # the kernels the suite pins (tests/conftest.py), set before torch loads: written unpinned on an AVX-512 CPU,
    # the file held other numbers than every test run reads back
    for name, isa in (
        ("ATEN_CPU_CAPABILITY", "avx2"),
        ("MKL_ENABLE_INSTRUCTIONS", "AVX2"),
        ("ONEDNN_MAX_CPU_ISA", "AVX2"),
    ):
        os.environ.setdefault(name, isa)
    sys.path.insert(0, str(Path(__file__).parent.parent))
    # the dumps' tensor folders and large dump.json files are archives (tests/data/fixtures.py): a fresh clone
    # that runs this before any pytest session finds them unpacked
    sys.path.insert(0, str(DATA))
    import fixtures

    fixtures.unpack()
    main()
