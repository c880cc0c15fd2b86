"""Key training data of two runs (msprobe's RL key-data dump, ``msprobe.core.SingleSave``, which MindSpeed-RL and
verl write when ``key_data_dump`` is on), compared item by item in training order to the first step and item
where the runs part.

A dump holds ``data/<name>/step<N>/rank<R>/[micro_step<M>/]<name>[.<id>].npy`` with a ``<name>.json`` of its
statistics beside it. Items are read in training order: by step, then by name in the order an RL step makes
them (prompts, responses, old_log_prob, ref_log_prob, log_prob, values, rewards, advantages, returns, kl_loss,
pg_loss, loss; other names after, by name), then rank, micro step and id; one pair of arrays at a time.

An item is ``identical``; ``close`` when every element is within ``rtol`` of the larger magnitude (or within
``atol``); ``differ`` otherwise (token ids and other whole numbers differ as soon as one does), or when the shapes
differ (msprobe's comparator cuts both to their overlap and says nothing); or it is only on one side. Where a
side saved statistics and no array, the statistics are compared. The columns msprobe's ``SingleComparator``
writes (one .xlsx per name) are kept under its names, in one CSV, with the name, the cosine and the result.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from precheck.compare.entries import CompareInputError
from precheck.compare.metrics import load_array
from precheck.compare.table import cell
from precheck.core.older_python import zip_strict
from precheck.paths import claim_stamp, output_folder

ORDER = ("prompts", "input_ids", "responses", "attention_mask", "old_log_prob", "old_log_probs", "ref_log_prob",
         "log_prob", "log_probs", "values", "rewards", "token_level_rewards", "advantages", "returns", "entropy",
         "kl_loss", "pg_loss", "vf_loss", "loss")  # fmt: skip
COLUMNS = ["step", "rank", "micro_step", "name", "id", "shape1", "shape2", "相同元素百分比(%)", "首个不匹配元素索引",
           "最大绝对误差", "最大相对误差", "误差在千分之一内元素占比(%)", "误差在百分之一内元素占比(%)", "Cosine",
           "Result", "Message"]  # fmt: skip
IDENTICAL, CLOSE, DIFFER, ONLY_TARGET, ONLY_BENCH, UNREADABLE = (
    "identical", "close", "differ", "only in target", "only in bench", "unreadable",
)  # fmt: skip
_STEP, _RANK, _MICRO = re.compile(r"step(\d+)$"), re.compile(r"rank(\d+)$"), re.compile(r"micro_step(\d+)$")


@dataclass(frozen=True, order=True)
class ItemKey:
    step: int
    order: int  # the name's place in an RL step
    name: str
    rank: int
    micro_step: int
    id: str


@dataclass
class KeyDataComparison:
    """What ``precheck keydata`` found; :meth:`as_dict` is keydata_summary_{ts}.json."""

    target: str
    bench: str
    csv_path: Path
    summary_path: Path
    results: Counter = field(default_factory=Counter)
    first_part: dict[str, Any] | None = None
    first_per_name: dict[str, int] = field(default_factory=dict)  # name -> the first step it parts in
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "bench": self.bench, "csv": str(self.csv_path), "results": dict(self.results),
                "first_part": self.first_part, "first_step_per_name": self.first_per_name,
                "seconds": round(self.seconds, 3)}  # fmt: skip


def _data_root(path: str | os.PathLike) -> Path:
    root = Path(path)
    if not root.is_dir():
        raise CompareInputError(f"{root}: no such folder (a key-data dump: the folder holding data/)")
    data = root / "data" if (root / "data").is_dir() else root
    if not any(p.is_dir() and any(_STEP.match(s.name) for s in p.iterdir() if s.is_dir()) for p in data.iterdir()):
        raise CompareInputError(f"{root}: no <name>/step<N>/ folders under it: not a key-data dump (msprobe save)")
    return data


def _number(pattern: re.Pattern, name: str) -> int | None:
    m = pattern.match(name)
    return int(m.group(1)) if m else None


def index(path: str | os.PathLike) -> dict[ItemKey, Path]:
    """Every saved item of a key-data dump: its key and its .npy (or, without one, its statistics .json)."""
    found: dict[ItemKey, Path] = {}
    order = {name: i for i, name in enumerate(ORDER)}
    for tag in sorted(p for p in _data_root(path).iterdir() if p.is_dir()):
        place = order.get(tag.name, len(ORDER))
        for step_dir in (s for s in tag.iterdir() if s.is_dir() and _STEP.match(s.name)):
            for rank_dir in (r for r in step_dir.iterdir() if r.is_dir() and _RANK.match(r.name)):
                micro_dirs = [m for m in rank_dir.iterdir() if m.is_dir() and _MICRO.match(m.name)] or [rank_dir]
                for micro_dir in micro_dirs:
                    micro = _number(_MICRO, micro_dir.name) or 0
                    base = ItemKey(_number(_STEP, step_dir.name), place, tag.name, _number(_RANK, rank_dir.name),
                                   micro, "")  # fmt: skip
                    found.update(_items(micro_dir, base))
    return found


def _items(folder: Path, base: ItemKey) -> dict[ItemKey, Path]:
    items: dict[ItemKey, Path] = {}
    for f in folder.iterdir():
        if f.suffix == ".npy" and f.name.startswith(base.name):
            item = f.stem.removeprefix(base.name).removeprefix(".")
            items[ItemKey(base.step, base.order, base.name, base.rank, base.micro_step, item)] = f
    stats = folder / f"{base.name}.json"
    if not items and stats.is_file():
        items[base] = stats
    return items


def _read(path: Path) -> tuple[np.ndarray | None, str | None]:
    """(array, None) from a .npy; (None, None) for a statistics file; or (None, the problem)."""
    if path.suffix != ".npy":
        return None, None
    try:
        return np.asarray(load_array(path.parent, path.name)), None
    except (OSError, ValueError) as e:  # load_array's reason names the file
        return None, str(e)[:200]


def _saved_stats(path: Path, key: ItemKey) -> list[float] | None:
    """The item's max, min, mean and norm as msprobe saved them beside it (``<name>.json``; a list or a dict of
    them for a list or dict of tensors), or None."""
    try:
        doc = json.loads((path.parent / f"{key.name}.json").read_text(encoding="utf-8")).get("data")
        if isinstance(doc, list):
            doc = doc[int(key.id)] if key.id.isdigit() and int(key.id) < len(doc) else None
        elif isinstance(doc, dict) and key.id:
            doc = doc.get(key.id)
    except (OSError, ValueError, AttributeError):
        return None
    values = [doc.get(k) for k in ("max", "min", "mean", "norm")] if isinstance(doc, dict) else []
    ok = len(values) == 4 and all(isinstance(v, (int, float)) for v in values)
    return [float(v) for v in values] if ok else None


def compare_arrays(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> dict[str, Any]:
    """msprobe SingleComparator's columns for two arrays of one shape, the cosine, and the result."""
    x, y = a.astype(np.float64).reshape(-1), b.astype(np.float64).reshape(-1)
    diff = np.abs(x - y)
    scale = np.maximum(np.abs(x), np.abs(y))
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.nan_to_num(diff / scale)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    mismatch = np.flatnonzero(~same)
    norms = float(np.linalg.norm(x) * np.linalg.norm(y))
    row = {
        "相同元素百分比(%)": float(same.mean() * 100) if x.size else 100.0,
        "首个不匹配元素索引": int(mismatch[0]) if mismatch.size else "",
        "最大绝对误差": float(np.nan_to_num(diff).max()) if x.size else 0.0,
        "最大相对误差": float(relative.max()) if x.size else 0.0,
        "误差在千分之一内元素占比(%)": float((diff <= 0.001 * scale).mean() * 100) if x.size else 100.0,
        "误差在百分之一内元素占比(%)": float((diff <= 0.01 * scale).mean() * 100) if x.size else 100.0,
        "Cosine": float(np.dot(x, y) / norms) if norms > 0 and np.isfinite(norms) else "",
    }
    whole = bool(np.all(np.isfinite(x)) and np.all(x == np.round(x)) and np.all(y == np.round(y)))
    if not mismatch.size:
        row["Result"], row["Message"] = IDENTICAL, ""
    elif whole:
        row["Result"], row["Message"] = DIFFER, f"{mismatch.size} of {x.size} values differ (whole numbers: tokens)"
    else:
        beyond = ~same & (diff > atol) & ~(diff <= rtol * scale)
        row["Result"] = DIFFER if beyond.any() else CLOSE
        row["Message"] = f"{int(beyond.sum())} of {x.size} values beyond rtol {rtol:g}" if beyond.any() else ""
    return row


