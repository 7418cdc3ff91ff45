"""A response's tools as the runtime's Chat Completions functions, and the runtime's calls back.

Chat Completions knows only flat functions. A namespace's members are offered as
`<namespace>__<name>`; a custom tool (free text in, no JSON) as a function taking one string,
`input`. A name that would collide with another tool's gets a numbered suffix. The mapping is
derived from the echoed tools alone, so the worker that builds the request and the one that reads
the calls (and a later turn replaying them) agree without storing it. Hosted tools are echoed
only: the model is not offered them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from app.protocol.tools import Tool, grammar_of

CUSTOM_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The tool's whole input, as free text."}},
    "required": ["input"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class ToolRef:
    """What a runtime function stands for: a function or custom tool, maybe in a namespace."""

    kind: Literal["function", "custom"]
    name: str
    namespace: str | None = None


@dataclass(frozen=True)
class RuntimeTools:
    functions: list[dict[str, Any]]  # as Chat Completions `tools`
    by_runtime_name: dict[str, ToolRef]

    @classmethod
    def of(cls, tools: list[Tool]) -> RuntimeTools:
        members = [(tool, None) for tool in tools if tool["type"] in ("function", "custom")]
        for tool in tools:
            if tool["type"] == "namespace":
                members += [(member, tool["name"]) for member in tool["tools"]]
        functions: list[dict[str, Any]] = []
        by_runtime_name: dict[str, ToolRef] = {}
        for tool, namespace in members:
            name = _free_name(tool["name"] if namespace is None else f"{namespace}__{tool['name']}", by_runtime_name)
            by_runtime_name[name] = ToolRef(tool["type"], tool["name"], namespace)
            functions.append({"type": "function", "function": _function(name, tool)})
        return cls(functions, by_runtime_name)

    def runtime_name(self, kind: str, name: str, namespace: str | None) -> str:
        """The runtime's name for a tool (a replayed call's); its plain name if no tool matches."""
        for runtime_name, ref in self.by_runtime_name.items():
            if (ref.kind, ref.name, ref.namespace) == (kind, name, namespace):
                return runtime_name
        return name if namespace is None else f"{namespace}__{name}"

    def ref(self, runtime_name: str) -> ToolRef:
        """What a call the runtime made stands for; a name no tool has is taken as a function's."""
        return self.by_runtime_name.get(runtime_name) or ToolRef("function", runtime_name)


def forced_grammar_tool(settings: dict[str, Any]) -> Tool | None:
    """The custom tool with a grammar that tool_choice names, if any: the model's whole answer,
    held to the grammar, is then that tool's input (app/protocol/model_fit.py allows no other)."""
    choice = settings.get("tool_choice")
    if not isinstance(choice, dict) or choice.get("type") != "custom":
        return None
    tools: list[Tool] = settings.get("tools") or []
    return next((t for t in tools if t["type"] == "custom" and t["name"] == choice["name"] and grammar_of(t)), None)


def custom_arguments(text: str) -> str:
    """A custom tool's free-text input as the arguments of the function that stands for it."""
    return json.dumps({"input": text}, ensure_ascii=False)


def custom_input(arguments: str) -> str:
    """The free-text input of a custom tool's call, from the arguments the model wrote; arguments
    of another shape are taken as the input itself."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    text = parsed.get("input") if isinstance(parsed, dict) else None
    return text if isinstance(text, str) else arguments


def _free_name(name: str, taken: dict[str, ToolRef]) -> str:
    candidate, suffix = name, 2
    while candidate in taken:
        candidate, suffix = f"{name}_{suffix}", suffix + 1
    return candidate


def _function(name: str, tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    if tool["type"] == "custom":
        function["parameters"] = CUSTOM_INPUT_SCHEMA
        function["strict"] = True  # the one-string schema is strict-compatible
    else:
        if tool.get("parameters") is not None:
            function["parameters"] = tool["parameters"]
        if tool.get("strict"):
            # Servers hold a required or named call's arguments to the schema only when it is
            # strict (vLLM 0.32: without it, arguments may be any JSON, a bare string even).
            function["strict"] = True
    return function
