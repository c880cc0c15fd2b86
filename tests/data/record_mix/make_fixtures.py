"""Record mix_model.py's step with msprobe 26.2 at level mix into the dumps tests/test_record_mix.py compares
precheck.record(level="mix") with.

Run it in the throwaway venv that has msprobe (mindstudio-probe 26.2, torch 2.13), from the repository root, with
the CPU kernels pinned to AVX2 as tests/conftest.py pins them for the test that records the same step:

    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \
        /tmp/j3msp/bin/python tests/data/record_mix/make_fixtures.py

It writes tests/data/record_mix/mix_{tensor,statistics}/ (step0/procNNNN/dump.json, construct.json and the
msprobe_config.json it used), at msprobe's default risk level (no ``risk_level`` key:
FOCUS). Each is recorded in its own interpreter (msprobe's PrecisionDebugger is one per process) the way
make_dump.py records: ``start(model); run().backward(); stop(); step()``. Left out to keep the fixtures small:
stack.json (its frames are the recorder's own, not compared) and the tensor task's dump_tensor_data/ (201 files,
850 KB; the test checks that precheck writes a file for each ``data_name`` of msprobe's dump.json).
"""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# dump -> (task, risk level; None: no risk_level key, msprobe's FOCUS)
DUMPS = {"mix_tensor": ("tensor", None), "mix_statistics": ("statistics", None)}


def record(name: str) -> None:
    """Record one dump, in this interpreter."""
    import torch
    from msprobe.pytorch import PrecisionDebugger

    sys.path.insert(0, str(HERE))
    from mix_model import build

    task, risk = DUMPS[name]
    out = Path(tempfile.mkdtemp()) / name
    config = {"task": task, "dump_path": str(out), "rank": [], "step": [0], "level": "mix"}
    if risk:
        config["risk_level"] = risk
    config[task] = {"scope": [], "list": [], "data_mode": ["all"]}
    config_path = out.parent / "msprobe_config.json"
    config_path.write_text(json.dumps(config))
    model, run = build(torch.float32)
    debugger = PrecisionDebugger(config_path=str(config_path))
    debugger.start(model)
    run().backward()
    debugger.stop()
    debugger.step()
    target = HERE / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(out, target, ignore=shutil.ignore_patterns("stack.json", "dump_tensor_data"))
    shutil.copy(config_path, target / "msprobe_config.json")
    print("wrote", target)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        record(sys.argv[1])
    else:
        for dump in DUMPS:
            subprocess.run([sys.executable, __file__, dump], check=True)
