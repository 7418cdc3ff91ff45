"""`tools` and `tool_choice`: the tools a response may call, as the Response echoes them.

- `function`: the model calls it, the client runs it.
- `namespace`: functions (and custom tools) grouped under a name, as Codex sends its multi-agent
  tools; a call comes back with `namespace` set.
- `custom`: a tool taking free text (`format` text), or text of a grammar (`format` grammar, Lark
  or a regex): served where the model's server can hold its output to a grammar and tool_choice
  names the tool (app/protocol/model_fit.py), since such a server constrains the whole answer.
- `shell`, `local_shell`, `apply_patch`: tools the client runs that are not functions
  (app/protocol/client_tools.py): the model calls each as a function, the call comes back typed.
- `mcp`: a remote MCP server whose tools the server itself runs (app/protocol/mcp_tools.py),
  unless the deployment turns that off (RESPONSES_MCP=off): it is then a hosted tool, below, and
  its credentials are dropped all the same.
- Hosted tools (web search, file search, code interpreter…) are OpenAI's own services. What a
  deployment does with them is its `RESPONSES_HOSTED_TOOLS` setting: `ignore` (the default)
  echoes them but does not offer them to the model; `refuse` answers a 400 naming the tool.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

from pydantic import Field

from app import errors
from app.protocol.client_tools import TOOL_TYPES as CLIENT_TOOL_TYPES
from app.protocol.client_tools import parse_tool as parse_client_tool
from app.protocol.file_search import parse_tool as parse_file_search
from app.protocol.mcp_tools import MCP_NOT_RUN, Credentials, McpPolicy, parse_mcp_tool
from app.protocol.shapes import Tool
from app.protocol.strict_schema import effective_strict
from app.protocol.tool_search import is_deferred
from app.protocol.tool_search import parse_tool as parse_tool_search
from app.protocol.validation import StrictModel, check_json_schema, discriminator, validate
from app.protocol.web_search import TOOL_TYPES as WEB_SEARCH_TYPES
from app.protocol.web_search import parse_tool as parse_web_search

ToolChoice = str | dict[str, Any]
HostedToolsPolicy = Literal["ignore", "refuse"]
ServedKind = Literal["file_search", "web_search"]  # the hosted tools a server may run itself

# OpenAI runs these itself; a deployment may run some of them (a search backend, pgvector, MCP),
# and RESPONSES_HOSTED_TOOLS says what becomes of the others.
HOSTED_TOOL_TYPES = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "web_search_2025_08_26",
        "file_search",
        "mcp",
    }
)
# These no deployment of open models can stand in for: a 400 whatever RESPONSES_HOSTED_TOOLS says,
# rather than a tool the client added quietly never offered.
_COMPUTER = "it drives a screen through a model trained for it, and no open model here is"
REFUSED_TOOL_TYPES = {
    "code_interpreter": "it runs code in OpenAI's sandboxed containers, which this server does not host",
    "image_generation": "it draws with OpenAI's image models, which this server does not run",
    "computer": _COMPUTER,
    "computer_use": _COMPUTER,
    "computer_use_preview": _COMPUTER,
    "programmatic_tool_calling": "it runs the model's JavaScript in OpenAI's V8 sandbox, not hosted here",
}
NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"


def served_kind(tool_type: Any) -> ServedKind | None:
    """The hosted tool the server may run that a tool type is (`web_search` for each of its
    versions), or None."""
    if not isinstance(tool_type, str):  # (a request's any JSON)
        return None
    if tool_type == "file_search":
        return "file_search"
    return "web_search" if tool_type in WEB_SEARCH_TYPES else None


class _FunctionTool(StrictModel):
    type: Literal["function"]
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: bool | None = None


class _TextFormat(StrictModel):
    type: Literal["text"]


class _GrammarFormat(StrictModel):
    type: Literal["grammar"]
    syntax: Literal["lark", "regex"]
    definition: str = Field(min_length=1)


class _CustomTool(StrictModel):
    type: Literal["custom"]
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    format: dict[str, Any] | None = None
    defer_loading: bool | None = None


class _NamespaceTool(StrictModel):
    type: Literal["namespace"]
    name: str = Field(pattern=NAME_PATTERN)
    description: str
    tools: list[Any] = Field(min_length=1)


class _NamedChoice(StrictModel):
    type: Literal["function", "custom"]
    name: str


class _McpChoice(StrictModel):
    type: Literal["mcp"]
    server_label: str
    name: str | None = None


def parse_tools(
    raw: list[Any] | None,
    hosted: HostedToolsPolicy = "refuse",
    mcp: McpPolicy = MCP_NOT_RUN,
    served: Collection[str] = (),
    loaded: bool = False,
) -> tuple[list[Tool], dict[str, Credentials]]:
    """The tools as a Response echoes them (a 400 naming the first one at fault), and the
    credentials MCP tools came with, by server label. `served`: the hosted tools this server runs
    (`file_search` where it has pgvector and an embedding model, `web_search` where a search
    backend is configured); the others are hosted tools it does not run. `loaded`: these are what
    a tool search loaded (deferred, and loaded already)."""
    tools: list[Tool] = []
    credentials: dict[str, Credentials] = {}
    for index, entry in enumerate(raw or []):
        param = f"tools[{index}]"
        kind = _kind(entry, param)
        if kind == "mcp":
            tool, given = parse_mcp_tool(entry, param, mcp)
            _check_unique_label(tool["server_label"], tools, param)
            if given is not None and mcp.run:
                credentials[tool["server_label"]] = given
            if not mcp.run and hosted == "refuse":
                raise errors.UnsupportedParameter(f"{param}.type", "the hosted tool 'mcp'")
            tools.append(tool)
            continue
        if served_kind(kind) in served or kind in CLIENT_TOOL_TYPES or kind == "tool_search":
            tools.append(_typed_tool(entry, kind, tools, param))
            continue
        if kind in REFUSED_TOOL_TYPES:
            raise errors.UnsupportedParameter(f"{param}.type", f"the tool '{kind}'", REFUSED_TOOL_TYPES[kind])
        if kind in HOSTED_TOOL_TYPES:
            if hosted == "refuse":
                raise errors.UnsupportedParameter(f"{param}.type", f"the hosted tool '{kind}'")
            tools.append(entry)  # echoed as sent; never offered to the model
            continue
        if kind == "namespace":
            tool = _namespace(entry, param)
        else:
            tool = _callable(entry, param)
        _check_unique(tool["name"], tools, param)
        tools.append(tool)
    if not loaded:
        _check_deferrals(tools)
    return tools, credentials


def _check_deferrals(tools: list[Tool]) -> None:
    """A deferred tool is loaded by a tool search only: without a tool_search tool it never could be."""
    if any(tool["type"] == "tool_search" for tool in tools):
        return
    for index, tool in enumerate(tools):
        members = tool["tools"] if tool["type"] == "namespace" else [tool]
        for place, member in enumerate(members):
            if is_deferred(member):
                where = f"tools[{index}].tools[{place}]" if tool["type"] == "namespace" else f"tools[{index}]"
                raise errors.InvalidRequest(
                    f"Invalid '{where}.defer_loading': a deferred tool needs a tool_search tool to load it.",
                    param=f"{where}.defer_loading",
                    code="invalid_value",
                )


def _typed_tool(entry: dict[str, Any], kind: str, tools: list[Tool], param: str) -> Tool:
    """A tool known by its type alone (a search the server runs, a client's shell or patch
    tool): one of each sort at most (the versions of web_search are one sort)."""
    sort = served_kind(kind) or kind
    if any((served_kind(known["type"]) or known["type"]) == sort for known in tools):
        raise errors.InvalidRequest(
            f"Invalid '{param}': only one {sort} tool may be given.", param=param, code="invalid_value"
        )
    if sort == "file_search":
        return parse_file_search(entry, param)
    if sort == "web_search":
        return parse_web_search(entry, param)
    if sort == "tool_search":
        return parse_tool_search(entry, param)
    return parse_client_tool(entry, param)


def _kind(entry: Any, param: str) -> Any:
    if not isinstance(entry, dict):
        raise errors.InvalidRequest(f"Invalid '{param}': expected an object.", param=param, code="invalid_type")
    return discriminator(entry, param)


def _callable(entry: dict[str, Any], param: str) -> Tool:
    """A function or custom tool, at the top level or inside a namespace."""
    kind = _kind(entry, param)
    if kind == "function":
        return _function(entry, param)
    if kind == "custom":
        return _custom(entry, param)
    raise errors.UnsupportedParameter(f"{param}.type", f"a tool of type '{kind}'")


def _function(entry: dict[str, Any], param: str) -> Tool:
    tool = validate(_FunctionTool, entry, prefix=param)
    strict = tool.strict
    if tool.parameters is not None:
        check_json_schema(tool.parameters, f"{param}.parameters")
        strict = effective_strict(tool.parameters, tool.strict, f"{param}.parameters")
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": strict is not False,  # omitted: strict where the schema allows it, as OpenAI does
    } | _deferral(tool.defer_loading)


def _deferral(defer_loading: bool | None) -> Tool:
    """`defer_loading`, echoed where it is set: a tool search loads the tool (app/protocol/tool_search.py)."""
    return {"defer_loading": True} if defer_loading else {}


def _custom(entry: dict[str, Any], param: str) -> Tool:
    tool = validate(_CustomTool, entry, prefix=param)
    echoed: Tool = {"type": "custom", "name": tool.name, "description": tool.description} | _deferral(
        tool.defer_loading
    )
    if tool.format is not None and tool.format.get("type") == "grammar":
        echoed["format"] = validate(_GrammarFormat, tool.format, prefix=f"{param}.format").model_dump()
    elif tool.format is not None:
        echoed["format"] = validate(_TextFormat, tool.format, prefix=f"{param}.format").model_dump()
    return echoed


def grammar_of(tool: Tool) -> dict[str, Any] | None:
    """A custom tool's grammar format, if it has one."""
    form = tool.get("format") or {}
    return form if tool["type"] == "custom" and form.get("type") == "grammar" else None


