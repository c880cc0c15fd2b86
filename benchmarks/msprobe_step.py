"""One training step recorded by msprobe's PrecisionDebugger, and the command line of the scripts that record one
dump per variant of a model (compare_record.py, accumulation_record.py): run in the msprobe venv."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable


def record_step(model: object, step: Callable[[], object], out: str, cfg: dict) -> None:
    """msprobe's dump of ``step`` (forward and backward of ``model``) under ``out``, configured by ``cfg``."""
    from msprobe.pytorch import PrecisionDebugger

    os.makedirs(out, exist_ok=True)
    config = os.path.join(out, "msprobe_config.json")
    with open(config, "w") as f:
        json.dump(cfg, f)
    debugger = PrecisionDebugger(config_path=config)
    debugger.start(model)
    step()
    debugger.stop()
    debugger.step()


def variants_parser(doc: str, variants: dict) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("variants", nargs="*", help=f"default: all of {', '.join(variants)}")
    return parser


def record_variants(
    parser: argparse.ArgumentParser, variants: dict, record: Callable[[str, str], None], script: str
) -> None:
    """Record the variants the command line names (default: all), each in a process of its own: a patched API
    must not leak into the next recording."""
    args = parser.parse_args()
    names = args.variants or list(variants)
    if len(names) == 1:
        record(names[0], os.path.join(args.out_dir, names[0]))
        return
    for name in names:
        subprocess.run([sys.executable, script, args.out_dir, name], check=True)
        print("recorded", name)
