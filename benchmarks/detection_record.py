"""Record one dump of the detection corpus with msprobe (run in a throwaway venv with torch 2.13 and
mindstudio-probe; ``benchmarks/detection.py record`` calls it once per dump):

    VENV/bin/python benchmarks/detection_record.py NAME DTYPE SCALE OUT_DIR

NAME is a bug of detection_bugs.BUGS or ``clean:MODEL``. The bug's patch is installed before msprobe's
PrecisionDebugger exists, so msprobe wraps and records the buggy kernel. OUT_DIR gets ``step0/proc*/`` (the L1
tensor dump), ``msprobe_config.json`` and ``truth.json``: the bugged records (name, direction, normwise relative
difference between buggy and honest values, share of elements changed), checked against the dump's own files.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from detection_bugs import BUGS, TRACE, Bug
from detection_models import MODELS

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
NEGLIGIBLE = {"fp32": 2.0**-24, "bf16": 2.0**-9, "fp16": 2.0**-12}  # unit roundoff: a smaller normwise change is no bug


def _difference(bad: torch.Tensor, honest: torch.Tensor) -> tuple[float, float]:
    """Normwise relative difference (inf when the bug changes which elements are finite) and share changed.
    Plain torch functions only: the patched API (a Tensor method, say) is still in place."""
    b, h = bad.double(), honest.double()
    changed = torch.logical_not(torch.eq(b, h) | torch.isnan(b) & torch.isnan(h))
    share = torch.count_nonzero(changed).item() / max(changed.numel(), 1)
    finite = torch.isfinite(b) & torch.isfinite(h)
    if torch.any(changed & torch.logical_not(finite)):
        return float("inf"), share
    norm = float(torch.linalg.vector_norm(h[finite]))
    return float(torch.linalg.vector_norm(torch.sub(b, h)[finite])) / max(norm, 1e-300), share


def _recorded(dump_dir: Path, record: dict, key: str) -> torch.Tensor:
    first = record[key][0]
    return torch.load(dump_dir / "dump_tensor_data" / first["data_name"], weights_only=True)


def ground_truth(bug: Bug, dtype: str, dump_json: Path) -> tuple[list[dict], list[dict]]:
    """The bugged records, each checked to hold exactly the buggy values; and patched calls the bug left unchanged
    in effect (normwise change below the dtype's rounding)."""
    data = json.loads(dump_json.read_text())["data"]
    bugged, negligible = [], []
    for i, (bad, honest) in sorted(TRACE[bug.direction].items()):
        name = f"{bug.api}.{i}"
        record = data.get(f"{name}.{bug.direction}")
        if record is None:
            raise SystemExit(f"{bug.name}: {name}.{bug.direction} is not in {dump_json}")
        saved = _recorded(dump_json.parent, record, "output")
        if not torch.equal(saved.nan_to_num(), bad.nan_to_num()):
            raise SystemExit(f"{bug.name}: {name}.{bug.direction} does not hold the buggy values")
        rel, share = _difference(bad, honest)
        entry = {"record": name, "direction": bug.direction, "rel_diff": rel, "changed": share}
        (bugged if rel > NEGLIGIBLE[dtype] else negligible).append(entry)
    if not bugged:
        raise SystemExit(f"{bug.name} in {dtype}: no call was changed beyond rounding")
    return bugged, negligible


def record(name: str, dtype: str, scale: float, out: Path) -> None:
    from msprobe.pytorch import PrecisionDebugger

    bug = next((b for b in BUGS if b.name == name), None)
    model = name.split(":", 1)[1] if bug is None else bug.model
    torch.manual_seed(0)
    run = MODELS[model](DTYPES[dtype])  # weights and data first: a bugged dump shares them with the clean one
    if bug is not None:
        bug.install(bug.api)
    out.mkdir(parents=True, exist_ok=True)
    config = out / "msprobe_config.json"
    task = {"scope": [], "list": [], "data_mode": ["all"]}
    config.write_text(json.dumps({"task": "tensor", "dump_path": str(out), "rank": [], "step": [0], "level": "L1",
                                  "tensor": task}))  # fmt: skip
    debugger = PrecisionDebugger(config_path=str(config))
    debugger.start()
    run(scale).backward()
    debugger.stop()
    debugger.step()
    dump_json = next(out.glob("step0/*/dump.json"))
    truth = {"name": out.name, "bug": None, "model": model, "dtype": dtype, "scale": scale, "bugged": []}
    if bug is not None:
        bugged, negligible = ground_truth(bug, dtype, dump_json)
        truth.update(bug=bug.name, split=bug.split, kind=bug.kind, description=bug.description, api=bug.api)
        truth.update(bugged=bugged, negligible=negligible)
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="a bug of detection_bugs.BUGS, or clean:MODEL")
    parser.add_argument("dtype", choices=sorted(DTYPES))
    parser.add_argument("scale", type=float, help="loss scale (1 or 1024)")
    parser.add_argument("out_dir", type=Path)
    return parser


if __name__ == "__main__":
    args = build_parser().parse_args()
    record(args.name, args.dtype, args.scale, args.out_dir)
