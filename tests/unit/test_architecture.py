"""The design's dependency rules, read from the source.

- No import cycle among the service's modules: a cycle makes import order matter and hides which
  concept depends on which.
- The packages are the system's parts and data flows down through them: each package imports
  only the packages below it (`MAY_IMPORT`), and app/'s own top holds only the ground every part
  stands on (settings, errors, the catalog) and the entry points.
- workers import app; app never imports workers. The one exception is the command line
  (`app/cli.py`), the composition root that starts either an API or a worker process; it
  imports the worker lazily, inside the `worker` command.
- Only app/queue imports arq and names Redis keys; workers/translation imports no I/O, not even
  through what it imports; workers never import the API's use cases (app/service).
- What the service imports is installed by `pip install .` (or the extra that runs it): a
  test-only package (httpx, openai…) imported by the service would work here and break a user.
- No `asyncio.wait_for`, in the service, its tests or its benchmarks: on Python 3.11 it returns
  the awaited result when its task is cancelled in the same turn of the loop as the result
  arrives (CPython gh-86296, fixed in 3.12), so a loop that waits with it can run on after being
  cancelled and hold up its process's shutdown (tests/integration/test_webhooks.py).
  `asyncio.timeout` has no such window."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OWN_PACKAGES = {"app", "workers", "migrations"}


def imported_modules(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def own_modules() -> dict[str, Path]:
    modules = {}
    for package in ("app", "workers"):
        for path in (ROOT / package).rglob("*.py"):
            modules[".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")] = path
    return modules


def test_no_import_cycle_among_the_services_modules() -> None:
    modules = own_modules()
    graph = {}
    for name, path in modules.items():
        imported = set(imported_modules(path))
        # `from app.storage import events` imports the module app.storage.events.
        imported |= {f"{module}.{alias.name}" for module, alias in _from_imports(path)}
        graph[name] = (imported & modules.keys()) - {name}
    assert len(graph) > 50 and any(graph.values())  # the walk found the modules and their imports
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as cycle:
        raise AssertionError(f"import cycle: {' -> '.join(cycle.args[1])}") from None


def _from_imports(path: Path) -> Iterator[tuple[str, ast.alias]]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from ((node.module, alias) for alias in node.names)


# What each package may import of the service's own packages, besides itself and the ground.
GROUND = {"app.settings", "app.errors", "app.error_reporting", "app.catalog"}
ENTRY_POINTS = {"app.cli"}  # the command line: the composition root
_APP_BELOW_SERVICE = {
    *("app.process", "app.protocol", "app.queue", "app.storage", "app.events", "app.housekeeping"),
    "app.documents",
    "app.embeddings",
    "app.retrieval",
    "app.web_search",
}
MAY_IMPORT: dict[str, set[str]] = {
    "app.process": set(),
    "app.protocol": set(),
    "app.documents": {"app.process"},
    # A model a worker hosts is reached through that worker: a job on its queue (app.queue).
    "app.embeddings": {"app.protocol", "app.queue"},
    "app.retrieval": {"app.storage", "app.embeddings", "app.protocol"},
    "app.web_search": {"app.protocol"},
    "app.queue": {"app.process", "app.protocol"},
    "app.storage": {"app.protocol"},
    "app.events": {"app.process", "app.protocol", "app.queue", "app.storage"},
    "app.housekeeping": {"app.process", "app.protocol", "app.queue", "app.storage", "app.events"},
    "app.service": _APP_BELOW_SERVICE,
    # The operator's console: pages over the same use cases as the API's routes, mounted by it.
    "app.console": _APP_BELOW_SERVICE | {"app.service"},
    "app.api": _APP_BELOW_SERVICE | {"app.service", "app.console"},
    "app.ops": {"app.process", "app.protocol", "app.queue", "app.storage"},
    # The worker's parts: none imports the API's use cases (app.service) or its routes.
    "workers.runtime_failure": set(),
    "workers.translation": {"app.protocol", "workers.runtime_failure"},
    "workers.runtimes": {"app.process", "app.protocol", "workers.translation", "workers.runtime_failure"},
    "workers.caches": {"app.process", "app.protocol", "app.storage"},
    "workers.leases": {"app.process", "app.queue", "app.storage"},
    "workers.state": _APP_BELOW_SERVICE
    | {"workers.leases", "workers.caches", "workers.runtimes", "workers.translation"},
    "workers.tool_loop": _APP_BELOW_SERVICE | {"workers.state", "workers.translation", "workers.runtime_failure"},
    "workers.jobs": _APP_BELOW_SERVICE
    | {"workers.state", "workers.translation", "workers.runtime_failure", "workers.runtimes", "workers.tool_loop"},
    "workers.health_port": {"app.process", "workers.state"},
    "workers.worker": {"app.process", "app.queue", "workers.state", "workers.jobs", "workers.health_port"}
    | {"workers.runtimes"},
}


def part_of(module: str) -> str:
    """The package a module belongs to (`app.storage.items` → `app.storage`), or the module
    itself for one at the top of app/ or workers/."""
    top, _, rest = module.partition(".")
    first = rest.split(".")[0]
    if first and (ROOT / top / first).is_dir():
        return f"{top}.{first}"
    return module


def test_app_holds_at_its_top_only_the_ground_and_the_entry_points() -> None:
    tops = {name for name, path in own_modules().items() if name.count(".") == 1 and path.name != "__init__.py"}
    assert {name for name in tops if name.startswith("app.")} == GROUND | ENTRY_POINTS


def test_each_package_imports_only_the_packages_below_it() -> None:
    modules = own_modules()
    crossings = set()
    for name, path in modules.items():
        part = part_of(name)
        if part in GROUND | ENTRY_POINTS | {"app", "workers"}:
            continue
        imported = set(imported_modules(path)) | {f"{m}.{a.name}" for m, a in _from_imports(path)}
        for target in imported & modules.keys():
            other = part_of(target)
            if other not in {part, "app", "workers"} | GROUND and other not in MAY_IMPORT[part]:
                crossings.add(f"{name} imports {target}: {part} may not import {other}")
    assert MAY_IMPORT.keys() == {part_of(n) for n in modules} - GROUND - ENTRY_POINTS - {"app", "workers"}
    assert sorted(crossings) == []


def test_app_never_imports_workers() -> None:
    offenders = []
    for path in (ROOT / "app").rglob("*.py"):
        if path.name == "cli.py":
            continue
        names = imported_modules(path)
        offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "workers"]
    assert offenders == []


# What does I/O, or waits on it: the translation between Responses and Chat Completions imports
# none of it, not even through the modules it imports, so that it can be tested (and reasoned
# about) as functions of their arguments.
IO_MODULES = {"asyncio", "anyio", "socket", "ssl", "subprocess", "select", "selectors", "urllib.request"}
IO_MODULES |= {"sqlalchemy", "asyncpg", "redis", "arq", "aiohttp", "httpx", "httpx2", "mcp", "starlette", "uvicorn"}


def _reached_from(start: set[str], modules: dict[str, Path]) -> dict[str, str]:
    """Every module imported from `start`, directly or through the service's own modules, each
    with the own module that imports it."""
    reached: dict[str, str] = {}
    todo = list(start)
    seen = set(start)
    while todo:
        name = todo.pop()
        path = modules[name]
        imported = set(imported_modules(path)) | {f"{m}.{a.name}" for m, a in _from_imports(path)}
        for target in imported:
            if target in modules:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
            else:
                reached.setdefault(target, name)
    return reached


def test_translation_imports_no_io() -> None:
    modules = own_modules()
    translation = {name for name in modules if name.startswith("workers.translation")}
    assert len(translation) > 5
    io = {
        f"{through} imports {module}"
        for module, through in _reached_from(translation, modules).items()
        if module in IO_MODULES or module.split(".")[0] in IO_MODULES
    }
    assert sorted(io) == []


def test_only_the_queue_package_knows_arq() -> None:
    offenders = [
        f"{name}: {module}"
        for name, path in own_modules().items()
        if not name.startswith("app.queue")
        for module in imported_modules(path)
        if module.split(".")[0] == "arq"
    ]
    assert offenders == []


def test_redis_keys_are_named_only_in_the_queue_package() -> None:
    """Every key and channel name is in app/queue/redis_keys.py; the one name configured outside it
    is the queue's own (its setting's default)."""
    named = [
        (name, node.value)
        for name, path in own_modules().items()
        if not name.startswith("app.queue")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("responses:")
    ]
    assert named == [("app.settings", "responses:queue")]


def _declared(requirements: list[str]) -> set[str]:
    return {
        re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-") for requirement in requirements
    }


def test_the_service_imports_only_what_its_install_declares() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    declared = _declared(project["dependencies"] + extras["cpu"] + extras["gpu"])
    distributions = importlib.metadata.packages_distributions()
    undeclared = set()
    for package in ("app", "workers", "migrations"):
        for path in (ROOT / package).rglob("*.py"):
            for module in imported_modules(path):
                top = module.split(".")[0]
                if top in OWN_PACKAGES or top in sys.stdlib_module_names:
                    continue
                names = {d.lower().replace("_", "-") for d in distributions.get(top, [top])}
                # An extra's package may pull a module in through its own dependencies (pydantic → typing_extensions).
                if not names & declared and not _required_by_declared(names, declared):
                    undeclared.add(f"{path.relative_to(ROOT)}: {module} ({', '.join(sorted(names))})")
    assert sorted(undeclared) == []


def _required_by_declared(names: set[str], declared: set[str]) -> bool:
    """Whether one of `names` is a dependency of a declared distribution (one level down)."""
    for distribution in declared:
        try:
            requires = importlib.metadata.requires(distribution) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        if names & _declared([r for r in requires if "extra ==" not in r]):
            return True
    return False


def test_nothing_waits_with_asyncio_wait_for() -> None:
    """Not the service, its tests (which wait with tests.conftest.within) nor its benchmarks."""
    paths = [*own_modules().values(), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    waiting = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text()))
        if (isinstance(node, ast.Attribute) and node.attr == "wait_for" and ast.unparse(node.value) == "asyncio")
        or (
            isinstance(node, ast.ImportFrom) and node.module == "asyncio" and "wait_for" in {a.name for a in node.names}
        )
    ]
    assert len(paths) > 200 and waiting == []
