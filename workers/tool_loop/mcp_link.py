"""One remote MCP server as a response's tool loop talks to it: its tools listed, its tools called.

Through the official `mcp` SDK (2.x: the version the Agents SDK resolves to as well, speaking the
2026 protocol with the older handshake as fallback): Streamable HTTP, then the older HTTP+SSE
transport for a server that does not serve it. Every request goes through the egress guard
(workers/tool_loop/mcp_transport.py), with the caller's credentials as headers; the SDK follows a
redirect only on the server's own origin. Whatever goes wrong is an `McpFailure` carrying the
structured `error` an `mcp_call` shows (OpenAI's three kinds), never an exception of the SDK's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
import mcp_types
from mcp import Client, MCPError
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from app.process.egress import EgressGuard, EgressRefused
from workers.tool_loop.mcp_transport import GuardedTransport

log = logging.getLogger(__name__)

McpError = dict[str, Any]  # an mcp_call's `error`: http_error, mcp_protocol_error, mcp_tool_execution_error


class McpFailure(Exception):
    def __init__(self, error: McpError) -> None:
        super().__init__(error.get("message") or error["type"])
        self.error = error


@dataclass(frozen=True, slots=True)
class ListedTool:
    """A server's tool as an `mcp_list_tools` item lists it."""

    name: str
    input_schema: dict[str, Any]
    description: str | None
    read_only: bool

    def item(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": {"read_only": self.read_only},
        }


@dataclass(frozen=True, slots=True)
class CallResult:
    output: str | None
    error: McpError | None


class ServerLink:
    """An open session with one MCP server; `close` it (it never raises)."""

    def __init__(
        self,
        stack: AsyncExitStack,
        client: Client,
        transport: GuardedTransport,
        max_output_bytes: int,
        call_timeout: float,
    ) -> None:
        self._stack = stack
        self._client = client
        self._transport = transport
        self._max_output_bytes = max_output_bytes
        self._call_timeout = call_timeout

    async def list_tools(self) -> list[ListedTool]:
        self._transport.refused_with = None
        listed: list[ListedTool] = []
        cursor = None
        async with _failures(self._transport):
            while True:
                page = await self._client.list_tools(cursor=cursor)
                listed += [_listed(tool) for tool in page.tools]
                cursor = page.next_cursor
                if not cursor:
                    return listed

    async def call(self, name: str, arguments: dict[str, Any], timeout: float | None = None) -> CallResult:
        """The call's output (cut at the size limit, and marked so), or its error; within
        `timeout`, or the session's time for a call."""
        try:
            self._transport.refused_with = None
            async with _failures(self._transport):
                # The request itself, not the SDK's call_tool: that lists the tools again to check
                # structured output (which is not read here), and a context holding the list must
                # not fetch it again (as OpenAI).
                request = mcp_types.CallToolRequest(
                    params=mcp_types.CallToolRequestParams(name=name, arguments=arguments)
                )
                result = await self._client.session.send_request(
                    request,
                    mcp_types.CallToolResult,
                    request_read_timeout_seconds=min(timeout or self._call_timeout, self._call_timeout),
                )
        except McpFailure as failure:
            return CallResult(None, failure.error)
        if result.is_error:
            content = [block.model_dump(mode="json", exclude_none=True) for block in result.content]
            return CallResult(None, {"type": "mcp_tool_execution_error", "content": content})
        return CallResult(_capped(_text(result), self._max_output_bytes), None)

    async def close(self) -> None:
        """Ends the session; a request still under way is aborted. What the session's broken
        transport raises then (a request that timed out, a server gone) is no one's concern."""
        await _close_quietly(self._stack)


async def connect(
    url: str, headers: dict[str, str], guard: EgressGuard, *, timeout: float, max_output_bytes: int
) -> ServerLink:
    """A session with the server at `url`: Streamable HTTP, else HTTP+SSE."""
    stack, transport = AsyncExitStack(), GuardedTransport(guard)
    try:
        client = await _open(
            stack, streamable_http_client(url, http_client=_http(headers, transport, timeout)), transport
        )
    except McpFailure:
        await _close_quietly(stack)
        if transport.refused_with not in (400, 404, 405):  # (what a server without the transport answers)
            raise
        stack, transport = AsyncExitStack(), GuardedTransport(guard)
        try:
            client = await _open(stack, _sse(url, headers, transport, timeout), transport)
        except BaseException:
            await _close_quietly(stack)
            raise
    except BaseException:
        await _close_quietly(stack)
        raise
    return ServerLink(stack, client, transport, max_output_bytes, timeout)


