"""Per-token logits of two runs of a language model (msit's first step of an LLM precision hunt): for each token
the cosine, max abs and max relative error, the KL divergence of the target's next-token distribution from the
bench's, whether the top-1 token agrees and how much of the top 5 is shared; the first token that fails.

A token fails when its top-1 token differs, its KL divergence exceeds 0.01 nats or its cosine falls below 0.99:
from there on the two runs do not generate the same text. Each side is a folder of one file per token (.npy or
.pt, in natural order of their names: logits_2 before logits_10) or one file holding a tensor with a token axis
((tokens, vocab) or (1, tokens, vocab)). A per-token file that cannot be read (on either side) makes its token an
"unreadable" row saying why, and the other tokens are compared.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from precheck.compare.entries import CompareInputError
from precheck.compare.metrics import load_array
from precheck.compare.table import cell
from precheck.paths import claim_stamp, output_folder

COLUMNS = ["Token", "Cosine", "MaxAbsErr", "MaxRelativeErr", "KL divergence", "Top-1 agrees", "Top-5 overlap",
           "Result", "Message"]  # fmt: skip
UNREADABLE = "unreadable"  # a token whose file could not be read on either side: its Message says why
MIN_COSINE, MAX_KL, TOP_K = 0.99, 0.01, 5


@dataclass
class LogitsComparison:
    csv_path: Path
    tokens: int  # compared: the shorter side's
    first_failing: int | None
    rows: list[dict]
    lengths: tuple[int, int]  # tokens of the target and of the bench


def _natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def load_tokens(path: str | os.PathLike) -> tuple[np.ndarray, dict[int, str]]:
    """(tokens, vocab) float64 logits from a folder of per-token files or one file with a token axis, and the
    tokens whose file could not be read, with why (their rows are zeros, never compared): one bad file costs its
    token's row, not the compare."""
    path = Path(path)
    try:
        if path.is_dir():
            return _token_files(path)
        if not path.is_file():
            raise CompareInputError(f"{path}: no such file or folder")
        array = np.asarray(load_array(path.parent, path.name), dtype=np.float64)
    except ValueError as e:
        raise CompareInputError(str(e)) from None
    while array.ndim > 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 2:
        raise CompareInputError(f"{path}: logits of shape {array.shape}, expected (tokens, vocab)")
    return array, {}


def _token_files(path: Path) -> tuple[np.ndarray, dict[int, str]]:
    files = sorted((p for p in path.iterdir() if p.suffix in (".npy", ".pt")), key=lambda p: _natural(p.name))
    if not files:
        raise CompareInputError(f"{path}: no .npy or .pt files in it")
    rows: list[np.ndarray | None] = []
    problems: dict[int, str] = {}
    for k, f in enumerate(files):
        try:
            rows.append(np.asarray(load_array(path, f.name), dtype=np.float64).reshape(-1))
        except ValueError as e:
            rows.append(None)
            problems[k] = str(e)
    sizes = {r.size for r in rows if r is not None}
    if not sizes:
        raise CompareInputError(f"{path}: no file of it could be read (the first: {problems[0]})")
    if len(sizes) != 1:
        raise CompareInputError(f"{path}: the files hold logits of different sizes")
    vocab = sizes.pop()
    return np.stack([np.zeros(vocab) if r is None else r for r in rows]), problems


def _token_row(k: int, t: np.ndarray, b: np.ndarray) -> dict:
    cos = float(np.dot(t, b) / (np.linalg.norm(t) * np.linalg.norm(b) or 1.0))
    diff = np.abs(t - b)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(b == 0, diff / np.finfo(float).eps, diff / np.abs(b))
    pt, pb = _log_softmax(t), _log_softmax(b)
    kl = float(np.sum(np.exp(pb) * (pb - pt)))
    top_t, top_b = np.argsort(-t, kind="stable")[:TOP_K], np.argsort(-b, kind="stable")[:TOP_K]
    top1 = bool(top_t[0] == top_b[0])
    overlap = len(set(top_t.tolist()) & set(top_b.tolist())) / TOP_K
    ok = top1 and kl <= MAX_KL and cos >= MIN_COSINE
    return {
        "Token": k, "Cosine": round(cos, 6), "MaxAbsErr": float(diff.max()), "MaxRelativeErr": float(rel.max()),
        "KL divergence": kl, "Top-1 agrees": top1, "Top-5 overlap": overlap, "Result": "pass" if ok else "error",
        "Message": "",
    }  # fmt: skip


def _unreadable_row(k: int, problem: str) -> dict:
    return dict.fromkeys(COLUMNS, "N/A") | {"Token": k, "Result": UNREADABLE, "Message": problem}


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max()
    return shifted - np.log(np.sum(np.exp(shifted)))


def compare_logits(
    target: str | os.PathLike, bench: str | os.PathLike, out_path: str | os.PathLike = "."
) -> LogitsComparison:
    """Compare per-token logits and write logits_compare_{ts}.csv; CompareInputError for unusable input."""
    (t, t_problems), (b, b_problems) = load_tokens(target), load_tokens(bench)
    if t.shape[1] != b.shape[1]:
        raise CompareInputError(
            f"vocabularies differ: {t.shape[1]} logits per token in the target, {b.shape[1]} in the bench"
        )
    n = min(len(t), len(b))
    problems = b_problems | t_problems
    rows = [_unreadable_row(k, problems[k]) if k in problems else _token_row(k, t[k], b[k]) for k in range(n)]
    folder = output_folder(out_path)
    path = folder / f"logits_compare_{claim_stamp(folder, 'logits_compare_{}.csv')}.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows([cell(row[c]) for c in COLUMNS] for row in rows)
    first = next((r["Token"] for r in rows if r["Result"] == "error"), None)
    return LogitsComparison(path, n, first, rows, (len(t), len(b)))
