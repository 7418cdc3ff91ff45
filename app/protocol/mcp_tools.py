"""Remote MCP tools (`type: "mcp"`): the tool as a request sends it, as the Response echoes it,
and which of its server's tools the model may call, and with whose approval.

The server runs these tools itself (workers/tool_loop/): it lists the MCP server's tools, offers the
allowed ones to the model, and calls them. A tool's `authorization` and `headers` are the
caller's credentials for that server: they are taken out of the tool here, never stored or
echoed (the echo shows `<redacted>` in their place), and reach the worker sealed
(app/queue/mcp_credentials.py). `connector_id` and `tunnel_id` name OpenAI's own connectors
and tunnels, which a deployment of open models has none of: a 400 naming them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import Field

from app import errors
from app.protocol.sealing import Seal, SealError
from app.protocol.shapes import Tool
from app.protocol.validation import StrictModel, validate

REDACTED = "<redacted>"
LABEL_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"


@dataclass(frozen=True, slots=True)
class McpPolicy:
    """What this deployment does with MCP tools (RESPONSES_MCP, RESPONSES_MCP_SERVER_URLS):
    `run` them, or leave them to the hosted-tools policy (echoed, never offered, or refused);
    with `allowed_urls`, only servers whose URL starts with one of them."""

    run: bool = True
    allowed_urls: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, mode: str, allowed_urls: str) -> McpPolicy:
        return cls(mode == "run", tuple(url.strip() for url in allowed_urls.split(",") if url.strip()))


MCP_NOT_RUN = McpPolicy(run=False)  # (what parsing assumes unless told: MCP tools are hosted tools)


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a caller sent for one MCP server's requests; kept only sealed, only while it runs."""

    authorization: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def http_headers(self) -> dict[str, str]:
        sent = dict(self.headers)
        if self.authorization is not None:
            sent["Authorization"] = f"Bearer {self.authorization}"
        return sent

    def as_json(self) -> dict[str, Any]:
        return {"authorization": self.authorization, "headers": self.headers}

    @classmethod
    def of_json(cls, raw: dict[str, Any]) -> Credentials:
        return cls(raw.get("authorization"), dict(raw.get("headers") or {}))


def seal_credentials(seal: Seal, given: dict[str, Credentials]) -> str:
    """A response's credentials by server label, as one token only this deployment opens."""
    return seal.seal(orjson.dumps({label: c.as_json() for label, c in given.items()}).decode())


def open_credentials(seal: Seal | None, sealed: str | None) -> dict[str, Credentials]:
    """What `seal_credentials` sealed; none where nothing was (or a key since removed sealed it)."""
    if sealed is None or seal is None:
        return {}
    try:
        opened = orjson.loads(seal.open(sealed))
    except SealError:
        return {}
    return {label: Credentials.of_json(raw) for label, raw in opened.items()}


class _ToolFilter(StrictModel):
    tool_names: list[str] | None = None
    read_only: bool | None = None


class _ApprovalFilters(StrictModel):
    always: _ToolFilter | None = None
    never: _ToolFilter | None = None


class _McpTool(StrictModel):
    type: Literal["mcp"]
    server_label: str = Field(pattern=LABEL_PATTERN)
    server_url: str | None = None
    connector_id: str | None = None
    tunnel_id: str | None = None
    authorization: str | None = None
    headers: dict[str, str] | None = None
    server_description: str | None = None
    allowed_tools: list[str] | _ToolFilter | None = None
    require_approval: Literal["always", "never"] | _ApprovalFilters | None = None
    defer_loading: bool | None = None
    allowed_callers: list[Literal["direct", "programmatic"]] | None = None


