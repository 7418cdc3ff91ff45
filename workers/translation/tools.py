"""A response's tools as the runtime's Chat Completions functions, and the runtime's calls back.

Chat Completions knows only flat functions. A namespace's members are offered as
`<namespace>__<name>`; a custom tool (free text in, no JSON) as a function taking one string,
`input`; a shell, local_shell or apply_patch tool as the function of app/protocol/client_tools.py
(its calls come back typed). A name that would collide with another tool's gets a numbered suffix. The mapping is
derived from the echoed tools alone, so the worker that builds the request and the one that reads
the calls (and a later turn replaying them) agree without storing it. An MCP server's tools, as
its `mcp_list_tools` item lists them, are offered by their own names after the request's own
tools, as far as its `allowed_tools` lets them; a file_search or web_search tool the server
runs, as the function of its module (app/protocol/file_search.py, web_search.py). Other hosted
tools are echoed only: the model is not offered them.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from app.protocol import client_tools, tool_search
from app.protocol import file_search as file_search_function
from app.protocol import web_search as web_search_function
from app.protocol.mcp_tools import needs_approval, offered
from app.protocol.shapes import Item, Tool
from app.protocol.tools import grammar_of, served_kind

CUSTOM_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The tool's whole input, as free text."}},
    "required": ["input"],
    "additionalProperties": False,
}


HOSTED_KINDS = ("mcp", "file_search", "web_search")  # what the server calls, of a ToolRef's kinds


@dataclass(frozen=True, slots=True)
class ToolRef:
    """What a runtime function stands for: a function or custom tool, maybe in a namespace."""

    kind: Literal[
        "function", "custom", "mcp", "file_search", "web_search", "shell", "local_shell", "apply_patch", "tool_search"
    ]
    name: str
    namespace: str | None = None  # an MCP tool's: its server's label
    approval: bool = False  # an MCP tool's call waits for the client's approval
    client_search: bool = False  # a tool search the client makes (else the server does)


@dataclass(frozen=True)
class RuntimeTools:
    functions: list[dict[str, Any]]  # as Chat Completions `tools`
    by_runtime_name: dict[str, ToolRef]
    # The runtime names of the functions each tool search's unit loaded (by unit name), in order:
    # listed after every other tool, or described where they were loaded (`in_context`).
    loaded: dict[str, list[str]] = field(default_factory=dict)
    described_later: dict[str, dict[str, Any]] = field(default_factory=dict)  # the loaded, not listed (by name)

    @classmethod
    def of(
        cls,
        tools: list[Tool],
        listed: Mapping[str, list[dict[str, Any]]] | None = None,
        *,
        searches: Collection[str] = (),
    ) -> RuntimeTools:
        """`listed`: the tools of the MCP servers the server runs, by label (their mcp_list_tools);
        `searches`: the search tools of the request's that the server runs (`file_search`,
        `web_search`), each offered as the function of its module. Deferred tools are not offered
        (`loading` adds those a tool search loaded)."""
        made = _Offered()
        made.add_members([tool for tool in _members(tools) if not tool_search.is_deferred(tool[0])])
        for tool in tools:
            if tool["type"] in client_tools.TOOL_TYPES:
                function = client_tools.FUNCTIONS[tool["type"]]
                made.add(function["name"], ToolRef(tool["type"], function["name"]), function)
        for server in (tool for tool in tools if tool["type"] == "mcp" and not tool_search.is_deferred(tool)):
            made.add_server(server, listed)
        for tool in tools:
            kind = served_kind(tool["type"])
            if kind is not None and kind in searches:
                functions = (
                    [file_search_function.FUNCTION] if kind == "file_search" else web_search_function.functions(tool)
                )
                for function in functions:
                    made.add(str(function["name"]), ToolRef(kind, str(function["name"])), function)
        for tool in tools:
            if tool["type"] == "tool_search":
                function = tool_search.function(tool, tool_search.deferred_units(tools))
                ref = ToolRef("tool_search", tool_search.FUNCTION_NAME, client_search=tool["execution"] == "client")
                made.add(tool_search.FUNCTION_NAME, ref, function)
        return cls(made.functions, made.by_runtime_name)

    def loading(
        self, units: list[Tool], listed: Mapping[str, list[dict[str, Any]]] | None = None, searched: bool = True
    ) -> RuntimeTools:
        """These units offered besides, after every other (a tool search loaded them, `searched`,
        or an `additional_tools` item gave them): functions, custom tools, namespaces, MCP servers
        (their `listed` tools). A call of a loaded top-level function comes back with its own name
        as its namespace, as OpenAI's do (the Agents SDK finds deferred functions by that shape)."""
        made = _Offered(list(self.functions), dict(self.by_runtime_name))
        loaded = {unit: list(names) for unit, names in self.loaded.items()}
        for unit in units:
            before = len(made.functions)
            if unit["type"] == "mcp":
                made.add_server(unit, listed)
            for tool, namespace in _members([unit]):
                wanted = tool["name"] if namespace is None else f"{namespace}__{tool['name']}"
                made.add(wanted, ToolRef(tool["type"], tool["name"], namespace or tool["name"]), _function(tool))
            if searched:  # (given tools are listed: no search output describes them)
                names = [f["function"]["name"] for f in made.functions[before:]]
                loaded.setdefault(tool_search.unit_name(unit), []).extend(names)
        return RuntimeTools(made.functions, made.by_runtime_name, loaded)

    def loaded_in_context(self) -> RuntimeTools:
        """The same tools, those tool searches loaded described where they were loaded (in the
        tool search's output, `described`) rather than listed: the tools a chat template renders
        at the prompt's start stay as they were, and the engine's prefix cache with them. For a
        runtime whose tool parser reads calls of any name (vLLM's)."""
        late = {name for names in self.loaded.values() for name in names}
        listed = [f for f in self.functions if f["function"]["name"] not in late]
        described = {f["function"]["name"]: f for f in self.functions if f["function"]["name"] in late}
        return replace(self, functions=listed, described_later=described)

    def described(self, units: list[Tool]) -> list[dict[str, Any]]:
        """The functions these loaded units brought, where the context describes them rather than
        the request listing them (`loaded_in_context`)."""
        names = [name for unit in units for name in self.loaded.get(tool_search.unit_name(unit), [])]
        return [self.described_later[name] for name in names if name in self.described_later]

    @classmethod
    def for_settings(
        cls,
        settings: dict[str, Any],
        listed: Mapping[str, list[dict[str, Any]]] | None = None,
        context: list[Item] | None = None,
    ) -> RuntimeTools:
        """A response's tools, from its echoed settings, and those its context's tool searches loaded."""
        requested = settings.get("requested", {})
        searches = [kind for kind in ("file_search", "web_search") if requested.get(f"runs_{kind}")]
        tools = cls.of(settings.get("tools") or [], listed, searches=searches)
        for item in context or []:
            if item.get("type") in tool_search.LOADING_TYPES and item.get("tools"):
                tools = tools.loading(item["tools"], listed, searched=item["type"] == "tool_search_output")
        return tools

    def without_hosted(self) -> RuntimeTools:
        """The same tools without those the server runs (the response may make no more such calls)."""
        kept = [f for f in self.functions if self.ref(f["function"]["name"]).kind not in HOSTED_KINDS]
        return replace(self, functions=kept)

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


