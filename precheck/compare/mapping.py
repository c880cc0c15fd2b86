"""How a target record's name reads on the bench side: module paths renamed by a layer mapping (msprobe's
``-lm layer_mapping.yaml``), MindSpore API names as their PyTorch equivalents, dtypes spelled one way.

A layer mapping is msprobe's YAML: for a module class (``TopLayer`` for the model itself), which child names on
the target side are which on the bench side; a name may span levels (``a.b: c``)::

    TopLayer:
      network: model
    Block:
      fc_in: up
      norm: ln
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from precheck.compare.entries import CompareInputError, split_key

TOP_LAYER = "TopLayer"
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

    def learn(self, keys: Iterable[str]) -> None:
        """Module classes by path, from the target's own module records (Module.<path>.<Class>.forward.N)."""
        if not self.layers:
            return
        for key in keys:
            parts = key.split(".")
            if parts[0] in ("Module", "Cell") and split_key(key) and len(parts) >= 5:
                self.classes.setdefault(".".join(parts[1:-3]), parts[-3])

    def api(self, api: str) -> str:
        """An API or module name (no counter) as the bench would record it."""
        head, _, rest = api.partition(".")
        bench_head = _MS_PREFIXES.get(head, head) if self.cross_framework else head
        if head in ("Module", "Cell") and self.layers:
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
        head = key.split(".", 1)[0]
        if head in ("Module", "Cell"):
            return f"{mapped}.{direction}.{n}"
        return f"{mapped}.{n}.{direction}"

    def _path(self, path: str) -> str:
        """A module path with each step renamed under its parent's class (TopLayer at the root)."""
        steps = path.split(".")
        out, parent, i = [], TOP_LAYER, 0
        while i < len(steps):
            renames = self.layers.get(parent, {})
            taken = 1
            target = steps[i]
            for origin, bench in renames.items():
                span = origin.count(".") + 1
                if ".".join(steps[i : i + span]) == origin:
                    taken, target = span, bench
                    break
            out.append(target)
            i += taken
            parent = self.classes.get(".".join(steps[:i]), steps[i - 1])
        return ".".join(out)