def compare_stats(a: list[float], b: list[float], rtol: float, atol: float) -> dict[str, Any]:
    worst = max(abs(p - q) / max(abs(p), abs(q), 1e-300) if abs(p - q) > atol else 0.0 for p, q in zip_strict(a, b))
    result = IDENTICAL if a == b else CLOSE if worst <= rtol else DIFFER
    return {
        "Result": result,
        "最大相对误差": worst,
        "Message": "statistics only (max, min, mean, norm): no array saved",
    }


def _row(key: ItemKey, t: Path | None, b: Path | None, rtol: float, atol: float) -> dict[str, Any]:
    row: dict[str, Any] = {"step": key.step, "rank": key.rank, "micro_step": key.micro_step, "name": key.name,
                           "id": key.id}  # fmt: skip
    if t is None or b is None:
        return row | {"Result": ONLY_BENCH if t is None else ONLY_TARGET}
    (ta, tp), (ba, bp) = _read(t), _read(b)
    if tp or bp:
        return row | {"Result": UNREADABLE, "Message": tp or bp}
    odd = next((f"{p.name}: dtype {a.dtype} is not numeric" for p, a in ((t, ta), (b, ba))
                if a is not None and a.dtype.kind not in "biuf"), None)  # fmt: skip
    if odd:
        return row | {"Result": UNREADABLE, "Message": odd}
    if ta is not None and ba is not None:
        row |= {"shape1": list(ta.shape), "shape2": list(ba.shape)}
        if ta.shape != ba.shape:
            return row | {"Result": DIFFER, "Message": f"shapes differ: {list(ta.shape)} and {list(ba.shape)}"}
        return row | compare_arrays(ta, ba, rtol, atol)
    stats = [_saved_stats(t, key), _saved_stats(b, key)]
    if None in stats:
        which = t if stats[0] is None else b
        return row | {"Result": UNREADABLE, "Message": f"{which.parent / key.name}.json: no max/min/mean/norm for it"}
    return row | compare_stats(stats[0], stats[1], rtol, atol)


