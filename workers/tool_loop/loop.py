"""A response's tool loop, in its worker: the model is offered the tools the server runs (an MCP
server's, file and web searches), each call it makes is made here by the call's kind and handed back to
the model, until the model answers, calls a client's function, or asks for an approval.

Each call is opened in the event log once the model's arguments are whole and committed before
it is made (a worker that dies then leaves a call known to be in flight, design invariant 4),
and closed with what it answered. The kinds (workers/tool_loop/kind.py) differ only in how a
call is opened, made, and taken up after a lost worker.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from app.events.writer import Emit
from app.protocol.response_object import ResponseRecord
from app.protocol.shapes import Item
from app.storage import responses as responses_db
from workers.state import WorkerState
from workers.tool_loop.file_search import FileSearchKind
from workers.tool_loop.kind import HostedKind, keep_earlier_results
from workers.tool_loop.mcp import McpKind
from workers.tool_loop.tool_search import ToolSearchKind
from workers.tool_loop.web_search import WebSearchKind
from workers.translation.output_items import HostedCallOutput
from workers.translation.translate import StreamTranslator

log = logging.getLogger(__name__)

MAX_TOOL_ROUNDS = "max_tool_rounds"  # the incomplete reason of a loop that ran out of inference rounds


@dataclass
class ToolLoop:
    state: WorkerState
    record: ResponseRecord
    translator: StreamTranslator
    emit: Emit
    answers: int = 0  # inference requests made
    mcp: McpKind | None = None
    kinds: list[HostedKind] = field(default_factory=list)

    async def __aenter__(self) -> ToolLoop:
        requested = self.record.settings.get("requested", {})
        if requested.get("runs_mcp"):
            self.mcp = McpKind(self.state, self.record, self.translator, self.emit)
            await self.mcp.open()
            self.kinds.append(self.mcp)
        if requested.get("runs_file_search"):
            self.kinds.append(FileSearchKind(self.state, self.record, self.translator))
        if requested.get("runs_web_search"):
            self.kinds.append(WebSearchKind(self.state, self.record, self.translator))
        if requested.get("runs_tool_search"):
            self.kinds.append(ToolSearchKind(self.record, self.translator, self.mcp))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.mcp is not None:
            await self.mcp.close()

    async def prepare(self, context: list[Item]) -> None:
        keep_earlier_results(self.translator)
        for kind in self.kinds:
            await kind.prepare(context)

    async def make_approved_calls(self, context: list[Item]) -> None:
        """The MCP calls the client approved since the last answer, made before the model is asked."""
        if self.mcp is None:
            return
        self.mcp.add_approved_calls(context)
        if self.translator.calls_to_make():
            await self.make_calls()
            self.translator.next_answer()

    def goes_on(self) -> bool:
        """After an answer: whether its calls are to be made and the model asked again."""
        return bool(self.translator.calls_to_make())

    async def make_calls(self) -> None:
        """This answer's calls, in turn, each committed as it opens and as it ends. Once the first
        is, the answer is in the log: its usage is saved with the rounds' before it."""
        self.emit(self.translator.close_answer())
        for n, call in enumerate(self.translator.calls_to_make()):
            kind = self._kind_of(call)
            self.emit(kind.opening(call))
            await self.state.writer.committed(self.record.id)  # known to be in flight before it is
            if n == 0 and self.record.id not in self.state.transient:  # (a store=false loop has no row)
                async with self.state.engine.begin() as conn:
                    await responses_db.save_rounds_usage(conn, self.record.id, self.translator.usage_object())
            self.emit(await kind.make(call))

    async def finish_interrupted(self, call: HostedCallOutput) -> None:
        """A call that was in flight when the worker making it stopped."""
        self.emit(await self._kind_of(call).make_interrupted(call))
        self.translator.interrupted = None
        self.translator.next_answer()

    def _kind_of(self, call: HostedCallOutput) -> HostedKind:
        return next(kind for kind in self.kinds if kind.handles(call))