def _namespace(entry: dict[str, Any], param: str) -> Tool:
    namespace = validate(_NamespaceTool, entry, prefix=param)
    members: list[Tool] = []
    for index, member in enumerate(namespace.tools):
        member_param = f"{param}.tools[{index}]"
        _kind(member, member_param)
        tool = _callable(member, member_param)
        _check_unique(tool["name"], members, member_param)
        members.append(tool)
    return {"type": "namespace", "name": namespace.name, "description": namespace.description, "tools": members}


def _check_unique(name: str, tools: list[Tool], param: str) -> None:
    if any(known.get("name") == name for known in tools):
        raise errors.InvalidRequest(
            f"Invalid '{param}.name': the tool '{name}' is listed twice.", param=f"{param}.name", code="invalid_value"
        )


def _check_unique_label(label: str, tools: list[Tool], param: str) -> None:
    if any(known["type"] == "mcp" and known["server_label"] == label for known in tools):
        raise errors.InvalidRequest(
            f"Invalid '{param}.server_label': the MCP server '{label}' is listed twice.",
            param=f"{param}.server_label",
            code="invalid_value",
        )


def parse_tool_choice(raw: ToolChoice | None, tools: list[Tool], served: Collection[str] = ()) -> ToolChoice:
    """`served`: the hosted tools this server runs (as parse_tools takes them)."""
    if raw is None:
        return "auto"
    if isinstance(raw, str):
        if raw not in ("none", "auto", "required"):
            raise errors.InvalidRequest(
                f"Invalid 'tool_choice': unknown value '{raw}'; expected 'none', 'auto', 'required' or a function.",
                param="tool_choice",
                code="invalid_value",
            )
        runs = {"mcp"} | {tool["type"] for tool in tools if served_kind(tool["type"]) in served}
        if raw == "required" and not any(tool["type"] not in HOSTED_TOOL_TYPES - runs for tool in tools):
            raise errors.InvalidRequest(
                "Invalid 'tool_choice': 'required' needs at least one tool.", param="tool_choice", code="invalid_value"
            )
        return raw
    if not isinstance(raw, dict):
        raise errors.InvalidRequest(
            "Invalid 'tool_choice': expected a string or an object.", param="tool_choice", code="invalid_type"
        )
    kind = discriminator(raw, "tool_choice")
    if kind == "mcp":
        return _mcp_choice(raw, tools)
    if kind is not None and (served_kind(kind) is not None or kind in ("shell", "apply_patch")):
        return _tool_type_choice(raw, kind, tools, served)
    if kind not in ("function", "custom"):
        raise errors.UnsupportedParameter("tool_choice.type", f"a tool_choice of type '{raw.get('type')}'")
    named = validate(_NamedChoice, raw, prefix="tool_choice")
    if not any(tool["type"] == named.type and tool["name"] == named.name for tool in tools):
        raise errors.InvalidRequest(
            f"Invalid 'tool_choice.name': no {named.type} tool named '{named.name}' in tools.",
            param="tool_choice.name",
            code="invalid_value",
        )
    return {"type": named.type, "name": named.name}


