"""The tool loop's tool_search kind (server execution): the model's query searched among the
request's deferred tools not loaded yet (app/protocol/tool_search.py: functions, namespaces, MCP
servers by the tools they list); the best matches are the `tool_search_output` added after the
answer's items, and offered to the model from its next answer on (after every other tool, or
described in that output: the catalog entry's `loaded_tools`). A search changes nothing: one in
flight when its worker stopped is made again."""

from __future__ import annotations

from dataclasses import dataclass

from app.protocol.response_object import ResponseRecord
from app.protocol.shapes import Event, Item
from app.protocol.tool_search import deferred_units, loaded_tools, query_of, search, unit_name
from workers.tool_loop.mcp import McpKind
from workers.translation.output_items import HostedCallOutput, ToolSearchCallOutput
from workers.translation.tools import RuntimeTools
from workers.translation.translate import StreamTranslator


@dataclass
class ToolSearchKind:
    record: ResponseRecord
    translator: StreamTranslator
    mcp: McpKind | None = None  # (the MCP servers' listed tools: a deferred server is searched by them)
    context: list[Item] | None = None  # what the response read before this run (its loads included)

    def handles(self, call: HostedCallOutput) -> bool:
        return isinstance(call, ToolSearchCallOutput)

    async def prepare(self, context: list[Item]) -> None:
        self.context = context

    def opening(self, call: HostedCallOutput) -> list[Event]:
        assert isinstance(call, ToolSearchCallOutput)
        return call.opening()

    async def make(self, call: HostedCallOutput) -> list[Event]:
        assert isinstance(call, ToolSearchCallOutput)
        read = [*(self.context or []), *self.translator.before]
        loaded = {unit_name(tool) for tool in loaded_tools(read)}
        units = [unit for unit in deferred_units(self.record.settings["tools"]) if unit_name(unit) not in loaded]
        listed = self.mcp.listed if self.mcp is not None else None
        found = search(units, query_of(call.arguments), listed)
        output = self.translator.add_after(
            {"type": "tool_search_output", "call_id": call.call_id, "execution": "server", "tools": found}
        )
        self.translator.tools = RuntimeTools.for_settings(
            self.record.settings, listed, [*read, output.item("completed")]
        )
        return [*call.closing(), *output.events()]

    async def make_interrupted(self, call: HostedCallOutput) -> list[Event]:
        return await self.make(call)