def compare_keydata(
    target: str | os.PathLike,
    bench: str | os.PathLike,
    out_path: str | os.PathLike = ".",
    *,
    rtol: float = 1e-3,
    atol: float = 1e-6,
) -> KeyDataComparison:
    """Compare two key-data dumps and write keydata_compare_{ts}.csv and keydata_summary_{ts}.json. Raises
    CompareInputError (a folder that is not such a dump) or OSError (the output cannot be written)."""
    start = time.perf_counter()
    t_items, b_items = index(target), index(bench)
    folder = output_folder(out_path)
    stamp = claim_stamp(folder, "keydata_compare_{}.csv")
    result = KeyDataComparison(str(target), str(bench), folder / f"keydata_compare_{stamp}.csv",
                               folder / f"keydata_summary_{stamp}.json")  # fmt: skip
    with open(result.csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(COLUMNS)
        for key in sorted(set(t_items) | set(b_items)):
            row = _row(key, t_items.get(key), b_items.get(key), rtol, atol)
            writer.writerow([cell(_cell(row.get(c, ""))) for c in COLUMNS])
            _learn(result, row)
    result.seconds = time.perf_counter() - start
    with open(result.summary_path, "w", encoding="utf-8") as f:
        json.dump(result.as_dict(), f, indent=1, allow_nan=False, default=str)
        f.write("\n")
    return result


def _cell(value: Any) -> Any:
    return f"{value:.6g}" if isinstance(value, float) and math.isfinite(value) else value


def _learn(result: KeyDataComparison, row: dict[str, Any]) -> None:
    result.results[row["Result"]] += 1
    if row["Result"] in (IDENTICAL, CLOSE):
        return
    result.first_per_name.setdefault(row["name"], row["step"])
    if result.first_part is None:
        result.first_part = {k: row.get(k) for k in ("step", "rank", "micro_step", "name", "id", "Result", "Message")}
        result.first_part["max_relative_error"] = row.get("最大相对误差")
        result.first_part["first_mismatch_index"] = row.get("首个不匹配元素索引")
