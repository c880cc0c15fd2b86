"""Record FSDP2 with activation checkpointing and CPU offload, as issue 51's users train (its corpus).

Run it in the venv that has msprobe (mindstudio-probe 26.2, torch 2.13 CPU), from the repository root:

    .venv/bin/python tests/data/recipes/msprobe_venv.py -- tests/data/sharded/make_ckpt_offload_steps.py [STEP ...]
    (PYTHONPATH=. for the step precheck records)

2 gloo ranks train llama_model.py's decoder (two layers, two sequences per rank) one step: each layer wrapped by
``checkpoint_wrapper`` (torch's non-reentrant activation checkpointing, as torchtitan applies it) and then
``fully_shard(layer, offload_policy=CPUOffloadPolicy(pin_memory=False))``, the root ``fully_shard`` with the same
policy, clip_grad_norm_ and SGD (its step on the offloaded CPU shards). ``CPUOffloadPolicy()`` as written in the
docs (``pin_memory=True``) refuses a CPU-only run on torch 2.13: FSDP2 pins each shard, and pinning asks for an
accelerator ("Cannot access accelerator device when none is available"); without pinning the policy runs (the
parameters' shards live on the CPU, FSDP2 copies them to the device, here the CPU, for each all-gather).

- fsdp2_ckpt_offload_statistics_msprobe: the step recorded by msprobe (statistics task, level L1, from the first
  forward to the optimizer's step). msprobe 26.2 stops recording in the first layer's recompute during the
  backward: the dump's last record is a forward with no output (precheck.dump.records.ends_early says so);
- fsdp2_ckpt_offload_statistics_precheck: the same step recorded by precheck.record, the whole step (the
  recomputed forwards recorded as calls like any other).

Each run also trains the step bare (no recorder): every rank's loss, and the sum of its parameters after the
step, must be bit-identical bare and recorded (the recipe stops otherwise). stack.json and construct.json are
left out (run_ut reads neither).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import llama_model  # noqa: E402
from make_2d_steps import _step  # noqa: E402  (forward, backward, clip_grad_norm_, the optimizer's step)
from make_collective_steps import _recorder, keep_dump  # noqa: E402  (msprobe's debugger, precheck.record)

STEPS = {  # step -> its recorder (statistics task)
    "fsdp2_ckpt_offload_statistics_msprobe": "msprobe",
    "fsdp2_ckpt_offload_statistics_precheck": "precheck",
}
WORLD = 2


def sharded() -> torch.nn.Module:
    """llama_model's decoder, each layer checkpointed then fully_shard'ed with CPU offload, then the root."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    torch.manual_seed(0)
    model = llama_model.Llama()
    offload = CPUOffloadPolicy(pin_memory=False)  # pinning needs an accelerator (see the docstring)
    for i, layer in enumerate(model.layers):
        wrapped = checkpoint_wrapper(layer)  # CheckpointImpl.NO_REENTRANT: checkpoint(..., use_reentrant=False)
        fully_shard(wrapped, offload_policy=offload)
        model.layers[i] = wrapped
    fully_shard(model, offload_policy=offload)
    return model


def rank_main(rank: int, out: str, recorder: str | None) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29690 + (recorder is not None)))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    model = sharded()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ids, labels = llama_model.batch(rank)
    if recorder is None:
        loss = _step(model, optimizer, ids, labels)
    else:
        with _recorder(recorder, f"{out}/dump", "statistics", rank):
            loss = _step(model, optimizer, ids, labels)
    total = sum(p.detach().full_tensor().double().sum().item() for p in model.parameters())
    Path(out, f"loss{rank}.txt").write_text(f"{loss.hex()} {total.hex()}\n")
    dist.barrier()
    dist.destroy_process_group()


def _trained(recorder: str | None) -> tuple[str, list[str]]:
    out = tempfile.mkdtemp()
    mp.spawn(rank_main, args=(out, recorder), nprocs=WORLD)
    return out, [Path(out, f"loss{r}.txt").read_text() for r in range(WORLD)]


def record(name: str) -> None:
    _, bare = _trained(None)
    out, recorded = _trained(STEPS[name])
    if bare != recorded:
        sys.exit(f"{name}: losses or parameters recorded {recorded} differ from bare {bare}")
    print(name, "losses and parameters bit-identical bare and recorded:", " ".join(x.split()[0] for x in bare))
    keep_dump(out, HERE / name)


if __name__ == "__main__":
    for step in sys.argv[1:] or list(STEPS):
        record(step)
