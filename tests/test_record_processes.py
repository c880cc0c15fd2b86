"""``precheck record -- COMMAND`` reaches every Python process of a training: each rank a launcher starts records
under ``rank<R>`` (torchrun's, ``torch.multiprocessing.spawn``'s), the launcher itself writes nothing, and a
program's own sitecustomize is still the one it imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import DATA

from precheck.recording.auto import ENV, options_env
from precheck.recording.launch import BOOT

DDP = DATA / "record" / "train_ddp.py"


def _record(tmp_path: Path, *command: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "precheck", "record", "-o", str(tmp_path / "dump"), "--", sys.executable, *command]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)


def _ranks_recorded(tmp_path: Path, done: subprocess.CompletedProcess) -> None:
    """Both ranks' step 0, whole, and nothing else: no dump of a launcher."""
    assert done.returncode == 0, done.stderr
    dumps = sorted((tmp_path / "dump").rglob("dump.json"))
    assert [p.relative_to(tmp_path / "dump").parts[:2] for p in dumps] == [("step0", "rank0"), ("step0", "rank1")]
    for dump in dumps:
        data = json.loads(dump.read_text())["data"]
        assert {"Functional.linear.0.forward", "Functional.linear.0.backward"} <= set(data)
    assert "2 dump(s) written" in done.stdout


def test_torchrun_records_each_rank_and_its_agent_nothing(tmp_path: Path) -> None:
    """The agent used to start the recorder, take PRECHECK_RECORD from its ranks and write one empty dump. Rank
    0's DataLoader worker, spawned, calls torch and records nothing."""
    run = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone", str(DDP)]
    _ranks_recorded(tmp_path, _record(tmp_path, *run))


def test_the_ranks_of_mp_spawn_record_and_the_parent_that_spawns_nothing(tmp_path: Path) -> None:
    _ranks_recorded(tmp_path, _record(tmp_path, str(DDP), str(tmp_path / "rendezvous")))


def test_the_programs_own_sitecustomize_is_the_one_it_imports(tmp_path: Path) -> None:
    """precheck's boot shadows it on the path and runs it: ``from sitecustomize import setup`` failed under
    record only."""
    (tmp_path / "sitecustomize.py").write_text("import os\nsetup = 'the program\\'s', os.environ['PRECHECK_RECORD']\n")
    program = (
        "import sys\nfrom sitecustomize import setup\n"
        "print(setup[0], any(type(f).__name__ == '_TorchWatch' for f in sys.meta_path))"
    )
    env = {**os.environ, ENV: options_env(tmp_path, "tensor", [0], "FOCUS")}
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT), str(tmp_path), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["the", "program's", "True"]  # its module, and precheck's boot ran too
