"""Every bundled dump's CSVs, cell for cell as the pinned grader wrote them (tests/golden_csv.py): a rewrite of
the metrics must keep each of the 17 details columns to its 14 printed decimals, and every status and message."""

from __future__ import annotations

import csv
import io

import pytest
from golden_csv import DUMPS, STANDARDS, TARGETS, csv_texts, key, load


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


@pytest.mark.parametrize("standard", STANDARDS)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dump", DUMPS)
def test_csvs_match_the_pinned_grader(golden: dict[str, dict[str, str]], dump: str, target: str, standard: str) -> None:
    expected = golden[key(dump, target, standard)]
    got = csv_texts(dump, target, standard)
    for kind in ("result", "details"):
        want, have = _rows(expected[kind]), _rows(got[kind])
        assert len(have) == len(want), f"{kind}: {len(have)} rows, pinned {len(want)}"
        header = want[0]
        for w, h in zip(want, have, strict=True):
            differ = [f"{col}: {a!r} -> {b!r}" for col, a, b in zip(header, w, h, strict=True) if a != b]
            assert not differ, f"{kind} row {w[0]}: " + "; ".join(differ)
