"""Record the fp32 twin of tests/data/steps/block_autocast_bf16_{statistics,tensor}_msprobe with msprobe 26.2, for
tests/test_compare_precision_verdict.py: the same step (benchmarks/training_steps.py's Block, seed 0, clipped, SGD)
with no autocast, so that compare of the autocast step against it reads two runs that differ only in precision.

Run it in the msprobe venv (torch 2.13 CPU + mindstudio-probe), from the repository root:

    .venv/bin/python tests/data/recipes/msprobe_venv.py -- tests/data/compare/make_block_fp32.py [TASK ...]

(default: statistics and tensor), each written to tests/data/compare/block_fp32_TASK/step0/proc<pid> (level L1,
msprobe's stack.json and construct.json left out as the corpus leaves them out); then
``python tests/data/fixtures.py pack``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def record(task: str) -> None:
    """The step recorded as record_vs_msprobe.record_one records the corpus: seeded, then built and run."""
    import training_steps
    from record_vs_msprobe import record_with

    torch.manual_seed(0)
    net, step = training_steps._block(torch.float32, autocast=False)  # the autocast step's twin: same draws
    out = Path(tempfile.mkdtemp()) / task
    record_with("msprobe", net, step, task, out)
    (proc,) = (out / "step0").iterdir()
    target = HERE / f"block_fp32_{task}" / "step0" / proc.name  # proc<pid>: pairs with the corpus's one
    shutil.rmtree(target.parent.parent, ignore_errors=True)
    shutil.copytree(proc, target, ignore=shutil.ignore_patterns("stack.json", "construct.json"))


if __name__ == "__main__":
    tasks = sys.argv[1:] or ["statistics", "tensor"]
    if len(tasks) == 1:
        record(tasks[0])
    else:  # msprobe's debugger is one per process: each task in a process of its own
        for name in tasks:
            subprocess.run([sys.executable, __file__, name], check=True)
