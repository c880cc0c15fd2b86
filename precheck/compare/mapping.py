"""How a target record's name reads on the bench side: module paths renamed by a layer mapping (msprobe's
``-lm layer_mapping.yaml``), MindSpore API names as their PyTorch equivalents, dtypes spelled one way.

A layer mapping is msprobe's YAML: for a module class (``TopLayer`` for the model itself), which child names on
the target side are which on the bench side; a name may span levels (``a.b: c``)::

    TopLayer:
      network: model
    Block:
      fc_in: up
      norm: ln
    Attention:
      flash_attention_score: core.npu_fusion_attention

A name may also be an API called inside the class (``flash_attention_score``, ``norm.RmsNorm`` as ``RmsNorm``,
``sub.all_reduce`` for one called in a child): as msprobe applies it, an API record whose module (from the
construct.json beside the dump) is of that class, or lies under one by that path, reads as the bench's API of
the last name, whatever its prefix (``Mint.logical_or`` -> ``Tensor.__or__``). msprobe needs construct.json for
a layer mapping; without it only module paths are renamed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from precheck.compare.entries import CompareInputError
from precheck.dump.jsonstream import read_json
from precheck.dump.record_names import is_module, split_key

TOP_LAYER = "TopLayer"
MAX_CONSTRUCT = 256 << 20  # bytes: construct.json holds one short line per record
_MS_PREFIXES = {"Mint": "Torch", "MintFunctional": "Functional", "Tensor": "Tensor", "Functional": "Functional",
                "Primitive": "Torch", "Cell": "Module"}  # fmt: skip
_DTYPES = {"Float32": "torch.float32", "Float16": "torch.float16", "BFloat16": "torch.bfloat16",
           "Float64": "torch.float64", "Int64": "torch.int64", "Int32": "torch.int32", "Int16": "torch.int16",
           "Int8": "torch.int8", "UInt8": "torch.uint8", "Bool": "torch.bool", "Complex64": "torch.complex64",
           "Complex128": "torch.complex128"}  # fmt: skip


def torch_dtype(dtype: str | None) -> str | None:
    """A dtype in PyTorch's spelling ("BFloat16" -> "torch.bfloat16"); other spellings are kept."""
    return _DTYPES.get(dtype, dtype) if dtype else dtype


