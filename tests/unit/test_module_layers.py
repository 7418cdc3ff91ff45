"""The service's modules stay layered: no import cycle (a cycle makes import order matter and
hides which concept depends on which), and the API never imports the workers (design: it
enqueues jobs by name) except the command line, which starts either."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINT = "app.cli"


def module_names() -> dict[str, Path]:
    names = {}
    for package in ("app", "workers"):
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            names[name] = path
    return names


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every module of ours that `path` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found & known


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(path, set(modules)) - {name} for name, path in modules.items()}


def test_no_module_imports_itself_through_others() -> None:
    try:
        tuple(TopologicalSorter(import_graph()).static_order())
    except CycleError as cycle:
        raise AssertionError(f"import cycle: {' -> '.join(cycle.args[1])}") from None


def test_the_api_never_imports_the_workers() -> None:
    graph = import_graph()
    assert len(graph) > 50  # the walk found the modules
    offenders = {
        module: sorted(m for m in imported if m.startswith("workers"))
        for module, imported in graph.items()
        if module.startswith("app") and module != ENTRY_POINT
    }
    assert {module: found for module, found in offenders.items() if found} == {}
