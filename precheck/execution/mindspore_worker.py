"""MindSpore's side of ``--target mindspore``: runs recorded MindSpore calls in a Python that has MindSpore.

MindSpore 2.10 pins numpy<2 and pandas<3, which precheck's own environment does not, so this file runs as a
script under MindSpore's interpreter (``PRECHECK_MINDSPORE_PYTHON``) and imports nothing but the standard
library, numpy and MindSpore. It reads one request per line on stdin and answers one line on stdout:

    {"api": "Mint.softmax", "args": [...], "kwargs": [[name, value], ...], "grad": [0], "inputs": "in.npz",
     "out": "out.npz", "device": "CPU"}
    -> {"outputs": [{"dtype": "Float32"} | {"value": 1.5} | null, ...], "grads": [0]} or {"error": "..."} or
       {"unsupported": "..."}

Tensors travel in .npz files (bf16 widened to float32, named by their dtype beside). Arguments are JSON lists
and scalars, keyword arguments a list of [name, value] pairs, and every dict one tagged value: ``{"$tensor": k}``
is tensor k, ``{"$dtype": "Float16"}`` a MindSpore dtype, ``{"$slice": [a, b, c]}`` a slice, ``{"$ellipsis":
true}`` the ellipsis (a keyword argument named ``dtype`` is never taken for a dtype). The API
is looked up among mint, mint.nn.functional and Tensor's methods; precheck only sends names it maps to PyTorch.

The worker leads a process group of its own; its first argument is the read end of precheck's lifeline pipe. When
the process that started it dies, however (a pool worker killed past a case's timeout), the pipe closes and a
watchdog process kills the whole group: the worker, hung or not, and whatever MindSpore started.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import numpy as np

_MODULES = {"Mint": "mint", "MintFunctional": "mint.nn.functional"}
_UNSUPPORTED = ("unregistered", "not supported", "not support", "unsupported")


def _resolve(ms, api: str):
    prefix, _, name = api.partition(".")
    if not name.isidentifier() or name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
        raise LookupError(f"not a MindSpore API name: {api!r}")
    if prefix == "Tensor":
        method = getattr(ms.Tensor, name, None)
        if method is None:
            raise LookupError(f"MindSpore's Tensor has no method {name}")
        return lambda self, *args, **kwargs: getattr(self, name)(*args, **kwargs)
    if prefix not in _MODULES or name.startswith("_"):
        raise LookupError(f"not a mint API: {api!r}")
    module = ms
    for part in _MODULES[prefix].split("."):
        module = getattr(module, part)
    func = getattr(module, name, None)
    if not callable(func):
        raise LookupError(f"mindspore.{_MODULES[prefix]} has no function {name}")
    return func


def _value(ms, raw, tensors):
    """An argument as MindSpore takes it: lists are tuples, and every dict is one tagged value."""
    if isinstance(raw, list):
        return tuple(_value(ms, v, tensors) for v in raw)
    if not isinstance(raw, dict):
        return raw
    ((tag, value),) = raw.items()
    if tag == "$tensor":
        return tensors[value]
    if tag == "$dtype":
        return getattr(ms, _MS_DTYPES[value])
    if tag == "$slice":
        return slice(*value)
    if tag == "$ellipsis":
        return Ellipsis
    raise ValueError(f"unknown argument tag {tag!r}")


_MS_DTYPES = {
    "Float16": "float16",
    "Float32": "float32",
    "Float64": "float64",
    "BFloat16": "bfloat16",
    "Int8": "int8",
    "Int16": "int16",
    "Int32": "int32",
    "Int64": "int64",
    "UInt8": "uint8",
    "Bool": "bool_",
}


def _dtype_name(ms, dtype) -> str:
    for name, attr in _MS_DTYPES.items():
        if dtype == getattr(ms, attr):
            return name
    return str(dtype)


def _flat(result) -> list:
    if isinstance(result, (tuple, list)):
        return [leaf for item in result for leaf in _flat(item)]
    return [result]


def _saved(ms, values: list, prefix: str, arrays: dict) -> list:
    """Each value described for the answer; tensors into ``arrays`` (bf16 widened: numpy has no bf16)."""
    described = []
    for i, v in enumerate(values):
        if isinstance(v, ms.Tensor):
            name = _dtype_name(ms, v.dtype)
            arrays[f"{prefix}{i}"] = (v.astype(ms.float32) if name == "BFloat16" else v).asnumpy()
            described.append({"dtype": name})
        elif isinstance(v, (bool, int, float)) or v is None:
            described.append(None if v is None else {"value": v})
        else:
            described.append({"value": repr(v)})
    return described


def run(ms, request: dict) -> dict:
    func = _resolve(ms, request["api"])
    with np.load(request["inputs"], allow_pickle=False) as data:
        kinds = request["tensors"]
        tensors = [ms.Tensor(data[f"t{k}"]).astype(getattr(ms, _MS_DTYPES[kind])) for k, kind in enumerate(kinds)]
    need = request.get("grad") or []

    def call(*diff):
        given = list(tensors)
        if len(diff) != len(need):  # zip(strict=True), which Python 3.9 lacks: this script imports no precheck
            raise ValueError(f"{len(diff)} differentiable inputs given for {len(need)}")
        for k, t in zip(need, diff):
            given[k] = t
        kwargs = {name: _value(ms, v, given) for name, v in request["kwargs"]}
        return func(*_value(ms, request["args"], given), **kwargs)

    arrays: dict = {}
    grads_given = request.get("grad_outputs")
    if need and grads_given is not None:
        with np.load(request["inputs"], allow_pickle=False) as data:
            sens = [
                None if kind is None else ms.Tensor(data[f"s{i}"]).astype(getattr(ms, _MS_DTYPES[kind]))
                for i, kind in enumerate(grads_given)
            ]
        result, vjp = ms.vjp(call, *[tensors[k] for k in need])
        outs = _flat(result)
        # An output no recorded gradient flowed into (the indices of a max) is fed zeros.
        sens = [sens[i] if i < len(sens) and sens[i] is not None else ms.ops.zeros_like(o) for i, o in enumerate(outs)]
        grads = vjp(sens[0] if not isinstance(result, (tuple, list)) else tuple(sens))
        grads = grads if isinstance(grads, tuple) else (grads,)
        answer = {"grads": _saved(ms, list(grads), "g", arrays)}
    else:
        outs, answer = _flat(call()), {}
    answer["outputs"] = _saved(ms, outs, "o", arrays)
    np.savez(request["out"], **arrays)
    return answer


def _die_with_owner(lifeline: int) -> None:
    """Fork the watchdog: it waits for the lifeline's end, then kills this process group. A process, not a thread:
    a kernel that hangs holding the GIL cannot stop it. It keeps no other descriptor, so the worker's death still
    closes the answers' pipe for precheck."""
    if os.fork() == 0:
        try:
            os.closerange(0, lifeline)
            os.closerange(lifeline + 1, os.sysconf("SC_OPEN_MAX"))
            while os.read(lifeline, 1):
                pass
        finally:
            os.killpg(0, signal.SIGKILL)
    os.close(lifeline)


def main() -> None:
    if len(sys.argv) > 1:
        _die_with_owner(int(sys.argv[1]))
    # Answers go to the stdout precheck reads; whatever MindSpore prints goes to stderr instead.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import mindspore as ms

    ms.set_context(mode=ms.PYNATIVE_MODE, pynative_synchronize=True)
    device = None
    print(json.dumps({"ready": ms.__version__}), file=answers, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request.get("device") != device:
                device = request.get("device")
                ms.set_device(device)
            answer = run(ms, request)
        except Exception as e:  # the call's failure is its answer; the worker serves the next call
            text = (str(e).strip().splitlines() or [""])[0][:300]
            why = f"{type(e).__name__}: {text}" if text else type(e).__name__
            answer = {"unsupported": why} if any(u in str(e) for u in _UNSUPPORTED) else {"error": why}
        print(json.dumps(answer), file=answers, flush=True)


if __name__ == "__main__":
    main()
