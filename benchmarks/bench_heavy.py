"""Heavy records: precheck against the floor and the incumbent on a LLaMA-style bf16 training step at real layer
sizes (benchmarks/heavy_model.py: hidden 1024, intermediate 2816, 4 layers, batch 2, sequence 256).

    python benchmarks/bench_heavy.py --venv VENV [--dump DIR] [--repeat 3] [--msprobe]

VENV has torch 2.13 and mindstudio-probe (``VENV=$(.venv/bin/python tests/data/recipes/msprobe_venv.py)`` makes it); it
records the dump into DIR (default /tmp/precheck-heavy) when DIR holds none, through tests/data/recipes/make_dump.py,
and with ``--msprobe`` runs the incumbent's acc_check through tests/data/recipes/msprobe_cpu.py.

Every tool runs as the command a user types, in one interleaved window (each repeat runs each tool once), and is
measured by its wall time and by the peak resident memory of its whole process tree (sampled every 20 ms, the sum
over the process and its descendants):
- floor: this file's ``floor`` command: load each record's inputs once, run the call in the recorded dtype and
  in float64, both backwards from the recorded gradients, and one cosine + max-abs pass per output and gradient;
  once with one intra-op thread (what one worker has: ``-n 1`` is held against it) and once with torch's default,
  a thread per core (what the machine can do: ``-n 2`` is held against it);
- the floor with the honest kernel (``floor --honest``, one thread): each call a third time with its bf16/fp16
  tensors raised to float32, as precheck's honest kernel runs it (the default standard's yardstick); precheck runs
  it only where a verdict asks, the floor on every call, so this is its most;
- precheck ``run_ut -n 1`` and ``-n 2``;
- msprobe ``acc_check`` (``--msprobe``).

``--isa avx2`` runs every tool on torch's AVX2 kernels (``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2``):
on a CPU with native bf16 (AVX-512 BF16, AMX) that is what an AVX2-only CPU computes with, bf16 emulated.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from detection_honest import decode
from process_tree import measure

HERE = Path(__file__).resolve().parent
TOOLS = HERE.parent / "tests" / "data" / "recipes"  # make_dump.py, msprobe_cpu.py


def _cast(value, dtype: torch.dtype | None):
    """Floating tensors in ``dtype`` (None: as recorded), each a fresh leaf that needs a gradient."""
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(dtype or value.dtype).requires_grad_()
    return value


def _leaves(value) -> list[torch.Tensor]:
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _leaves(v)]
    return [value] if isinstance(value, torch.Tensor) else []


def _cosine_max_abs(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    a, b = a.detach().double().reshape(-1), b.detach().double().reshape(-1)
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0)), float((a - b).abs().max())


def _side(func, args, kwargs, grads, dtype):
    """One side of one call: its outputs and its input gradients."""
    args, kwargs = _cast(args, dtype), {k: _cast(v, dtype) for k, v in kwargs.items()}
    outs = _leaves(func(*args, **kwargs))
    inputs = [t for t in _leaves([args, list(kwargs.values())]) if t.requires_grad]
    pairs = [(o, g.to(o.dtype)) for o, g in zip(outs, grads) if o.requires_grad and g is not None]
    if not pairs or not inputs:
        return outs, []
    got = torch.autograd.grad([o for o, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True)
    return outs, [g for g in got if g is not None]


def floor(dump_json: Path, honest: bool = False) -> int:
    """The floor's work on every record with a registry entry: returns how many calls it made. ``honest``: each
    call also in float32 where it holds bf16/fp16 (the honest kernel), graded against the golden too."""
    from api_registry import lookup

    data = json.loads(dump_json.read_text())["data"]
    folder = dump_json.parent / "dump_tensor_data"
    calls = 0
    for key, record in data.items():
        entry = lookup(key.rsplit(".", 2)[0]) if key.endswith(".forward") else None
        if entry is None:
            continue
        args = decode(record.get("input_args", []), folder)
        kwargs = {k: decode(v, folder) for k, v in record.get("input_kwargs", {}).items()}
        backward = data.get(key.removesuffix(".forward") + ".backward", {})
        grads = _leaves(decode(backward.get("input", []), folder)) if backward else []
        try:
            target = _side(entry.func, args, kwargs, grads, None)
            golden = _side(entry.func, args, kwargs, grads, torch.float64)
            sides = [target, _side(entry.func, args, kwargs, grads, torch.float32)] if honest else [target]
        except Exception:  # a call the floor cannot make is left out of it, as precheck reports it
            continue
        for side in sides:
            for t, g in zip(side[0] + side[1], golden[0] + golden[1]):
                if t.is_floating_point() and t.shape == g.shape and t.numel():
                    _cosine_max_abs(t, g)
        calls += 1
    return calls


def record(venv: Path, into: Path) -> Path:
    """The dump's dump.json, recorded with msprobe in ``venv`` unless ``into`` holds one."""
    found = sorted(into.glob("step0/*/dump.json"))
    if not found:
        into.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(HERE)}
        cmd = [str(venv / "bin" / "python"), str(TOOLS / "make_dump.py"), "heavy_model:llama", "bf16", "tensor"]
        subprocess.run([*cmd, str(into)], check=True, env=env, cwd=HERE)
        found = sorted(into.glob("step0/*/dump.json"))
    return found[0]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="bench", choices=["bench", "floor"])
    parser.add_argument("dump_json", nargs="?", type=Path, help="floor: the dump.json to run")
    parser.add_argument("--threads", type=int, help="floor: torch's intra-op threads (default: torch's own)")
    parser.add_argument("--venv", type=Path, help="a venv with torch 2.13 and mindstudio-probe (records the dump)")
    parser.add_argument("--dump", type=Path, help="the dump's folder (default: precheck-heavy in the temp folder)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--msprobe", action="store_true", help="also time msprobe's acc_check (needs --venv)")
    parser.add_argument("--honest", action="store_true", help="floor: also run each call as the honest kernel")
    parser.add_argument("--isa", choices=["native", "avx2"], default="native", help="the CPU kernels every tool uses")
    parser.add_argument("--target", choices=["device", "recorded"], default="device", help="precheck's --target")
    return parser


