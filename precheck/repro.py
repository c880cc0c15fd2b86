"""``precheck repro API_NAME``: one API's discrepancy as a standalone script that needs only torch.

The script and its inputs go to one folder: ``repro_<API>.py`` and ``<API>.inputs.pt`` (a dict of tensors by
argument place, loadable with ``weights_only=True``). Non-tensor arguments are written into the script as Python
literals. It runs the call on a device in the recorded dtypes and on the CPU in float64, feeds the recorded
gradients where the dump has a backward, and prints what differs, so a kernel owner can reproduce a finding
without msprobe or the dump. Where precheck is installed it also prints each output's verdict as run_ut grades
it and exits 1 on an error (a CI job or a bisect acts on it); without precheck, the numbers and exit code 3.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path
from typing import Any

import torch

from precheck.dump.records import DeviceArg, TensorSpec, load_dump
from precheck.dump.repro_check import MODULES, checked
from precheck.dump.repro_check import ReproError as ReproError  # repro's error, where callers catch it
from precheck.inputs.builder import builder_for
from precheck.paths import output_folder
from precheck.walk import placed

# Text from the dump (its directory, API and argument names, string arguments) enters this source only as literals
# written by repr(), never pasted into code, a docstring or a comment: a name may hold quotes and newlines.
_SCRIPT = '''"""Reproduces precheck's check of one recorded call: API, from the dump DUMP, calling FUNC.

