"""The design's one dependency rule: workers import app; app never imports workers.

The one exception is the command line (`app/cli.py`), the composition root that starts either
an API or a worker process; it imports the worker lazily, inside the `worker` command."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_app_never_imports_workers() -> None:
    offenders = []
    for path in (ROOT / "app").rglob("*.py"):
        if path.name == "cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "workers"]
    assert offenders == []
