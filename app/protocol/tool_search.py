"""`tool_search` and deferred tools: function tools, and namespaces' members, with
`defer_loading: true` are not offered to the model until a tool search loads them. The
`tool_search` tool is offered in their place as a function; its `execution` says who searches:

- `server` (the default): the server searches the deferred tools' names and descriptions for the
  model's query (`search`) and loads the best matches (a namespace loads whole), as a
  `tool_search_call` and a `tool_search_output` it makes (workers/tool_loop/tool_search.py);
- `client`: the model's call comes back as a `tool_search_call` for the client, which answers with
  a `tool_search_output` holding the tools it loads (any function, custom or namespace tools); the
  function takes the tool's parameters, or OpenAI's built-in `{"paths": [names]}`.

Loaded tools are offered from the `tool_search_output` items of the context on (`loaded_tools`):
listed after every other tool, or, for a model whose catalog entry says `loaded_tools =
"in_context"` (vLLM's default), described in the output itself (`output_text`), so that the prompt
before it, the engine's prefix cache with it, stays as it was. An `additional_tools` input item
(`role: "developer"`) makes its tools available the same way. Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from app.protocol.shapes import Item, Tool
from app.protocol.validation import StrictModel, check_json_schema, validate

FUNCTION_NAME = "tool_search"
MAX_LOADED = 5  # tools (or namespaces) one server search loads
DEFAULT_PARAMETERS = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "What the tools you need do."}},
    "required": ["query"],
    "additionalProperties": False,
}
# A client's search without parameters of its own takes OpenAI's built-in client schema: the
# names to load (what the Agents SDK for JavaScript runs itself).
PATHS_PARAMETERS = {
    "type": "object",
    "properties": {
        "paths": {"type": "array", "items": {"type": "string"}, "description": "The names of the tools to load."}
    },
    "required": ["paths"],
    "additionalProperties": False,
}
_WORD = re.compile(r"[a-z0-9]{3,}")  # (words of three letters or more: "a", "to", "of" match everything)
_COMMON = frozenset({"the", "and", "for", "with", "that", "this", "from", "what", "how", "can", "are", "its", "you"})


class _ToolSearchTool(StrictModel):
    type: Literal["tool_search"]
    execution: Literal["server", "client"] = "server"
    description: str | None = None
    parameters: dict[str, Any] | None = None


def parse_tool(entry: dict[str, Any], param: str) -> Tool:
    """The tool as a Response echoes it, its execution filled in."""
    tool = validate(_ToolSearchTool, entry, prefix=param)
    if tool.parameters is not None:
        check_json_schema(tool.parameters, f"{param}.parameters")
    return tool.model_dump(exclude_none=True)


def function(tool: Tool, deferred: list[Tool]) -> dict[str, Any]:
    """The function the model is offered for the tool, naming what may be loaded: in client
    execution the client's parameters and description (else OpenAI's built-in `paths`), in server
    execution a query."""
    names = ", ".join(unit_name(unit) for unit in deferred)
    if tool["execution"] == "client":
        return {
            "name": FUNCTION_NAME,
            "description": tool.get("description")
            or f"Load more tools to use, by name. Tools that can be loaded: {names}.",
            "parameters": tool.get("parameters") or PATHS_PARAMETERS,
        }
    return {
        "name": FUNCTION_NAME,
        "description": f"Load more tools to use, found by what they do. Tools that can be loaded: {names}.",
        "parameters": DEFAULT_PARAMETERS,
        "strict": True,
    }


def is_deferred(tool: Tool) -> bool:
    return bool(tool.get("defer_loading"))


def unit_name(unit: Tool) -> str:
    """What a loadable unit is called: a tool's or namespace's name, an MCP server's label."""
    return str(unit.get("name") or unit.get("server_label"))


def deferred_units(tools: list[Tool]) -> list[Tool]:
    """What a search may load, as it would be loaded: each deferred function or custom tool, each
    namespace with its deferred members, each deferred MCP server (all the tools it offers)."""
    units: list[Tool] = []
    for tool in tools:
        if tool["type"] in ("function", "custom", "mcp") and is_deferred(tool):
            units.append(tool)
        elif tool["type"] == "namespace":
            members = [member for member in tool["tools"] if is_deferred(member)]
            if members:
                units.append({**tool, "tools": members})
    return units


def search(units: list[Tool], query: str, listed: Mapping[str, list[dict[str, Any]]] | None = None) -> list[Tool]:
    """The units whose names and descriptions share the most words with the query, best first (an
    MCP server's: its label, its description and the tools it lists)."""
    wanted = set(_WORD.findall(query.lower())) - _COMMON
    scored = []
    for order, unit in enumerate(units):
        words = _words(unit, (listed or {}).get(unit.get("server_label") or "", []))
        score = len(wanted & words)
        if score:
            scored.append((-score, order, unit))
    return [unit for _, _, unit in sorted(scored, key=lambda found: found[:2])[:MAX_LOADED]]


def _words(unit: Tool, listed: list[dict[str, Any]]) -> set[str]:
    texts = [unit_name(unit), unit.get("description") or unit.get("server_description") or ""]
    members = [*(unit.get("tools") or []), *listed]
    texts += [f"{member.get('name', '')} {member.get('description') or ''}" for member in members]
    return set(_WORD.findall(" ".join(texts).replace("_", " ").lower()))


def query_of(arguments: str) -> str:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return ""
    query = parsed.get("query") if isinstance(parsed, dict) else None
    return query.strip()[:1000] if isinstance(query, str) else ""


LOADING_TYPES = ("tool_search_output", "additional_tools")  # the items that make tools available


def loaded_tools(items: list[Item]) -> list[Tool]:
    """The tools the context's tool searches loaded (and its `additional_tools` items gave), in order."""
    return [tool for item in items if item.get("type") in LOADING_TYPES for tool in item.get("tools") or []]


def loads_tools(items: list[Item]) -> bool:
    """Whether any of these items makes tools available (checked before a response's tools are made
    again from its whole context)."""
    return any(item.get("type") in LOADING_TYPES for item in items)


def output_text(item: Item, functions: list[dict[str, Any]] | None = None) -> str:
    """A tool search's output as the model reads it; with the `functions` it loaded, when the
    request does not list them, their signatures as a chat template renders listed tools'."""
    tools = item.get("tools") or []
    if not tools:
        return "No tool was found for that."
    described = [(unit_name(tool), tool.get("description") or tool.get("server_description") or "") for tool in tools]
    names = [f"{name}: {description}".rstrip(": .") for name, description in described]
    text = "These tools can be used now: " + "; ".join(names) + "."
    if functions:
        signatures = "\n".join(json.dumps(function, ensure_ascii=False) for function in functions)
        text += f" Call them as the others. Their function signatures:\n<tools>\n{signatures}\n</tools>"
    return text
