"""The tool loop's MCP kind: a response's `mcp` servers' tools listed (or found in the context)
and offered to the model, each call the model makes made here through its server's link.

Each step is written to the response's event log as OpenAI streams it (hosted-tools reference
§1.4): an `mcp_list_tools` item per server the context has no list of, then per call an
`mcp_call` item, opened once the model's arguments are whole and committed before the call is
made, closed with its output or its `error`. An approved call (`mcp_approval_response` in the
input) is made from the stored request's arguments before the model is asked anything.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from app.events.writer import Emit
from app.protocol.ids import new_id
from app.protocol.mcp_tools import Credentials, named_tools, offered, open_credentials
from app.protocol.response_object import ResponseRecord
from app.protocol.shapes import Event, Item
from app.queue import mcp_credentials
from workers.runtime_failure import RuntimeFailure
from workers.state import WorkerState
from workers.tool_loop.mcp_link import McpFailure, ServerLink, connect
from workers.translation.output_items import HostedCallOutput, McpCallOutput, mcp_list_tools_events
from workers.translation.tools import RuntimeTools
from workers.translation.translate import StreamTranslator

INTERRUPTED = {
    "type": "http_error",
    "code": 503,
    "message": "The worker making this call stopped before its answer; the call may or may not have been made.",
}


@dataclass
class McpKind:
    state: WorkerState
    record: ResponseRecord
    translator: StreamTranslator
    emit: Emit
    credentials: dict[str, Credentials] = field(default_factory=dict)
    listed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # tools by server label
    _links: dict[str, ServerLink] = field(default_factory=dict)
    _deadline: float = 0.0

    @property
    def servers(self) -> dict[str, dict[str, Any]]:
        return {tool["server_label"]: tool for tool in self.record.settings.get("tools") or [] if tool["type"] == "mcp"}

    async def open(self) -> None:
        self._deadline = time.monotonic() + self.state.settings.mcp_response_timeout_seconds
        sealed = await mcp_credentials.take(self.state.redis, self.record.id)
        self.credentials = open_credentials(self.state.seal, sealed)

    async def close(self) -> None:
        for link in self._links.values():
            await link.close()

    def handles(self, call: HostedCallOutput) -> bool:
        return isinstance(call, McpCallOutput)

    async def prepare(self, context: list[Item]) -> None:
        """The servers' tools offered to the model: from the context's lists (OpenAI lists once per
        chain or conversation), else listed now, and listed again when this request names a tool
        that the context's list lacks (its earlier turn allowed fewer)."""
        for item in context:
            if item["type"] == "mcp_list_tools" and not item.get("error") and item["server_label"] in self.servers:
                self.listed[item["server_label"]] = item["tools"]
        for label, server in self.servers.items():
            known = {tool["name"] for tool in self.listed.get(label, ())}
            if label not in self.listed or named_tools(server) - known:
                await self._list(label)
        self.translator.tools = RuntimeTools.for_settings(self.record.settings, self.listed, context)

    async def _list(self, label: str) -> None:
        item: Item = {"id": new_id("mcpl"), "type": "mcp_list_tools", "server_label": label, "tools": [], "error": None}
        index = self.translator.add_finished(item)
        try:
            listed = await (await self._link(label)).list_tools()
            server = self.servers[label]
            tools = [tool.item() for tool in listed if offered(server, tool.name, tool.read_only)]  # (allowed_tools)
        except McpFailure as failure:
            item["error"] = f"Error retrieving tool list from MCP server '{label}': {failure}"
            opening, closing = mcp_list_tools_events(item, index, failed=True)
            self.emit([*opening, *closing])
            raise RuntimeFailure(item["error"], code="http_error") from None
        item["tools"] = tools
        self.listed[label] = tools
        opening, closing = mcp_list_tools_events(item, index, failed=False)
        self.emit([*opening, *closing])

    def add_approved_calls(self, context: list[Item]) -> None:
        """The calls the client approved since the last answer, from their stored requests, added
        for the loop to make before the model is asked."""
        requests = {item["id"]: item for item in context if item["type"] == "mcp_approval_request"}
        made = {item.get("approval_request_id") for item in context if item["type"] == "mcp_call"}
        for item in context:
            if item["type"] != "mcp_approval_response" or not item["approve"]:
                continue
            request = requests.get(item["approval_request_id"])
            if request is None or request["id"] in made or request["server_label"] not in self.servers:
                continue
            call = self.translator.add_call(request["name"], request["server_label"], request["arguments"])
            call.approval_request_id = request["id"]

    def opening(self, call: HostedCallOutput) -> list[Event]:
        assert isinstance(call, McpCallOutput)
        return call.opening()

    async def make(self, call: HostedCallOutput) -> list[Event]:
        assert isinstance(call, McpCallOutput)
        output, error = await self._call(call)
        return call.closing(output, error)

    async def make_interrupted(self, call: HostedCallOutput) -> list[Event]:
        """Whether the server got the call is not known: it is made again only when its tool says
        it changes nothing (read-only), else it ends failed and the model is told."""
        assert isinstance(call, McpCallOutput)
        listed = next((t for t in self.listed.get(call.server_label, []) if t["name"] == call.name), None)
        if listed is not None and (listed.get("annotations") or {}).get("read_only"):
            output, error = await self._call(call)
        else:
            output, error = None, INTERRUPTED
        return call.closing(output, error)

    async def _call(self, call: McpCallOutput) -> tuple[str | None, dict[str, Any] | None]:
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError:
            return None, {"type": "mcp_protocol_error", "code": -32602, "message": "the arguments are not JSON"}
        if not isinstance(arguments, dict):
            return None, {"type": "mcp_protocol_error", "code": -32602, "message": "the arguments are not an object"}
        left = self._deadline - time.monotonic()
        if left <= 0:
            return None, {"type": "http_error", "code": 504, "message": "this response's time for MCP calls is spent"}
        try:
            result = await (await self._link(call.server_label)).call(call.name, arguments, timeout=left)
        except McpFailure as failure:
            return None, failure.error
        if result.error is not None and result.error["type"] != "mcp_tool_execution_error":
            # The session may be broken (a request that timed out is still under way in it): the
            # next call opens another.
            await self._links.pop(call.server_label).close()
        return result.output, result.error

    async def _link(self, label: str) -> ServerLink:
        if label not in self._links:
            settings = self.state.settings
            given = self.credentials.get(label) or Credentials()
            self._links[label] = await connect(
                self.servers[label]["server_url"],
                given.http_headers(),
                self.state.mcp_guard,
                timeout=settings.mcp_call_timeout_seconds,
                max_output_bytes=settings.mcp_max_output_bytes,
            )
        return self._links[label]