async def _close_quietly(stack: AsyncExitStack) -> None:
    try:
        await stack.aclose()
    except Exception:
        log.debug("an MCP session ended with an error", exc_info=True)


async def _open(stack: AsyncExitStack, connection: Any, transport: GuardedTransport) -> Client:
    async with _failures(transport):
        return await stack.enter_async_context(Client(connection, cache=None))


def _http(headers: dict[str, str], transport: GuardedTransport, timeout: float) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        headers=headers,
        # A call's own limit is the JSON-RPC request's (ServerLink.call), which tells it as a
        # timeout; the HTTP read waits a little longer, for the session to be closed first.
        timeout=httpx2.Timeout(timeout, read=timeout + 10),
        transport=transport,
        trust_env=False,  # (a proxy would connect elsewhere than the guard checked)
        follow_redirects=False,
    )


def _sse(url: str, headers: dict[str, str], transport: GuardedTransport, timeout: float) -> Any:
    def factory(
        headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: Any = None
    ) -> httpx2.AsyncClient:
        return _http(headers or {}, transport, timeout.read if timeout is not None and timeout.read else 60.0)

    return sse_client(url, headers=headers, timeout=timeout, sse_read_timeout=timeout, httpx_client_factory=factory)


@asynccontextmanager
async def _failures(transport: GuardedTransport | None) -> AsyncIterator[None]:
    """The SDK's and the transport's errors as the structured error an mcp_call carries."""
    try:
        yield
    except McpFailure:
        raise
    except MCPError as exc:
        if exc.error.code == mcp_types.REQUEST_TIMEOUT:
            raise McpFailure({"type": "http_error", "code": 504, "message": _LATE}) from None
        status = transport.refused_with if transport is not None else None
        if status is not None:  # an HTTP refusal the SDK told as a JSON-RPC error
            raise McpFailure({"type": "http_error", "code": status, "message": f"HTTP {status}"}) from None
        raise McpFailure({"type": "mcp_protocol_error", "code": exc.error.code, "message": exc.error.message}) from None
    except EgressRefused as exc:
        raise McpFailure({"type": "http_error", "code": 403, "message": f"not connected to: {exc}"}) from None
    except httpx2.HTTPStatusError as exc:
        code = exc.response.status_code
        raise McpFailure({"type": "http_error", "code": code, "message": f"HTTP {code}"}) from None
    except httpx2.TimeoutException:
        raise McpFailure({"type": "http_error", "code": 504, "message": _LATE}) from None
    except (httpx2.HTTPError, OSError) as exc:
        message = f"the MCP server could not be reached ({type(exc).__name__})"
        raise McpFailure({"type": "http_error", "code": 502, "message": message}) from None
    except BaseExceptionGroup as group:  # (anyio task groups wrap what their tasks raised)
        async with _failures(transport):
            raise group.exceptions[0] from None
    except Exception as exc:  # whatever else the SDK raises ends this call, not the response
        log.warning("an MCP session broke", exc_info=True)
        message = f"the MCP session broke ({type(exc).__name__})"
        raise McpFailure({"type": "http_error", "code": 502, "message": message}) from None


_LATE = "the MCP server did not answer in time"


def _listed(tool: mcp_types.Tool) -> ListedTool:
    read_only = bool(tool.annotations is not None and tool.annotations.read_only_hint)
    return ListedTool(tool.name, dict(tool.input_schema), tool.description, read_only)


def _text(result: mcp_types.CallToolResult) -> str:
    """The result's text blocks, joined; else its structured content as JSON."""
    texts = [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return ""


def _capped(text: str, limit: int) -> str:
    raw = text.encode()
    if len(raw) <= limit:
        return text
    kept = raw[:limit].decode(errors="ignore")
    return f"{kept}\n[output truncated: {limit} of {len(raw)} bytes]"