STARTUP = "import precheck.scheduling.preload, os; os._exit(0)"  # what a worker imports before its first case


AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def main() -> None:
    args = build_parser().parse_args()
    if args.command == "floor":
        if args.threads:
            torch.set_num_threads(args.threads)
        print(floor(args.dump_json, args.honest), "calls")
        return
    folder = args.dump or Path(tempfile.gettempdir()) / "precheck-heavy"
    dump = record(args.venv, folder) if args.venv else next(folder.glob("step0/*/dump.json"), None)
    if dump is None:
        sys.exit(f"{folder}: no dump; give --venv to record one")
    out = Path(tempfile.mkdtemp())
    tools = {
        "floor 1 thread": [sys.executable, __file__, "floor", str(dump), "--threads", "1"],
        "floor": [sys.executable, __file__, "floor", str(dump)],
        "floor+honest 1t": [sys.executable, __file__, "floor", str(dump), "--threads", "1", "--honest"],
        "precheck -n 1": [sys.executable, "-m", "precheck", "run_ut", "-api_info", str(dump), "-o", str(out), "-q"],
        "precheck -n 2": [sys.executable, "-m", "precheck", "run_ut", "-api_info", str(dump), "-o", str(out), "-q"],
    }
    tools["precheck -n 1"] += ["-n", "1", "--target", args.target]
    tools["precheck -n 2"] += ["-n", "2", "--target", args.target]
    tools["start-up"] = [sys.executable, "-c", STARTUP]
    if args.msprobe:
        acc = [str(args.venv / "bin" / "python"), str(TOOLS / "msprobe_cpu.py"), "acc_check", "-api_info"]
        tools["msprobe"] = [*acc, str(dump), "-o", str(out)]
    env = {**os.environ, **AVX2} if args.isa == "avx2" else None
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in tools}
    for _ in range(args.repeat):
        for name, cmd in tools.items():
            runs[name].append(measure(cmd, env))
    walls = {name: statistics.median(w for w, _ in r) for name, r in runs.items()}
    print(f"{'tool':16} {'wall s':>8} {'x floor':>8} {'x floor 1 thread':>17} {'peak MiB':>9}")
    for name, r in runs.items():
        ratios = f"{walls[name] / walls['floor']:8.2f} {walls[name] / walls['floor 1 thread']:17.2f}"
        print(f"{name:16} {walls[name]:8.2f} {ratios} {max(m for _, m in r):9.0f}")
    print(f"-n 2 speed-up over -n 1: {walls['precheck -n 1'] / walls['precheck -n 2']:.2f}x")
    # Amdahl: -n 1 is the start-up and every case one after the other; two workers can at best halve the cases.
    startup, cases = walls["start-up"], walls["precheck -n 1"] - walls["start-up"]
    print(
        f"ceiling of -n 2's speed-up, the start-up ({startup:.2f} s) once and the cases ({cases:.2f} s) halved: "
        f"{walls['precheck -n 1'] / (startup + cases / 2):.2f}x"
    )
    print(f"-n 1 / the floor with the honest kernel: {walls['precheck -n 1'] / walls['floor+honest 1t']:.2f}x")
    if "msprobe" in walls:
        print(f"msprobe / precheck -n 1: {walls['msprobe'] / walls['precheck -n 1']:.2f}x")


if __name__ == "__main__":
    main()