@dataclass
class _Offered:
    """The functions offered so far, each under a name no other has."""

    functions: list[dict[str, Any]] = field(default_factory=list)
    by_runtime_name: dict[str, ToolRef] = field(default_factory=dict)

    def add_members(self, members: list[tuple[Tool, str | None]]) -> None:
        """Functions and custom tools, each under its name (a namespace's prefixed with it)."""
        for tool, namespace in members:
            wanted = tool["name"] if namespace is None else f"{namespace}__{tool['name']}"
            self.add(wanted, ToolRef(tool["type"], tool["name"], namespace), _function(tool))

    def add_server(self, server: Tool, listed: Mapping[str, list[dict[str, Any]]] | None) -> None:
        """An MCP server's tools as its mcp_list_tools lists them, as far as `allowed_tools` lets them."""
        for listed_tool in (listed or {}).get(server["server_label"], []):
            read_only = bool((listed_tool.get("annotations") or {}).get("read_only"))
            if not offered(server, listed_tool["name"], read_only):
                continue
            wanted = listed_tool["name"]
            if wanted in self.by_runtime_name:  # two servers' tools of one name: told apart by their server's
                wanted = f"{server['server_label']}__{wanted}"
            approval = needs_approval(server, listed_tool["name"], read_only)
            ref = ToolRef("mcp", listed_tool["name"], server["server_label"], approval)
            self.add(wanted, ref, _mcp_function(listed_tool, server))

    def add(self, wanted: str, ref: ToolRef, function: dict[str, Any]) -> None:
        name = _free_name(wanted, self.by_runtime_name)
        self.by_runtime_name[name] = ref
        named = {"name": name, **{key: value for key, value in function.items() if key != "name"}}  # (name first)
        self.functions.append({"type": "function", "function": named})


def _members(tools: list[Tool]) -> list[tuple[Tool, str | None]]:
    """The request's functions and custom tools, with the namespace of each (None at the top)."""
    members: list[tuple[Tool, str | None]] = [(tool, None) for tool in tools if tool["type"] in ("function", "custom")]
    for tool in tools:
        if tool["type"] == "namespace":
            members += [(member, tool["name"]) for member in tool["tools"]]
    return members


def _free_name(name: str, taken: dict[str, ToolRef]) -> str:
    candidate, suffix = name, 2
    while candidate in taken:
        candidate, suffix = f"{name}_{suffix}", suffix + 1
    return candidate


def _function(tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {}
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


def _mcp_function(listed_tool: dict[str, Any], server: Tool) -> dict[str, Any]:
    description = listed_tool.get("description") or ""
    if server.get("server_description"):
        description = f"{description}\n\n(From {server['server_label']}: {server['server_description']})".strip()
    function: dict[str, Any] = {"parameters": listed_tool.get("input_schema") or {"type": "object"}}
    if description:
        function["description"] = description
    return function