def _tool_type_choice(raw: dict[str, Any], kind: str, tools: list[Tool], served: Collection[str]) -> ToolChoice:
    """A choice of a tool by its type alone: a search the server runs, or a client's shell or
    apply_patch (OpenAI has no choice of local_shell)."""
    runs = served_kind(kind) in served if served_kind(kind) is not None else True
    if set(raw) != {"type"} or not runs or not any(t["type"] == kind for t in tools):
        server = " that this server runs" if served_kind(kind) is not None else ""
        raise errors.InvalidRequest(
            f'Invalid \'tool_choice\': {{"type": "{kind}"}} needs a {kind} tool{server}.',
            param="tool_choice",
            code="invalid_value",
        )
    return {"type": kind}


def _mcp_choice(raw: dict[str, Any], tools: list[Tool]) -> ToolChoice:
    """`{"type": "mcp", "server_label", "name"?}`: a call of that server's tool (`name`), or of
    any of its tools."""
    choice = validate(_McpChoice, raw, prefix="tool_choice")
    if not any(tool["type"] == "mcp" and tool["server_label"] == choice.server_label for tool in tools):
        raise errors.InvalidRequest(
            f"Invalid 'tool_choice.server_label': no MCP server labelled '{choice.server_label}' in tools.",
            param="tool_choice.server_label",
            code="invalid_value",
        )
    return choice.model_dump()
