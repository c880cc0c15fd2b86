"""Record the steps of tests/test_record_pipeline.py by msprobe 26.2 (issue 51, items 2 and 6):

    .venv/bin/python tests/data/recipes/msprobe_venv.py -- tests/data/sharded/make_pipeline_record.py [STEP ...]
    (the msprobe venv has torch 2.13 and mindstudio-probe 26.2)

Each step runs its 2 ranks with mp.spawn on gloo (CPU), recorded by msprobe's PrecisionDebugger in the statistics
task (config: level L1, step [0], rank [], data_mode all), started at the top of the iteration and stopped before
the optimizer's update (pipeline_step.py, loss_parallel_step.py say where):

- pipeline_msprobe_names.json: the record names of each rank's dump.json, in order, of pipeline_step.py's
  ``gpipe``, ``1f1b`` and ``hand`` steps (torch.distributed.pipelining's ScheduleGPipe and Schedule1F1B over two
  stages of an MLP; the stages exchanging by hand with batch_isend_irecv).
- pipeline_hand_statistics_msprobe: the ``hand`` step's dump.json per rank, whose batch_isend_irecv records write
  each P2POp as a map of its op, peer, tag, group_id and tensor.
- loss_parallel_statistics_msprobe: loss_parallel_step.py's dump.json per rank: cross_entropy under
  ``loss_parallel()``, whose shape propagation msprobe records on FakeTensors.

stack.json and construct.json are left out (nothing reads them here).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
KINDS = ("gpipe", "1f1b", "hand")


def _recorded(script: str, args: list[str]) -> Path:
    """The step folder msprobe wrote for ``script`` run with ``args`` (its OUT made here)."""
    out = Path(tempfile.mkdtemp())
    config = out / "config.json"
    task = {"scope": [], "list": [], "data_mode": ["all"]}
    doc = {"task": "statistics", "dump_path": str(out / "dump"), "rank": [], "step": [0], "level": "L1"}
    config.write_text(json.dumps({**doc, "statistics": task}))
    subprocess.run([sys.executable, str(HERE / script), *args, str(out), "--msprobe", str(config)], check=True)
    return out / "dump" / "step0"


def _names(step: Path) -> dict[str, list[str]]:
    return {
        rank: list(json.loads((step / rank / "dump.json").read_text(encoding="utf-8"))["data"])
        for rank in ("rank0", "rank1")
    }


def _keep(step: Path, name: str) -> None:
    target = HERE / name
    shutil.rmtree(target, ignore_errors=True)
    for rank in ("rank0", "rank1"):
        (target / "step0" / rank).mkdir(parents=True)
        shutil.copy(step / rank / "dump.json", target / "step0" / rank / "dump.json")
    print("wrote", target)


def record(name: str) -> None:
    if name == "pipeline":
        names = {}
        for kind in KINDS:
            step = _recorded("pipeline_step.py", [kind])
            names[kind] = _names(step)
            if kind == "hand":
                _keep(step, "pipeline_hand_statistics_msprobe")
        path = HERE / "pipeline_msprobe_names.json"
        path.write_text(json.dumps(names, indent=1) + "\n", encoding="utf-8")
        print("wrote", path)
    elif name == "loss_parallel":
        _keep(_recorded("loss_parallel_step.py", []), "loss_parallel_statistics_msprobe")


if __name__ == "__main__":
    for step in sys.argv[1:] or ("pipeline", "loss_parallel"):
        record(step)
