"""Every bundled dump's CSVs, cell for cell as the pinned grader wrote them (tests/golden_csv.py): a rewrite of
the metrics must keep each of the 17 details columns, every status and every message.

Numbers are held to 9 significant digits, not to all 14 printed decimals: the float64 golden and the grader's
own sums go through BLAS and vectorised kernels whose order of addition follows the CPU (the same commit gave
cosines 1e-14 apart on an AVX2, an AVX-512 and an AMX machine, kernels pinned to AVX2 on all three), while any
change of a formula moves a column far more than that. The few calls whose device kernel itself computes
differently from CPU to CPU, or whose float64 golden is ill-conditioned, are listed in golden_csv.KERNEL_DEPENDENT
for the targets where they move; their rows are held for their name only there."""

from __future__ import annotations

import csv
import io
import math
import re

import pytest
from golden_csv import DUMPS, KERNEL_DEPENDENT, STANDARDS, TARGETS, csv_texts, key, load

from precheck.core.older_python import zip_strict

RELATIVE = 1e-9  # how far a number may move between CPUs
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@pytest.fixture(scope="module")
def golden() -> dict[str, dict[str, str]]:
    return load()


def test_golden_file_covers_every_bundled_dump(golden: dict[str, dict[str, str]]) -> None:
    from helpers import DATA

    bundled = {p.parent.parent.parent.name for p in DATA.glob("*/step*/*/dump.json")}
    assert bundled == set(DUMPS)
    assert {k.split("/")[0] for k in golden} == bundled


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _same(want: str, have: str) -> bool:
    """Equal text with every number in it equal to RELATIVE."""
    if want == have:
        return True
    if _NUMBER.sub("#", want) != _NUMBER.sub("#", have):
        return False
    pairs = zip_strict(_NUMBER.findall(want), _NUMBER.findall(have))
    return all(math.isclose(float(a), float(b), rel_tol=RELATIVE, abs_tol=1e-300) for a, b in pairs)


def test_numbers_are_held_to_nine_digits_and_words_exactly() -> None:
    assert _same("error 1.23456789012x (at index (0, 1))", "error 1.23456789013x (at index (0, 1))")
    assert not _same("error 1.2345679x", "error 1.2345680x")
    assert not _same("0.99999861", "0.99999871")
    assert not _same("warning", "error")
    assert not _same("at index (0, 1)", "at index (0, 2)")


@pytest.mark.parametrize("standard", STANDARDS)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dump", DUMPS)
def test_csvs_match_the_pinned_grader(golden: dict[str, dict[str, str]], dump: str, target: str, standard: str) -> None:
    expected = golden[key(dump, target, standard)]
    got = csv_texts(dump, target, standard)
    skip = {api for api, targets in KERNEL_DEPENDENT.get(dump, {}).items() if target in targets}
    for kind in ("result", "details"):
        want, have = _rows(expected[kind]), _rows(got[kind])
        assert len(have) == len(want), f"{kind}: {len(have)} rows, pinned {len(want)}"
        header = want[0]
        for w, h in zip_strict(want, have):
            if w[0].split(".forward")[0].split(".backward")[0] in skip:
                assert h[0] == w[0]
                continue
            differ = [f"{col}: {a!r} -> {b!r}" for col, a, b in zip_strict(header, w, h) if not _same(a, b)]
            assert not differ, f"{kind} row {w[0]}: " + "; ".join(differ)
