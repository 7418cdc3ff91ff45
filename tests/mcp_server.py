"""A real MCP server for the tests, built with the `mcp` package the server's client uses: on a
loopback port, served by uvicorn in a thread of its own, over Streamable HTTP (`/mcp`) or the
older HTTP+SSE transport (`/sse`). It counts each tool's calls and records the headers each
request came with, so a test can tell what was called how often, and with what credentials.

Its paths in `MISBEHAVING` answer as no MCP server would. Tools: `add` (read-only), `note`
(writes: not read-only), `fail` (its call errors), `slow` (sleeps, read-only), `slow_note`
(sleeps, then writes), `big` (an output of any size).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from sse_starlette.sse import AppStatus

from tests.conftest import free_port
from tests.threaded_server import ThreadedServer

READ_ONLY = ToolAnnotations(read_only_hint=True)
WRITES = ToolAnnotations(read_only_hint=False)


@dataclass
class McpTestServer:
    transport: Literal["streamable-http", "sse"] = "streamable-http"
    port: int = field(default_factory=free_port)
    calls: Counter[str] = field(default_factory=Counter)  # finished calls, by tool
    started: Counter[str] = field(default_factory=Counter)  # calls begun, by tool
    headers: list[dict[str, str]] = field(default_factory=list)  # of every HTTP request
    methods: Counter[str] = field(default_factory=Counter)  # JSON-RPC requests, by method
    notes: list[str] = field(default_factory=list)
    finished_at: list[float] = field(default_factory=list)  # time.time() as each call answered
    _server: ThreadedServer | None = None

    @property
    def url(self) -> str:
        path = "/mcp" if self.transport == "streamable-http" else "/sse"
        return f"http://127.0.0.1:{self.port}{path}"

    def _mcp(self) -> MCPServer:
        server = MCPServer("test-tools")

        @server.tool(annotations=READ_ONLY)
        def add(a: int, b: int) -> str:
            """Add two integers."""
            return self._done("add", str(a + b))

        @server.tool(annotations=WRITES)
        def note(text: str) -> str:
            """Write a note down."""
            self.started["note"] += 1
            self.notes.append(text)
            return self._done("note", f"noted: {text}")

        @server.tool(annotations=WRITES)
        def fail(reason: str) -> str:
            """Always fails."""
            self.started["fail"] += 1
            raise ValueError(f"it failed: {reason}")

        @server.tool(annotations=READ_ONLY)
        async def slow(seconds: float) -> str:
            """Waits, then answers."""
            self.started["slow"] += 1
            await asyncio.sleep(seconds)
            return self._done("slow", f"waited {seconds}")

        @server.tool(annotations=WRITES)
        async def slow_note(text: str, seconds: float) -> str:
            """Waits, then writes a note down."""
            self.started["slow_note"] += 1
            await asyncio.sleep(seconds)
            self.notes.append(text)
            return self._done("slow_note", f"noted: {text}")

        @server.tool(annotations=READ_ONLY)
        def big(size: int) -> str:
            """Answers `size` bytes."""
            return self._done("big", "x" * size)

        return server

    def _done(self, tool: str, output: str) -> str:
        self.calls[tool] += 1
        self.finished_at.append(time.time())
        return output

    def app(self) -> Any:
        server = self._mcp()
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        if self.transport == "sse":
            inner = server.sse_app(transport_security=security)
        else:
            inner = server.streamable_http_app(transport_security=security, stateless_http=True, json_response=True)
        return _Recording(inner, self.headers, self.methods)

    def start(self) -> McpTestServer:
        # sse-starlette ends every SSE stream of the process once any uvicorn server in it handled
        # an exit (a process-wide flag it sets from uvicorn's handler): an earlier test's server
        # must not end this one's streams.
        AppStatus.should_exit = False
        self._server = ThreadedServer(self.app(), self.port, "MCP test server")
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    """A call the fake runtime is scripted to make (`tool_calls`)."""
    return {"name": name, "arguments": json.dumps(arguments)}


# Paths at which the server is no MCP server: it refuses, answers what is not MCP, or redirects
# to another host (a private address, which a client must not follow to).
MISBEHAVING: dict[str, tuple[int, list[tuple[bytes, bytes]], bytes]] = {
    "/refuses": (401, [(b"content-type", b"text/plain")], b"no"),
    "/garbage": (200, [(b"content-type", b"application/json")], b"{not json at all"),
    "/redirects": (307, [(b"location", b"http://127.0.0.2:9/mcp")], b""),
}


class _Recording:
    """Records each HTTP request's headers and JSON-RPC method, then hands it on."""

    def __init__(self, app: Any, headers: list[dict[str, str]], methods: Counter[str]) -> None:
        self.app, self.headers, self.methods = app, headers, methods

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] in MISBEHAVING:
            status, headers, body = MISBEHAVING[scope["path"]]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        if scope["type"] == "http":
            self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        if scope["type"] != "http" or scope["method"] != "POST":  # (an SSE stream's GET is left alone)
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            self.methods[json.loads(body).get("method", "")] += 1
        except (ValueError, AttributeError):
            pass
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                following: dict[str, Any] = await receive()
                return following
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