def load_layer_mapping(path: str | os.PathLike) -> dict[str, dict[str, str]]:
    """msprobe's layer_mapping.yaml as {class: {target child: bench child}}; CompareInputError says what is wrong."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except FileNotFoundError:
        raise CompareInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise CompareInputError(f"{path}: not a readable YAML file ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise CompareInputError(f"{path}: expected a map of module class -> {{target name: bench name}}")
    mapping = {}
    for cls, children in doc.items():
        for a, b in children.items():
            if not isinstance(a, str) or not isinstance(b, str) or not a or not b:
                raise CompareInputError(
                    f"{path}: under {str(cls)[:60]}, {str(a)[:60]}: {str(b)[:60]} is not name: name"
                )
        mapping[str(cls)] = dict(children)
    return mapping


@dataclass
class NameMap:
    """Translates target record keys to the bench's spelling."""

    layers: dict[str, dict[str, str]] = field(default_factory=dict)
    cross_framework: bool = False  # the target is MindSpore, the bench PyTorch
    classes: dict[str, str] = field(default_factory=dict)  # module path -> class, from the target's keys
    parents: dict[str, str] = field(default_factory=dict)  # record -> its module's record (construct.json)

    def learn(self, keys: Iterable[str], construct: Path | None = None) -> None:
        """Module classes by path, from the target's own module records (Module.<path>.<Class>.forward.N), and
        each record's module from ``construct`` when the layer mapping may name APIs and the file is there."""
        if not self.layers:
            return
        if construct is not None:
            self.parents = _parents(construct)
        for key in (*keys, *self.parents.values()):
            parts = key.split(".")
            if is_module(key) and split_key(key) and len(parts) >= 5:
                self.classes.setdefault(".".join(parts[1:-3]), parts[-3])

    def token(self, key: str, mapped: bool = True) -> str:
        """What the alignment matches a record by: its direction and its API or module as the bench names it
        (``mapped``: the target's key; otherwise the bench's own). An API that a layer mapping names is matched
        by its name alone: frameworks file one API under different prefixes."""
        api, _, direction = split_key(key) or (key, "", "forward")
        name = api.rpartition(".")[2]
        if is_module(api):
            return f"{direction}:{self.api(api) if mapped else api}"
        renamed = self._renamed(key, name) if mapped else None
        if renamed is not None or name in self._named_apis:
            return f"{direction}:{renamed or name}"
        return f"{direction}:{self.api(api) if mapped else api}"

    @functools.cached_property
    def _named_apis(self) -> frozenset[str]:
        return frozenset(bench.rsplit(".", 1)[-1] for children in self.layers.values() for bench in children.values())

    def _renamed(self, key: str, name: str) -> str | None:
        """The bench's API name for an API record that the layer mapping names, from the root down as msprobe
        walks: under the class of each module above it, the path from there to the API."""
        parent = self.parents.get(key)
        parts = split_key(parent) if parent else None
        if parts is None or not self.layers:
            return None
        steps = parts[0].split(".")[1:-1]  # the module path, without the prefix and the class
        for k in range(len(steps) + 1):
            cls = self.classes.get(".".join(steps[:k]), steps[k - 1]) if k else TOP_LAYER
            bench = self.layers.get(cls, {}).get(".".join([*steps[k:], name]))
            if bench is not None:
                return bench.rsplit(".", 1)[-1]
        return None

    def api(self, api: str) -> str:
        """An API or module name (no counter) as the bench would record it."""
        head, _, rest = api.partition(".")
        bench_head = _MS_PREFIXES.get(head, head) if self.cross_framework else head
        if is_module(api) and self.layers:
            path, _, cls = rest.rpartition(".")
            return f"{bench_head}.{self._path(path)}.{cls}" if path else f"{bench_head}.{cls}"
        return f"{bench_head}.{rest}" if rest else api

    def key(self, key: str) -> str:
        """A record key as the bench would record it."""
        parts = split_key(key)
        if parts is None:
            return key
        api, n, direction = parts
        mapped = self.api(api)
        if is_module(key):
            return f"{mapped}.{direction}.{n}"
        return f"{mapped}.{n}.{direction}"

    @functools.cached_property
    def _renames(self) -> dict[str, tuple[tuple[int, ...], dict[str, tuple[int, str]]]]:
        """Each class's renames indexed once: the numbers of steps its target names span, and {target name:
        (its place in the mapping, bench name)}. A step is renamed by a look-up per span, not a walk over all of
        its class's renames (a mapping of thousands of renames made a compare quadratic)."""
        index = {}
        for cls, renames in self.layers.items():
            names = {origin: (n, bench) for n, (origin, bench) in enumerate(renames.items())}
            index[cls] = (tuple(sorted({origin.count(".") + 1 for origin in names})), names)
        return index

    def _path(self, path: str) -> str:
        """A module path with each step renamed under its parent's class (TopLayer at the root); where names of
        several spans match, the one first in the mapping wins, as msprobe takes them."""
        steps = path.split(".")
        out, parent, i = [], TOP_LAYER, 0
        while i < len(steps):
            spans, renames = self._renames.get(parent, ((), {}))
            found = [(*renames[origin], span) for span in spans if span <= len(steps) - i
                     if (origin := ".".join(steps[i : i + span])) in renames]  # fmt: skip
            _, target, taken = min(found, default=(0, steps[i], 1))
            out.append(target)
            i += taken
            parent = self.classes.get(".".join(steps[:i]), steps[i - 1])
        return ".".join(out)


def _parents(path: Path) -> dict[str, str]:
    """construct.json's {record: its module's record}; absent, the mapping applies to module paths only."""
    try:
        doc = read_json(path, CompareInputError, MAX_CONSTRUCT, "construct.json")
    except FileNotFoundError:
        return {}
    if not isinstance(doc, dict):
        raise CompareInputError(f"{path}: not a map of records to their modules")
    return {k: v for k, v in doc.items() if isinstance(k, str) and isinstance(v, str) and v}