def parse_mcp_tool(entry: dict[str, Any], param: str, policy: McpPolicy) -> tuple[Tool, Credentials | None]:
    """The tool as echoed (credentials redacted), and the credentials, if it came with any."""
    tool = validate(_McpTool, entry, prefix=param)
    for name in ("connector_id", "tunnel_id"):
        if getattr(tool, name) is not None:
            raise errors.UnsupportedParameter(f"{param}.{name}", "OpenAI's hosted MCP connectors and tunnels")
    if "programmatic" in (tool.allowed_callers or []):
        raise errors.UnsupportedParameter(f"{param}.allowed_callers", "programmatic tool calling")
    if tool.server_url is None:
        raise errors.InvalidRequest(
            f"Missing required parameter: '{param}.server_url'.",
            param=f"{param}.server_url",
            code="missing_required_parameter",
        )
    if policy.run:
        _check_url(tool.server_url, f"{param}.server_url", policy)
    if tool.headers and any(name.lower() == "authorization" for name in tool.headers):
        raise errors.InvalidRequest(
            f"Invalid '{param}.headers': send the server's token as '{param}.authorization', not as a header.",
            param=f"{param}.headers",
            code="invalid_value",
        )
    echoed: Tool = {
        "type": "mcp",
        "server_label": tool.server_label,
        "server_url": tool.server_url,
        "server_description": tool.server_description,
        "allowed_tools": _dumped(tool.allowed_tools),
        "require_approval": _dumped(tool.require_approval),
        "headers": dict.fromkeys(tool.headers, REDACTED) if tool.headers else None,
    }
    if tool.defer_loading:  # (its tools offered once a tool search loads the server: app/protocol/tool_search.py)
        echoed["defer_loading"] = True
    if tool.authorization is not None:
        echoed["authorization"] = REDACTED
    credentials = None
    if tool.authorization is not None or tool.headers:
        credentials = Credentials(tool.authorization, dict(tool.headers or {}))
    return echoed, credentials


def _dumped(value: Any) -> Any:
    return value.model_dump(exclude_none=True) if isinstance(value, StrictModel) else value


def _check_url(url: str, param: str, policy: McpPolicy) -> None:
    if not url.startswith(("http://", "https://")):
        raise errors.InvalidRequest(
            f"Invalid '{param}': an MCP server's URL must be http(s).", param=param, code="invalid_value"
        )
    if policy.allowed_urls and not url.startswith(policy.allowed_urls):
        raise errors.InvalidRequest(
            f"Invalid '{param}': this server does not connect to the MCP server at '{url[:200]}' "
            "(its operator allows only listed MCP servers).",
            param=param,
            code="mcp_server_not_allowed",
        )


def offered(tool: Tool, name: str, read_only: bool) -> bool:
    """Whether the model may call `name` of this server (`allowed_tools`)."""
    allowed = tool.get("allowed_tools")
    if allowed is None:
        return True
    if isinstance(allowed, list):
        return name in allowed
    return _matches(allowed, name, read_only)


def named_tools(tool: Tool) -> set[str]:
    """The tools `allowed_tools` names: a list of this server's tools that comes from an earlier
    turn (its `mcp_list_tools`) and lacks one of them was made with a narrower filter."""
    allowed = tool.get("allowed_tools")
    if isinstance(allowed, list):
        return set(allowed)
    if isinstance(allowed, dict):
        return set(allowed.get("tool_names") or ())
    return set()


def needs_approval(tool: Tool, name: str, read_only: bool) -> bool:
    """Whether a call of `name` waits for the client's approval (`require_approval`; omitted
    means always, as OpenAI asks before any data goes to a remote server)."""
    rule = tool.get("require_approval")
    if rule is None or rule == "always":
        return True
    if rule == "never":
        return False
    never = rule.get("never")
    # `never` names the calls that run at once; any other waits, as when nothing is said (an
    # `always` filter only says so again).
    return not (never is not None and _matches(never, name, read_only))


def _matches(rule: dict[str, Any], name: str, read_only: bool) -> bool:
    """A filter matches a tool it names, or any tool of its read-only-ness."""
    names, only = rule.get("tool_names"), rule.get("read_only")
    if names is not None and name not in names:
        return False
    return only is None or only == read_only


def approvals_asked(items: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """The approvals these input items give, by index: each checked against what was asked."""
    return [(i, item["approval_request_id"]) for i, item in enumerate(items) if item["type"] == "mcp_approval_response"]


def check_approvals(items: list[dict[str, Any]], asked: set[str], param: str = "input") -> None:
    """Each approval answers a request the context holds (the previous response's, or one the
    input replays), once: a stale, foreign or repeated one is a 400 naming it."""
    asked = asked | {item["id"] for item in items if item["type"] == "mcp_approval_request"}
    answered: set[str] = set()
    for index, request_id in approvals_asked(items):
        where = f"{param}[{index}].approval_request_id"
        if request_id not in asked or request_id in answered:
            why = "answered twice" if request_id in answered else "not an approval request awaiting an answer here"
            raise errors.InvalidRequest(
                f"Invalid '{where}': '{request_id[:128]}' is {why}.", param=where, code="invalid_value"
            )
        answered.add(request_id)
