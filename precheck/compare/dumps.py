"""Compare two dumps of the same step: msprobe's compare CSV, row by row as records are read, and the first place
where the runs part (precheck.compare.divergence), in ``compare_summary_{ts}.json`` beside the CSV.

Memory stays flat in the number of records: the dumps are indexed (names and byte spans), records are decoded two
at a time, rows are written as they are made, and what the summary keeps is bounded.
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from precheck.compare.align import align, rejoin
from precheck.compare.divergence import (
    TOLERANCE,
    UNDEFINED,
    UNDERFLOW,
    UNMATCHED,
    UNREADABLE,
    Divergence,
    canonical,
    tolerance,
)
from precheck.compare.entries import DumpIndex, Item, Record, open_dump
from precheck.compare.fused import Elements
from precheck.compare.localize import REPLAY_BUDGET, localize
from precheck.compare.mapping import NameMap, torch_dtype
from precheck.compare.metrics import TensorMetrics, load_elements, tensor_metrics
from precheck.compare.modes import CompareMode, compare_mode
from precheck.compare.overflow import incomparable, non_finite
from precheck.compare.peers import Peers, one_sided
from precheck.compare.record_log import RecordLog
from precheck.compare.stacks import Stacks
from precheck.compare.summary import DumpComparison
from precheck.compare.table import CompareCsv
from precheck.core.older_python import zip_strict
from precheck.core.status import ERROR
from precheck.dump.ptarchive import PtError
from precheck.dump.record_names import split_key
from precheck.execution.options import CheckOptions
from precheck.paths import claim_stamp, output_folder
from precheck.schema import COMPARE_RECORDS, COMPARE_RESULT, COMPARE_SUMMARY
from precheck.schema import CompareConst as C


def compare_dumps(
    target: str | os.PathLike,
    bench: str | os.PathLike,
    out_path: str | os.PathLike = ".",
    *,
    layer_mapping: dict[str, dict[str, str]] | None = None,
    stack_path: str | os.PathLike | None = None,
    suffix: str = "",
    max_memory: int | None = None,
    timeout: float | None = None,
    replay_budget: float = REPLAY_BUDGET,
    peers: Peers | None = None,
) -> DumpComparison:
    """Compare ``target`` with ``bench`` (dump.json files or their folders) and write the CSV and the summary.
    Raises CompareInputError (a dump or mapping that cannot be used) or OSError (the output cannot be written).
    ``max_memory`` (bytes) and ``timeout`` (seconds) bound each call the honest-kernel rule replays, as run_ut's
    options do (None: run_ut's defaults); ``replay_budget`` (seconds) bounds all of them together. ``peers``: the
    other ranks of the step (precheck.compare.peers), asked about a record whose inputs one run did not define."""
    start = time.perf_counter()
    t, b = open_dump(target), open_dump(bench)
    mode = compare_mode(t, b)
    names = NameMap(layers=layer_mapping or {}, cross_framework=t.framework == "mindspore" != b.framework)
    names.learn(t.keys, t.path.parent / "construct.json")
    stacks = Stacks.load(Path(stack_path) if stack_path else t.path.parent / "stack.json")
    folder = output_folder(out_path)
    tail = f"{suffix}_{claim_stamp(folder, COMPARE_RESULT.format(suffix + '_{}'))}"
    result = DumpComparison(
        str(t.path), str(b.path), mode,
        folder / COMPARE_RESULT.format(tail), folder / COMPARE_SUMMARY.format(tail),
        folder / COMPARE_RECORDS.format(tail), stack_problem=stacks.problem,
        divergence=Divergence(replayable=mode.reads_tensors),
    )  # fmt: skip
    with (
        open(t.path, "rb") as t_file,
        open(b.path, "rb") as b_file,
        open(result.csv_path, "w", newline="", encoding="utf-8") as f,
        open(result.records_path, "w", newline="", encoding="utf-8") as g,
    ):
        sides = _Sides(t, b, t_file, b_file, peers)
        pairs = _pairs(sides, names)
        out = _Out(CompareCsv(f, mode.header(stacks.present)), RecordLog(g))
        result.records_total = len(pairs)
        write_summary(result)  # a compare killed from here on is reported as unfinished, not as agreeing
        for i, j in pairs:
            _compare_pair(result, out, sides, names, stacks, i, j)
    result.rows = out.table.rows
    localize(result, t, b, pairs, CheckOptions(max_memory=max_memory, timeout=timeout), replay_budget)
    result.divergence.explain()
    result.unmatched = _unmatched_runs(pairs, t, b)
    result.wall_seconds = time.perf_counter() - start
    result.complete = True
    write_summary(result)
    return result


def write_summary(result: DumpComparison) -> None:
    with open(result.summary_path, "w", encoding="utf-8") as f:
        json.dump(result.as_dict(), f, indent=1)
        f.write("\n")


@dataclass
class _Sides:
    """The two indexed dumps and their dump.json files, each opened once for the whole compare."""

    t: DumpIndex
    b: DumpIndex
    t_file: BinaryIO
    b_file: BinaryIO
    peers: Peers | None = None  # the step's other ranks (precheck.compare.peers)

    def target(self, i: int | None) -> Record | None:
        return None if i is None else self.t.record(i, self.t_file)

    def bench(self, j: int | None) -> Record | None:
        return None if j is None else self.b.record(j, self.b_file)


def _pairs(sides: _Sides, names: NameMap) -> list[tuple[int | None, int | None]]:
    """Which bench record each target record is compared with (precheck.compare.align), by the records' names
    in the bench's spelling and, where names agree, by whether their tensors can stand for each other."""
    t_tokens = [names.token(k) for k in sides.t.keys]
    b_tokens = [names.token(k, mapped=False) for k in sides.b.keys]

    @functools.lru_cache(maxsize=4096)  # a record is weighed against several candidates; memory stays bounded
    def detail(side: str, i: int) -> Record:
        return sides.target(i) if side == "target" else sides.bench(i)

    pairs = align(t_tokens, b_tokens, detail, _weigh)
    t_names = [f"{token}.{(split_key(k) or ('', '', ''))[1]}" for token, k in zip_strict(t_tokens, sides.t.keys)]
    b_names = [f"{token}.{(split_key(k) or ('', '', ''))[1]}" for token, k in zip_strict(b_tokens, sides.b.keys)]
    return rejoin(pairs, t_names, b_names, lambda i, j: _weigh(detail("target", i), detail("bench", j)) is not None)


def _weigh(t_rec: Record, b_rec: Record) -> int | None:
    """What pairing two records of the same name costs the alignment: 0 when their tensors have the same shapes,
    1 when they differ, None when they cannot be the same call: an item paired by its place is a tensor on one
    side only, or its tensors differ in dtype kind or in rank (msprobe leaves a row whose dtypes cannot match
    unpaired; a different batch or length keeps the rank, and the pair). An unreadable record pairs: its row
    says why."""
    if t_rec.problem or b_rec.problem:
        return 1
    for item, other in _item_pairs(t_rec, b_rec):
        if other is None or item.dtype is None or other.dtype is None:  # a None argument stands for anything
            continue
        if item.tensor != other.tensor:
            return None
        if item.tensor and not _same_kind(item, other):
            return None
    shapes = [tuple(i.shape for i in r.items if i.tensor) for r in (t_rec, b_rec)]
    return 0 if shapes[0] == shapes[1] else 1


def _same_kind(a: Item, b: Item) -> bool:
    ka, kb = _kind(a.dtype), _kind(b.dtype)
    if ka and kb and ka != kb:
        return False
    return a.dims is None or b.dims is None or len(a.dims) == len(b.dims)


def _kind(dtype: str) -> str | None:
    """float, complex, bool or int of a dtype in either framework's spelling (torch.bfloat16, BFloat16, UInt8)."""
    low = dtype.lower()
    return next((k for k in ("complex", "float", "bool", "int") if k in low), None)


@dataclass
class _Out:
    table: CompareCsv
    log: RecordLog


def _compare_pair(result, out: _Out, sides: _Sides, names, stacks, i, j) -> None:
    """The rows of one aligned pair of records (or of one side's record alone), their Result, and what the
    divergence search learns from them."""
    t_rec, b_rec = sides.target(i), sides.bench(j)
    shown = t_rec or b_rec
    if shown.problem or (b_rec is not None and b_rec.problem):
        result.divergence.count(UNREADABLE)
        out.log.alone(shown.key, shown.direction, UNREADABLE, shown.problem or b_rec.problem)
        row = result.mode.row(None, None, None)
        row.update(
            {C.NPU_NAME: shown.key, C.RESULT: ERROR, C.ERROR_MESSAGE: json.dumps([shown.problem or b_rec.problem])}
        )
        out.table.write(row)
        result.results[ERROR] += 1
        return
    rows, deviations, overflows, unknown = _rows(result.mode, t_rec, b_rec, sides.t, sides.b)
    result.mode.judge(rows, names.api(shown.api) if t_rec else shown.api)
    if t_rec is not None and rows and stacks.present:
        rows[0][C.STACK] = stacks.of(t_rec.key)
    for row in rows:
        out.table.write(row)
        result.results[row[C.RESULT]] += 1
    if t_rec is None or b_rec is None:
        result.divergence.count(UNMATCHED)
        out.log.alone(shown.key, shown.direction, UNMATCHED, f"only in the {'target' if t_rec else 'bench'}")
        return
    if unknown and _undefined(t_rec, unknown, deviations):
        result.divergence.count(UNDEFINED)
        result.not_comparable(t_rec.key)
        out.log.alone(t_rec.key, t_rec.direction, UNDEFINED, f"neither run defined {', '.join(unknown[:3])}")
        return
    peer = sides.peers.undefined_at(t_rec.key) if sides.peers and one_sided(t_rec, b_rec) else None
    if peer is not None:  # one run's NaN, the other's stale numbers: a buffer read before it is written
        result.divergence.count(UNDEFINED)
        result.not_comparable(t_rec.key)
        out.log.alone(
            t_rec.key, t_rec.direction, UNDEFINED, f"one run did not define its inputs; neither did on rank {peer}"
        )
        return
    if result.divergence.across is None:
        result.divergence.across = _precisions(t_rec, b_rec)
    out.log.finding(result.divergence.observe(t_rec, deviations, overflows))
    if result.first_overflow is None and _overflows(t_rec) and not _overflows(b_rec):
        result.first_overflow = t_rec.key


def _precisions(t_rec: Record, b_rec: Record) -> tuple[str, str] | None:
    """(the target's dtype, the bench's) of the record's first pair of float tensors whose dtypes differ: the runs
    differ in precision (an autocast bf16 output against fp32); None where every pair agrees."""
    for item, other in _item_pairs(t_rec, b_rec):
        if other is not None and item.tensor and other.tensor:
            mine, theirs = canonical(item.dtype), canonical(other.dtype)
            if mine != theirs and mine in TOLERANCE and theirs in TOLERANCE:
                return mine, theirs
    return None


def _undefined(record: Record, unknown: list[str], deviations: dict) -> bool:
    """The record computed from values neither run defined (all its tensor inputs are), or has no tensor whose
    values both runs defined: what it made of them says nothing of its kernel (a narrow of FSDP2's all-gather
    buffer before the collective fills it)."""
    inputs = [item.name for item in record.inputs if item.tensor and (item.name in deviations or item.name in unknown)]
    if inputs:
        return all(name in unknown for name in inputs)
    return not any(item.tensor and item.name in deviations for item in record.items)


def _rows(mode: CompareMode, t_rec: Record | None, b_rec: Record | None, t: DumpIndex, b: DumpIndex):
    """The record's rows, each matched item's (deviation, tolerance), which side alone holds inf or nan in an
    item (by the recorded statistics), or UNDERFLOW where the target dtype's range explains the item's deviation,
    and the tensors whose values neither run defined (precheck.compare.overflow.incomparable): they have no
    deviation, whatever their files hold (uninitialised memory differs from run to run), while a NaN where the
    other run has finite numbers is as far from them as its statistics say (inf): a divergence."""
    rows, deviations, overflows, unknown = [], {}, {}, []
    if t_rec is None:
        return [mode.row(None, item, None) for item in b_rec.items], deviations, overflows, unknown
    pairs = _item_pairs(t_rec, b_rec)
    tensors = [(i, o) for i, o in pairs if o is not None and mode.reads_tensors and i.tensor and o.tensor]
    computed = {id(i): _tensor_pair(t, b, i, o) for i, o in tensors}  # one thread: see fused.passed
    for item, other in pairs:
        metrics = computed.get(id(item))
        if other is not None and incomparable(item, other):
            unknown.append(item.name)
        elif other is not None:
            deviation, tol = mode.deviation(item, other, metrics), tolerance(item, other)
            if metrics is not None and metrics.range_explained:  # an underflow of the target's dtype, no kernel's
                tol = max(tol, deviation)
                overflows[item.name] = UNDERFLOW
            deviations[item.name] = (deviation, tol)
            mine, theirs = non_finite(item), non_finite(other)
            if mine != theirs and item.tensor and other.tensor:
                overflows[item.name] = "target" if mine - theirs else "bench"
        rows.append(mode.row(_spelled(item), other, metrics))
    return rows, deviations, overflows, unknown


def _item_pairs(t_rec: Record, b_rec: Record | None) -> list[tuple[Item, Item | None]]:
    """Items pair by their place (``.output.1``); a tensor whose counterpart there has another shape pairs with
    the other side's tensor of its shape in the same role, then with one of its transposed shape, when there is
    one: frameworks order gradients differently (PyTorch's linear records its bias gradient first) and may
    keep a weight transposed."""
    if b_rec is None:
        return [(item, None) for item in t_rec.items]
    by_place = {item.name[len(b_rec.key) :]: item for item in b_rec.items}
    pairs = [(item, by_place.get(item.name[len(t_rec.key) :])) for item in t_rec.items]
    used = {id(o) for i, o in pairs if o is not None and _consistent(i, o)}
    for k, (item, other) in enumerate(pairs):
        if other is None or _consistent(item, other):
            continue
        wanted = [item.dims, item.dims[::-1]] if item.dims is not None else [None]
        for dims in wanted:
            match = next(
                (o for o in b_rec.items if id(o) not in used and o.state == item.state and _fits(item, o, dims)), None
            )
            if match is not None:
                pairs[k] = (item, match)
                used.add(id(match))
                break
    return pairs


def _consistent(a: Item, b: Item) -> bool:
    return a.tensor == b.tensor and (not a.tensor or a.shape == b.shape)


def _fits(item: Item, other: Item, dims: tuple[int, ...] | None) -> bool:
    """``other`` can stand for ``item``: a tensor of the wanted dims, or a value of the same kind."""
    return other.tensor and other.dims == dims if item.tensor else not other.tensor and other.dtype == item.dtype


def _spelled(item: Item) -> Item:
    """A MindSpore dtype as PyTorch spells it, so the two Dtype columns compare."""
    dtype = torch_dtype(item.dtype)
    if dtype == item.dtype:
        return item
    return Item(item.name, item.state, item.tensor, dtype, item.shape, item.requires_grad, item.stats, item.md5,
                item.data_name)  # fmt: skip


def _tensor_pair(t: DumpIndex, b: DumpIndex, item: Item, other: Item) -> TensorMetrics:
    try:  # a tensor left in its file is read through the descriptor that was checked, closed when done
        with load_elements(t.data_dir, item.data_name) as n, load_elements(b.data_dir, other.data_name) as g:
            if _rounded_to_bf16(item):
                n = Elements.of(_bf16(n.raw))
            if _rounded_to_bf16(other):
                g = Elements.of(_bf16(g.raw))
            if len(n.shape) == 2 and n.shape != g.shape and n.shape == g.shape[::-1]:
                result = tensor_metrics(n, Elements.of(g.in_memory().raw.T, g.bf16))
                result.notes.append("compared with the bench's transpose")
                return result
            return tensor_metrics(n, g)
    except (ValueError, PtError) as e:
        return TensorMetrics({}, notes=[f"not compared: {e}"])


def _rounded_to_bf16(item: Item) -> bool:
    """MindSpore saves BFloat16 tensors as float32 .npy files: they are rounded back to bf16 when read."""
    return item.dtype == "BFloat16" and item.data_name.endswith(".npy")


def _bf16(a: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return rounded.view(np.float32)


def _overflows(record: Record) -> bool:
    """Its outputs hold inf/nan while its inputs are finite (by the recorded statistics)."""
    return any(map(non_finite, record.outputs)) and not any(map(non_finite, record.inputs))


def _unmatched_runs(pairs, t: DumpIndex, b: DumpIndex) -> list[dict[str, Any]]:
    """Consecutive records of one side only, as runs: which side, how many, first and last name."""
    runs: list[dict[str, Any]] = []
    current = None
    for i, j in pairs:
        if i is not None and j is not None:
            current = None
            continue
        side, key = ("target", t.keys[i]) if j is None else ("bench", b.keys[j])
        if current is not None and current["side"] == side:
            current.update(last=key, count=current["count"] + 1)
        else:
            current = {"side": side, "first": key, "last": key, "count": 1}
            runs.append(current)
    return runs
