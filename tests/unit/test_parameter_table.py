"""docs/api.md's parameter tables list every parameter of the installed OpenAI SDK's
`responses.create` and `responses.compact`, and only those (plus the extras they document): a
field a newer SDK adds fails this until its behaviour here is decided and written down."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from openai.types.responses import response_compact_params, response_create_params

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
# Parameters clients send that the SDK's create types lack: the top-level verbosity of
# responses.parse(verbosity=…), and Codex's client_metadata.
CREATE_EXTRAS = {"verbosity", "client_metadata"}


def _tables() -> list[set[str]]:
    """The parameters named in each table of the "Parameters" section, in order."""
    section = API_DOC.read_text().split("\n## Parameters\n", 1)[1].split("\n## ", 1)[0]
    tables: list[set[str]] = []
    for line in section.splitlines():
        if line.startswith("| parameter |"):
            tables.append(set())
        elif name := re.match(r"\| `([a-z_]+)` \|", line):
            tables[-1].add(name.group(1))
    return tables


def _fields(*types: type) -> set[str]:
    return {name for kind in types for name in typing.get_type_hints(kind)}


def test_the_create_table_is_the_sdk_s_create_parameters() -> None:
    create, _ = _tables()
    sdk = _fields(
        response_create_params.ResponseCreateParamsStreaming, response_create_params.ResponseCreateParamsNonStreaming
    )
    assert create - CREATE_EXTRAS == sdk


def test_the_compact_table_is_the_sdk_s_compact_parameters() -> None:
    _, compact = _tables()
    assert compact == _fields(response_compact_params.ResponseCompactParams)