Target: the call on DEVICE in the recorded dtypes. Golden: the same call on the CPU in float64.
Run: python <this script> [DEVICE]      (default cpu; e.g. cuda, npu:0)
"""
import math
import operator
import pathlib
import sys

import torch

API = {name!r}
DUMP = {dump!r}
FUNC = operator.attrgetter({attr!r})({module})
DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
T = torch.load(pathlib.Path(__file__).resolve().parent / {data!r}, weights_only=True)
NEEDS_GRAD = {needs_grad!r}
INPLACE = {inplace!r}


HALF = (torch.float16, torch.bfloat16)


def build(mode):
    """The call's arguments: "target" on DEVICE as recorded, "golden" on the CPU in float64, "honest" on the CPU
    with each bf16/fp16 tensor raised to float32 (run_ut's honest kernel, which the grader rounds once)."""
    leaves = {{}}
    golden = mode == "golden"

    def t(place):
        x = T[place]
        if golden and (x.is_floating_point() or x.is_complex()):
            x = x.to("cpu", torch.complex128 if x.is_complex() else torch.float64)
        elif mode == "honest":
            x = x.to("cpu", torch.float32 if x.dtype in HALF else x.dtype)
        else:
            x = x.to(DEVICE)
        x = x.clone()
        if place in NEEDS_GRAD:
            x.requires_grad_(True)
            leaves[place] = x
            return x.clone() if INPLACE else x
        return x

    def dt(dtype):
        if golden and dtype.is_floating_point:
            return torch.float64
        return torch.float32 if mode == "honest" and dtype in HALF else dtype

    device = torch.device(DEVICE if mode == "target" else "cpu")
    args = {args}
    kwargs = {kwargs}
    return args, kwargs, leaves


def flat(x):
    if isinstance(x, (tuple, list)) and not isinstance(x, torch.Size):
        return [leaf for v in x for leaf in flat(v)]
    return [x]


def run(mode):
    args, kwargs, leaves = build(mode)
    outputs = flat(FUNC(*args, **kwargs))
    grads = {{}}
    grad_outputs = {grad_outputs}
    pairs = [(o, g.to(o.device, o.dtype)) for o, g in zip(outputs, grad_outputs)
             if isinstance(o, torch.Tensor) and o.requires_grad and g is not None]
    if pairs and leaves:
        found = torch.autograd.grad([o for o, _ in pairs], list(leaves.values()), [g for _, g in pairs],
                                    allow_unused=True)
        grads = dict(zip(leaves, found))
    return outputs, grads


def report(label, target, golden):
    if not isinstance(target, torch.Tensor):
        print(f"{{label}}: target {{target!r}}, golden {{golden!r}}")
        return
    t = target.detach().cpu().double()
    g = golden.detach().cpu().double()
    err = (t - g).abs()
    rel = err / g.abs().clamp_min(torch.finfo(torch.float64).tiny)
    worst = int(err.nan_to_num(math.inf).argmax()) if err.numel() else 0
    print(f"{{label}}: {{tuple(t.shape)}} {{target.dtype}}: "
          f"max abs error {{float(err.max()) if err.numel() else 0:.6g}}"
          f" at flat index {{worst}} (target {{t.reshape(-1)[worst].item() if t.numel() else None!r}}, golden "
          f"{{g.reshape(-1)[worst].item() if g.numel() else None!r}}), max rel error "
          f"{{float(rel.max()) if rel.numel() else 0:.6g}}, non-finite mismatches "
          f"{{int((t.isfinite() != g.isfinite()).sum())}}")


def verdict(compared):
    """Each output graded as run_ut grades it, by precheck's grader where precheck is installed; the exit code
    says it: 1 where any output is an error, 3 where none could be graded (no precheck here), else 0."""
    try:
        import precheck
    except ImportError:
        print("verdict: not graded: precheck is not installed here (pip install precheck grades it as run_ut does)")
        return 3
    worst = 0
    honest_out, honest_grads = run("honest")
    honest = dict(labelled(honest_out, honest_grads))
    for label, t, g in compared:
        if not (isinstance(t, torch.Tensor) and isinstance(g, torch.Tensor)):
            continue
        h = honest.get(label)
        h = h.detach() if isinstance(h, torch.Tensor) and h.shape == t.shape else None
        c = precheck.grade(t.detach().cpu(), g.detach().cpu(), honest=h)
        print(f"verdict {{label}}: {{c.status}}" + (f": {{c.message}}" if c.message else ""))
        worst = max(worst, 1 if c.status == "error" else 0)
    print("verdict: error" if worst else "verdict: no output is an error")
    return worst


def labelled(outputs, grads):
    return [*((f"forward.output.{{i}}", o) for i, o in enumerate(outputs)),
            *((f"gradient of {{ascii(place)[1:-1]}}", g) for place, g in grads.items() if g is not None)]


target = dict(labelled(*run("target")))
compared = [(label, target[label], g) for label, g in labelled(*run("golden")) if target.get(label) is not None]
for label, t, g in compared:
    report(label, t, g)
sys.exit(verdict(compared))
'''


def safe_name(name: str) -> str:
    return re.sub(r"[^\w.\-]", "_", name)


# Bytes of a stem that leave room in a 255-byte file name for the longer of its two names (``<stem>.inputs.pt``;
# ``repro_<stem>.py`` is one byte shorter).
MAX_STEM = 255 - len(".inputs.pt")


def file_stem(name: str) -> str:
    """The stem of a record's two files: its safe name, or where that is too long for a file name (a key may be
    256 characters, and a letter of \\w up to 4 bytes) a cut of it and a hash of the whole name, so two long
    names that share their start stay two pairs of files."""
    stem = safe_name(name)
    if len(stem.encode()) <= MAX_STEM:
        return stem
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    room = MAX_STEM - len(digest) - 1
    return stem.encode()[:room].decode("utf-8", "ignore") + "_" + digest


def write_repro(api_name: str, api_info: str | os.PathLike, out_dir: str | os.PathLike, *, seed: int = 0) -> Path:
    """Write the script and its inputs for one API of a dump; returns the script's path."""
    dump = load_dump(api_info)
    names = dump.cases.names
    case, entry = checked(dump, api_name, names.index(api_name) if api_name in names else None)
    prefix, _, rest = case.api.partition(".")
    builder = builder_for(entry, case, dump.data_dir, seed=seed)
    builder.build(case.args, "input_args")
    builder.build(case.kwargs, "input_kwargs")
    if case.has_backward:
        builder.build(case.grad_outputs, "backward.input")
    out = output_folder(out_dir)
    stem = file_stem(case.name)
    data = f"{stem}.inputs.pt"
    with open(out / data, "wb") as f:  # an OSError names the file (torch's own open raises a RuntimeError)
        torch.save(builder.tensors, f)
    needs_grad = sorted(
        where
        for where, spec in placed(case.args, "input_args") + placed(case.kwargs, "input_kwargs")
        if isinstance(spec, TensorSpec)
        and spec.requires_grad
        and (spec.dtype.is_floating_point or spec.dtype.is_complex)
    )
    grad_outputs = _literal(case.grad_outputs, "backward.input", gradients=True) if case.has_backward else "[]"
    script = out / f"repro_{stem}.py"
    script.write_text(
        _SCRIPT.format(
            name=case.name,
            module=MODULES[prefix],
            attr=rest,
            dump=f"{dump.path.parent.name}/{dump.path.name}",
            data=data,
            needs_grad=set(needs_grad),
            inplace=entry.writes_input(case.args, case.kwargs),
            args=_literal(case.args, "input_args"),
            kwargs=_literal(case.kwargs, "input_kwargs"),
            grad_outputs=grad_outputs,
        ),
        encoding="utf-8",
    )
    return script


def _literal(tree: Any, where: str, gradients: bool = False) -> str:
    """Python source that rebuilds a decoded argument tree inside the script's ``build``."""
    if isinstance(tree, TensorSpec):
        return f"T[{where!r}]" if gradients else f"t({where!r})"
    if isinstance(tree, tuple):
        items = [_literal(v, f"{where}[{i}]", gradients) for i, v in enumerate(tree)]
        return ("[" + ", ".join(items) + "]") if gradients else "(" + "".join(f"{x}, " for x in items) + ")"
    if isinstance(tree, dict):
        return "{" + ", ".join(f"{k!r}: {_literal(v, f'{where}.{k}', gradients)}" for k, v in tree.items()) + "}"
    if isinstance(tree, torch.dtype):
        return f"dt({tree})"
    if isinstance(tree, DeviceArg):
        return "device"
    if isinstance(tree, torch.Size):
        return f"torch.Size({list(tree)!r})"
    if isinstance(tree, float) and not math.isfinite(tree):
        return f"float({str(tree)!r})"
    if tree is Ellipsis:
        return "..."
    return repr(tree)  # int, float, bool, str, None, slice
