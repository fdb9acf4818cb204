"""The house's rules, read from the source: folders form layers, and no imports go round.

Layers, lowest first: ``version``/``errors``, ``config``/``models``, ``backends``, ``egress``,
``terminal``, ``shell``, ``session``, ``web``, ``mcp``, ``cli``, ``testing``. A module may
import from its own folder and from lower layers, never from a higher one (also not inside a
function);
and the module-level imports (outside ``TYPE_CHECKING``) form no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "sandbox"
LAYERS = {
    "version": 0,
    "errors": 0,
    "config": 1,
    "models": 1,
    "backends": 2,
    "egress": 3,
    "terminal": 4,
    "shell": 5,
    "session": 6,
    "web": 7,
    "mcp": 8,
    "cli": 9,
    "testing": 10,
    "__main__": 11,
}


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(path.read_text(), str(path))
    return out


def _folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # None: the package root (the public API)


def _imports(tree: ast.AST, *, top_level_only: bool) -> set[str]:
    found: set[str] = set()
    nodes = tree.body if top_level_only and isinstance(tree, ast.Module) else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sandbox"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("sandbox"))
    return found


MODULES = _modules()


def test_every_module_is_in_a_known_layer() -> None:
    unknown = {m for m in MODULES if _folder(m) is not None and _folder(m) not in LAYERS}
    assert not unknown, f"add a layer for {unknown} to this test and to the README's Layout"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _folder(m) is not None))
def test_no_import_reaches_up_a_layer(module: str) -> None:
    mine = LAYERS[_folder(module) or ""]
    for imported in _imports(MODULES[module], top_level_only=False):
        folder = _folder(imported)
        if folder is None:
            continue  # ``from sandbox.version import`` is how the root is reached, not the API
        assert LAYERS[folder] <= mine, f"{module} imports {imported}, a higher layer"


def test_the_package_root_imports_nothing_at_import_time_but_the_version() -> None:
    assert _imports(MODULES["sandbox"], top_level_only=True) == {"sandbox.version"}


def test_module_level_imports_form_no_cycle() -> None:
    graph = {m: set() for m in MODULES}
    for module, tree in MODULES.items():
        for imported in _imports(tree, top_level_only=True):
            target = imported if imported in MODULES else imported.rpartition(".")[0]
            if target in MODULES and target != module and target != "sandbox":
                graph[module].add(target)
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
