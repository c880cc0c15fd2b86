"""Record the steps tests/test_record.py and tests/test_record_mix.py compare precheck.record with, by msprobe 26.2.

Run it in the throwaway venv that has msprobe (mindstudio-probe 26.2, torch 2.13), from the repository root, with
the CPU kernels pinned to AVX2 as tests/conftest.py pins them for the tests that record the same steps:

    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \\
        .venv/bin/python tests/data/recipes/msprobe_venv.py --pip transformers torchvision -- \\
            tests/data/record/make_fixtures.py [DUMP ...]

It writes, each with the msprobe_config.json it used:
- tests/data/record/edge_{tensor,statistics,all_statistics}/: edge_model.py's step at level L1 (step0/procNNNN/
  dump.json, stack.json, construct.json, dump_tensor_data/), the tensor and statistics tasks at msprobe's default
  risk level (no ``risk_level`` key: FOCUS) and the statistics task at risk level ALL;
- tests/data/record_mix/mix_{tensor,statistics}/: record_mix/mix_model.py's step at level mix, without stack.json
  (its frames are the recorder's own, not compared) and without the tensor task's dump_tensor_data/ (201 files,
  850 KB; the test checks that precheck writes a file for each ``data_name`` of msprobe's dump.json).
- tests/data/record/autocast_{bf16_tensor,fp16_statistics}/: autocast_model.py's step under torch.autocast("cpu")
  to bf16 (tensor task) and to fp16 (statistics task), recorded by ``precheck.record`` (msprobe's dump, written
  without msprobe: ``make_fixtures.py autocast_bf16_tensor`` runs in the project's own venv), without stack.json
  and construct.json (tests/test_autocast.py reads them).
- tests/data/record/ddp_gloo/step0/rank{0,1}/: a 2-rank DDP step on gloo with explicit collectives, recorded by
  precheck.record in each rank (msprobe's collective records are the model: output = the arguments once run),
  without stack.json and construct.json: ``python tests/data/record/make_fixtures.py ddp_gloo`` (any venv with
  torch; it runs tests/data/record/ddp_step.py).
- tests/data/steps/STEP_TASK_WHO/: the corpus of training steps as users write them (issue 37): each step of
  benchmarks/training_steps.py (autocast bf16, fp16 autocast with a GradScaler, overflowing or not, clipping,
  checkpointing, LSTM/GRU; ConvNeXt, Swin, BERT, Mistral, Gemma, BART, Whisper) recorded by msprobe and by
  precheck.record (benchmarks/record_vs_msprobe.py's recording: the whole step, level L1), in the statistics task,
  and the hand-written steps in the tensor task too, without stack.json and construct.json:
  ``make_fixtures.py steps`` (in the msprobe venv, which has transformers and torchvision), or one of them by name
  (``make_fixtures.py bert_statistics_msprobe``). tests/test_training_steps.py runs run_ut on them.
Each is recorded in its own interpreter (msprobe's PrecisionDebugger is one per process) the way make_dump.py
records: ``start(model); run().backward(); stop(); step()``.

It also writes the steps of train_steps.py, recorded by ``precheck.record`` (msprobe is not needed: run those
with the project's venv and ``PYTHONPATH=.``), tensor task, without stack.json and construct.json (run_ut reads
neither), which tests/test_train_steps.py grades:
- tests/data/record/clip_fp32_tensor/: an fp32 step with clip_grad_norm_ (``Torch._foreach_norm``);
- tests/data/record/scaler_fp16_tensor/: an autocast fp16 step with a GradScaler whose gradients overflow.

The cross-precision twins of tests/test_compare_precision.py are recorded by ``precheck.record`` itself, in the
project's venv (no msprobe needed), each in its own interpreter too:

    PYTHONPATH=. .venv/bin/python tests/data/record/make_fixtures.py gpt_fp32_tensor ...

- tests/data/record/gpt_{fp32,bf16,bf16_silu6}_{tensor,statistics}/: gpt_model.py's step in fp32, under autocast
  bf16, and under autocast bf16 with a 6-bit SiLU in F.silu's place, without stack.json (each side's folder is
  ``step0/proc<pid>``, the pid its own: compare pairs them all the same).
- tests/data/record/gpt_seed7_{fp32,bf16}_statistics/: the clean twins drawn with seed 7, whose layer_norm bias
  gradient cancels to 1/16 of its incoming gradient's norm (compare named it before issue 47).
"""

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
MIX = HERE.parent / "record_mix"
# dump -> (folder, model module, level, task, risk level (None: no risk_level key, msprobe's FOCUS), left out)
DUMPS = {
    "edge_tensor": (HERE, "edge_model", "L1", "tensor", None, ()),
    "edge_statistics": (HERE, "edge_model", "L1", "statistics", None, ()),
    "edge_all_statistics": (HERE, "edge_model", "L1", "statistics", "ALL", ()),
    "mix_tensor": (MIX, "mix_model", "mix", "tensor", None, ("stack.json", "dump_tensor_data")),
    "mix_statistics": (MIX, "mix_model", "mix", "statistics", None, ("stack.json",)),
}
# dump -> (autocast dtype, task): recorded by precheck.record, left out stack.json and construct.json
AUTOCAST = {"autocast_bf16_tensor": ("bfloat16", "tensor"), "autocast_fp16_statistics": ("float16", "statistics")}
STEPS = ("clip_fp32_tensor", "scaler_fp16_tensor")  # train_steps.STEPS, recorded by precheck.record
BENCHMARKS = HERE.parent.parent.parent / "benchmarks"
CORPUS_DIR = HERE.parent / "steps"
HAND_WRITTEN = (
    "block_autocast_bf16", "block_bf16", "conv_gradscaler_fp16", "conv_overflow_fp16", "checkpoint_mlp", "rnn_lstm_gru"
)  # fmt: skip
LIBRARY = ("convnext", "swin", "bert", "mistral", "gemma", "bart", "whisper")
# corpus dump -> (step, task, recorder)
CORPUS = {
    f"{step}_{task}_{who}": (step, task, who)
    for step in (*HAND_WRITTEN, *LIBRARY)
    for task in ("statistics", "tensor")
    for who in ("msprobe", "precheck")
    if task == "statistics" or step in HAND_WRITTEN
}


