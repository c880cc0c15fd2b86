"""The layer rules of docs/architecture.md hold: every import in precheck/ and api_registry/, at module or function
level, goes to the importer's own layer or one its row allows, and no modules import each other in a circle.

Read with ast from the source, importing nothing, so the check is fast and sees lazy imports inside functions
(a dependency all the same). The import table is parsed from the page a maintainer reads, so the page and the
code cannot drift apart.
"""

from __future__ import annotations

import ast
import re
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("precheck", "api_registry")
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Imports the table forbids that the code still makes, each named with why, removed as each is fixed: a new one
# fails the test, and so does an entry here that the code no longer makes.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules of this package an import statement names (``from a import b`` is a.b when b is a module)."""
    modules = _modules()
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".")
            if modules[module].name != "__init__.py":
                package = package[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join([*package, base] if base else package)
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    found = []
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.append(name)
    return found


@cache
def _imports() -> dict[str, dict[str, int]]:
    """Each module's imports of this package's modules, with the line of the first. An import under
    ``if TYPE_CHECKING:`` counts like any other: a type named from a module is a tie to it, and a type a lower
    module needs of a higher one is a Protocol beside the lower module (recording.modules' ``Recorder``)."""
    graph: dict[str, dict[str, int]] = {}
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, node):
                    edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


@cache
def _table() -> tuple[dict[str, str], dict[str, set[str]]]:
    """From the page's import table: which layer each module name covers, and which layers each layer may import."""
    covers: dict[str, str] = {}
    allowed: dict[str, set[str]] = {}
    row = re.compile(r"^\|\s*\d+\s*\|\s*(\w+)\s*\|([^|]*)\|([^|]*)\|\s*$", re.M)
    for layer, modules, may in row.findall(ARCHITECTURE.read_text(encoding="utf-8")):
        for name in re.findall(r"`([\w.*]+)`", modules):
            covers[name] = layer
        allowed[layer] = {layer} | {m.strip() for m in may.split(",") if m.strip() not in ("", "-")}
    return covers, allowed


def _layer(module: str) -> str | None:
    covers, _ = _table()
    best = None
    for name, layer in covers.items():
        exact = name == module
        package = name.endswith(".*") and (module == name[:-2] or module.startswith(name[:-1]))
        if (exact or package) and (best is None or len(name.rstrip("*")) > len(best[0].rstrip("*"))):
            best = (name, layer)
    return best[1] if best else None


def _upward() -> dict[tuple[str, str], int]:
    _, allowed = _table()
    found = {}
    for module, edges in _imports().items():
        for target, line in edges.items():
            if _layer(target) not in allowed[_layer(module)]:
                found[module, target] = line
    return found


def _circles() -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), type-only imports
    included."""
    graph = _imports()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = {stack.pop()}
            while v not in component:
                component.add(stack.pop())
            if len(component) > 1:
                circles.append(frozenset(component))

    for v in graph:
        if v not in index:
            visit(v)
    return circles


def test_the_table_names_every_layer_it_allows_and_places_every_module():
    covers, allowed = _table()
    assert len(allowed) >= 10, "the import table in docs/architecture.md was not found"
    assert all(may <= set(allowed) for may in allowed.values()), allowed
    unplaced = [m for m in _modules() if _layer(m) is None]
    assert not unplaced, f"modules no row of docs/architecture.md's import table covers: {unplaced}"


def test_no_module_imports_from_a_layer_its_row_does_not_allow():
    found = _upward()
    new = [
        f"{m}:{line} imports {t} ({_layer(m)} -> {_layer(t)})"
        for (m, t), line in found.items()
        if (m, t) not in KNOWN_UPWARD
    ]
    assert not new, "imports against docs/architecture.md's table:\n" + "\n".join(new)
    fixed = set(KNOWN_UPWARD) - set(found)
    assert not fixed, f"no longer imported, delete from KNOWN_UPWARD: {sorted(fixed)}"


def test_no_modules_import_each_other_in_a_circle():
    found = _circles()
    new = [sorted(c) for c in found if c not in KNOWN_CIRCLES]
    assert not new, f"import circles: {new}"
    fixed = set(KNOWN_CIRCLES) - set(found)
    assert not fixed, f"no longer a circle, delete from KNOWN_CIRCLES: {[sorted(c) for c in fixed]}"


def test_the_check_sees_an_upward_import_inside_a_function_and_a_circle(tmp_path, monkeypatch):
    # The checker itself can fail: a lazy import from core up to the CLI, a type-only one, and two pairs of modules
    # importing each other (one of them by a type only).
    package = tmp_path / "precheck"
    (package / "commands").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "commands" / "__init__.py").write_text("")
    (package / "results.py").write_text("def load():\n    from precheck.commands import cli\n")
    (package / "schema.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from precheck.commands.values import Choice\n"
    )
    (package / "commands" / "values.py").write_text("")
    (package / "commands" / "cli.py").write_text("from . import parser, repro\n")
    (package / "commands" / "parser.py").write_text("from precheck.commands.cli import main\n")
    (package / "commands" / "repro.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from precheck.commands.cli import main\n"
    )
    (tmp_path / "api_registry").mkdir()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    _modules.cache_clear()
    _imports.cache_clear()
    try:
        assert set(_upward()) == {
            ("precheck.results", "precheck.commands.cli"),
            ("precheck.schema", "precheck.commands.values"),
        }
        # repro names a type of cli only: cli -> repro -> cli is a circle all the same
        assert _circles() == [
            frozenset({"precheck.commands.cli", "precheck.commands.parser", "precheck.commands.repro"})
        ]
    finally:
        _modules.cache_clear()
        _imports.cache_clear()


# The CLI's entry points: the only modules outside precheck/commands/ that may import it.
CLI_ENTRY = {"precheck.__main__"}
_FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def _imports_commands(names: list[str]) -> bool:
    return any(name == "precheck.commands" or name.startswith("precheck.commands.") for name in names)


def test_no_library_module_imports_the_command_line():
    """commands/ is argparse and dispatch: the work it dispatches to lives in a library module that the README,
    the docs and a user's script call, so nothing below the CLI reaches up into it."""
    found = [
        f"{module} imports {target}"
        for module, edges in _imports().items()
        if not module.startswith("precheck.commands") and module not in CLI_ENTRY
        for target in edges
        if _imports_commands([target])
    ]
    assert not found, "\n".join(found)


def _block_imports(code: str) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def test_the_readme_and_docs_examples_import_no_command_module():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [
        f"{page.relative_to(ROOT)}: {name}"
        for page in pages
        for block in _FENCE.findall(page.read_text(encoding="utf-8"))
        for name in _block_imports(block)
        if _imports_commands([name])
    ]
    assert not found, "README/docs python blocks import the command line:\n" + "\n".join(found)


def test_the_command_line_check_sees_a_library_import_and_a_docs_import():
    assert _block_imports("from precheck.commands.regress import regress\nimport os") == [
        "precheck.commands.regress.regress",
        "os",
    ]
    assert _imports_commands(["precheck.commands"]) and not _imports_commands(["precheck.commandsx", "precheck"])