def record_corpus(name: str) -> None:
    """Record one step of the corpus with record_vs_msprobe.py's recording, in this interpreter."""
    sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS.parent)]  # its libraries, and this checkout's precheck
    from record_vs_msprobe import record_one

    step, task, who = CORPUS[name]
    out = Path(tempfile.mkdtemp()) / name
    record_one(who, step, "fp32", task, out)
    copy_in(out, CORPUS_DIR / name)


def record_autocast(name: str) -> None:
    """Record one autocast step with precheck.record, in this interpreter."""
    import torch

    sys.path.insert(0, str(HERE))
    from autocast_model import build

    dtype, task = AUTOCAST[name]
    _, run = build(getattr(torch, dtype))
    record_by_precheck(name, task, lambda: run().backward())


def record_step(name: str) -> None:
    """Record one step of train_steps.py with precheck.record, in this interpreter."""
    sys.path.insert(0, str(HERE))
    from train_steps import STEPS as steps

    record_by_precheck(name, "tensor", steps[name])


def record_by_precheck(name: str, task: str, step: Callable[[], object]) -> None:
    """``step`` recorded by precheck.record into tests/data/record/NAME, without stack.json and construct.json."""
    import precheck

    out = Path(tempfile.mkdtemp()) / name
    with precheck.record(out, task=task):
        step()
    copy_in(out, HERE / name)


def copy_in(out: Path, target: Path) -> None:
    """A recorded dump into the tests' data, without stack.json and construct.json (run_ut reads neither) and
    without the run_ut/ folder record_vs_msprobe.py leaves beside it (precheck's output, made again on demand)."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(out, target, ignore=shutil.ignore_patterns("stack.json", "construct.json", "run_ut"))
    print("wrote", target)


# dump -> (gpt_model.build's precision, task): recorded by precheck.record
RECORDED = {f"gpt_{p}_{t}": (p, t, 0) for p in ("fp32", "bf16", "bf16_silu6") for t in ("tensor", "statistics")}
RECORDED |= {f"gpt_seed7_{p}_statistics": (p, "statistics", 7) for p in ("fp32", "bf16")}


def record_gpt(name: str) -> None:
    """Record one of gpt_model.py's twins with ``precheck.record``, in this interpreter."""
    import torch.nn.functional as F

    import precheck

    sys.path.insert(0, str(HERE))
    import gpt_model

    precision, task, seed = RECORDED[name]
    model, run = gpt_model.build(precision, seed)
    if precision == "bf16_silu6":
        F.silu = gpt_model.coarse_silu  # before the recorder wraps F.silu: recorded as Functional.silu
    target = HERE / name
    shutil.rmtree(target, ignore_errors=True)
    with precheck.record(target, task=task) as recorder:
        run().backward()
    for written in recorder.written:
        (written.parent / "stack.json").unlink()
    print("wrote", target)


def record(name: str) -> None:
    """Record one dump, in this interpreter."""
    import importlib

    import torch
    from msprobe.pytorch import PrecisionDebugger

    folder, model_module, level, task, risk, left_out = DUMPS[name]
    sys.path.insert(0, str(folder))
    build = importlib.import_module(model_module).build
    out = Path(tempfile.mkdtemp()) / name
    config = {"task": task, "dump_path": str(out), "rank": [], "step": [0], "level": level}
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
    target = folder / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(out, target, ignore=shutil.ignore_patterns(*left_out))
    shutil.copy(config_path, target / "msprobe_config.json")
    print("wrote", target)


def record_ddp() -> None:
    """The 2-rank DDP step, recorded by precheck in two spawned ranks, trimmed to what tests/test_ranks.py reads."""
    out = Path(tempfile.mkdtemp())
    subprocess.run([sys.executable, str(HERE / "ddp_step.py"), str(out)], check=True)
    target = HERE / "ddp_gloo"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(out, target, ignore=shutil.ignore_patterns("stack.json", "construct.json"))
    print("wrote", target)


if __name__ == "__main__":
    if sys.argv[1:] == ["ddp_gloo"]:
        record_ddp()
        sys.exit()
    for dump in (CORPUS if sys.argv[1:] == ["steps"] else sys.argv[1:]) or [*DUMPS, *STEPS]:
        if len(sys.argv) == 2 and dump != "steps":
            by_precheck = {**dict.fromkeys(AUTOCAST, record_autocast), **dict.fromkeys(STEPS, record_step)}
            by_precheck.update({**dict.fromkeys(RECORDED, record_gpt), **dict.fromkeys(CORPUS, record_corpus)})
            by_precheck.get(dump, record)(dump)
        else:
            subprocess.run([sys.executable, __file__, dump], check=True)
