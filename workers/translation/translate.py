"""Chat Completions chunks → Responses stream events and output items. Pure: no I/O, no clock.

A chunk's delta carries reasoning (`reasoning_content`, or `reasoning` on newer vLLM), text
(`content`) or tool calls (`tool_calls`); each kind goes to an output item of its own, opened
when it first appears and closed when another kind takes over. Events come out without
`sequence_number`; the event log numbers them.

A runtime's chunk is read as the contract says, not trusted: text that is not text fails the
generation naming it, and usage counts that are not counts (a server may send `null`) are
counted here instead, so that a generation always ends with a readable outcome.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.protocol.client_tools import CallRefused
from app.protocol.create_request import ENCRYPTED_REASONING
from app.protocol.hosted_calls import SEARCH_CALL_TYPES, runs_searches
from app.protocol.ids import new_id
from app.protocol.response_object import usage_object
from app.protocol.sealing import Seal
from app.protocol.shapes import Event, Item
from workers.runtime_failure import RuntimeFailure
from workers.translation.citations import CitationFilter
from workers.translation.output_items import (
    CallOutput,
    ClientToolCall,
    CustomToolCallOutput,
    FileSearchCallOutput,
    FunctionCallOutput,
    GrammarToolCallOutput,
    HostedCallOutput,
    MadeItem,
    McpApprovalRequestOutput,
    McpCallOutput,
    MessageOutput,
    OutputItem,
    ReasoningOutput,
    SearchCallOutput,
    ToolSearchCallOutput,
    TypedCall,
    WebSearchCallOutput,
)
from workers.translation.tools import HOSTED_KINDS, RuntimeTools, forced_grammar_tool

FINISH_TO_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
STEERED = "steered"  # the incomplete reason of a response a steer ended at an output boundary


class AnswerSteered(Exception):
    """The answer reached an output boundary after a steer: it stops here, its open item closed
    by `events` (every event the chunk made before the boundary)."""

    def __init__(self, events: list[Event]) -> None:
        super().__init__("steered")
        self.events = events


def delta_carries_output(delta: dict[str, Any]) -> bool:
    """Whether a chunk's delta holds any output: reasoning, text or a tool call's part."""
    return bool(
        delta.get("reasoning_content") or delta.get("reasoning") or delta.get("content") or delta.get("tool_calls")
    )


def chunk_carries_output(chunk: dict[str, Any]) -> bool:
    return any(delta_carries_output(choice.get("delta") or {}) for choice in chunk.get("choices") or [])


@dataclass(frozen=True, slots=True)
class RefusedCall:
    """A call of a client's tool whose arguments made no typed item: the model is told why."""

    call_id: str
    runtime_name: str
    arguments: str
    reason: str


@dataclass
class StreamTranslator:
    """Folds a runtime's chunks into Responses events, then tells how the generation ended."""

    tools: RuntimeTools = field(default_factory=lambda: RuntimeTools.of([]))
    # Reasoning items: streamed as a summary, and sealed for the client (see ReasoningOutput).
    summarise_reasoning: bool = False
    seal_reasoning: Callable[[str], str] | None = None
    # Calls in one answer beyond this many are dropped (parallel_tool_calls false: one).
    max_calls: int | None = None
    # Calls the server may still make for the response (max_tool_calls, which counts hosted calls
    # only: MCP calls and file searches); the model's calls past it are dropped.
    hosted_calls_left: int | None = None
    # The answer's citation markers become annotations (the server runs a search): the results
    # the model was given so far, by marker number - 1, as what their annotations say.
    cites: bool = False
    citations: list[Item] = field(default_factory=list)
    # What the model read of this response's searches, by item id (the items keep the results
    # only under include): its next answers read them again.
    search_texts: dict[str, str] = field(default_factory=dict)
    # The custom tool with a grammar that tool_choice names: the answer's text is its input.
    grammar_tool: str | None = None
    items: list[OutputItem] = field(default_factory=list)
    # Output items made before this run, finished (a compaction that preceded the answer), and
    # the usage of what made them: the answer's items come after them, its usage adds to it.
    before: list[Item] = field(default_factory=list)
    before_usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    stopped_for: str | None = None  # an incomplete reason of the server's own (a tool loop's limit)
    # A steer waits: the answer stops where its open item ends, before the next one opens.
    steered: bool = False
    # A hosted call the worker that began this generation made, or was making, when it stopped.
    interrupted: HostedCallOutput | None = None
    usage: dict[str, Any] | None = None
    timings_cached: int | None = None  # the prompt tokens llama.cpp's server found cached (its timings' cache_n)
    content_chunks: int = 0  # every chunk that carried output: one token each, for servers that do not count
    reasoning_chunks: int = 0
    # By the runtime's tool-call index; None for a call dropped past max_calls.
    _calls: dict[int, CallOutput | None] = field(default_factory=dict)
    _closed: bool = False  # the last item was closed at a steer's boundary: nothing more opens
    # This answer's calls of client tools that made no typed item, and why (the model is told).
    refused: list[RefusedCall] = field(default_factory=list)
    _last_done: bool = False  # the last item is finished (the call after it was refused)

    @classmethod
    def for_settings(cls, settings: dict[str, Any], seal: Seal | None = None) -> StreamTranslator:
        """For a response with these (echoed) settings: its tools, how many calls it may make, and
        how its reasoning is shown."""
        sealed = ENCRYPTED_REASONING in settings.get("requested", {}).get("include", [])
        grammar_tool = forced_grammar_tool(settings)
        return cls(
            tools=RuntimeTools.for_settings(settings),
            grammar_tool=None if grammar_tool is None else grammar_tool["name"],
            max_calls=None if settings.get("parallel_tool_calls", True) else 1,
            hosted_calls_left=settings.get("max_tool_calls"),
            cites=runs_searches(settings),
            summarise_reasoning=settings["reasoning"].get("summary") is not None,
            seal_reasoning=seal.seal if seal is not None and sealed else None,
        )

    def continue_from(self, output: list[Item]) -> str:
        """Takes up a generation another worker began, from the output its log holds (which
        app/protocol/accumulate.py `continuable` allows); returns the text to go on from. The
        finished items stay as they are; the deltas of a message being written grow it, at the
        same place; an MCP call in flight is left to the tool loop (`interrupted`)."""
        if not output:
            return ""
        *finished, last = output
        if last["type"] == "mcp_call" and last.get("status") not in ("completed", "failed"):
            self.before = finished
            self.interrupted = McpCallOutput(
                len(finished),
                last["name"],
                last["server_label"],
                last["id"],
                [last["arguments"]],
                last.get("approval_request_id"),
            )
            self.items.append(self.interrupted)
            return ""
        if last["type"] == "tool_search_call" and last.get("status") != "completed":
            self.before = finished  # a search of the deferred tools changes nothing: it is made again
            arguments = json.dumps(last.get("arguments") or {})
            self.interrupted = ToolSearchCallOutput(len(finished), last["call_id"], last["id"], [arguments])
            self.items.append(self.interrupted)
            return ""
        if last["type"] in SEARCH_CALL_TYPES and last.get("status") not in ("completed", "failed"):
            self.before = finished  # a search is read-only: it is made again
            search: SearchCallOutput
            if last["type"] == "file_search_call":
                search = FileSearchCallOutput(len(finished), last["id"], queries=list(last.get("queries") or []))
            else:
                search = WebSearchCallOutput(len(finished), last["id"])
            self.interrupted = search
            self.items.append(search)
            return ""
        if last["type"] != "message" or last.get("status") != "in_progress":
            self.before = output  # between two steps of a tool loop
            return ""
        self.before = finished
        [part] = last["content"]
        cited = None
        if self.cites:  # (the markers it had are cut from its text already)
            cited = CitationFilter.resumed(self.citations, part["text"], list(part.get("annotations") or []))
        logprobs = list(part.get("logprobs") or [])
        self.items.append(MessageOutput(len(finished), last["id"], [part["text"]], logprobs, cited))
        return str(part["text"])

    def output_now(self) -> list[Item]:
        """The output items as they stand, the last one still being written."""
        return [
            *self.before,
            *[item.item("completed") for item in self.items[:-1]],
            *[item.item("in_progress") for item in self.items[-1:]],
        ]

    def on_chunk(self, chunk: dict[str, Any]) -> list[Event]:
        """Raises AnswerSteered at a steer's boundary."""
        events: list[Event] = []
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):
            self.timings_cached = _count(chunk["timings"].get("cache_n"))
        try:
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                reasoning = _text(delta.get("reasoning_content") or delta.get("reasoning"), "reasoning")
                if reasoning:
                    self.reasoning_chunks += 1
                    events += self._grow(ReasoningOutput, reasoning)
                if (content := _text(delta.get("content"), "content")) and self.grammar_tool is not None:
                    events += self._grow_grammar_call(self.grammar_tool, content)
                elif content:
                    events += self._grow(MessageOutput, content, _logprobs(choice))
                for call in delta.get("tool_calls") or []:
                    events += self._tool_call(call)
                if delta_carries_output(delta):
                    self.content_chunks += 1
                if choice.get("finish_reason"):
                    self.finish_reason = choice["finish_reason"]
        except AnswerSteered as steered:  # (what the chunk made before its boundary goes first)
            steered.events[:0] = events
            raise
        return events

    @property
    def _next_index(self) -> int:
        return len(self.before) + len(self.items)

    @property
    def _open(self) -> OutputItem | None:
        return self.items[-1] if self.items else None

    def _grow(
        self, kind: type[MessageOutput] | type[ReasoningOutput], text: str, logprobs: list[Item] | None = None
    ) -> list[Event]:
        events: list[Event] = []
        current = self._open
        if not isinstance(current, kind):
            events += self._next_item()
            if kind is ReasoningOutput:
                current = ReasoningOutput(self._next_index, self.summarise_reasoning, self.seal_reasoning)
            else:
                cited = CitationFilter(self.citations) if self.cites else None
                current = MessageOutput(output_index=self._next_index, citations=cited)
            self.items.append(current)
            events += current.started()
        if isinstance(current, MessageOutput):
            events += current.delta(text, logprobs)
        else:
            events.append(current.delta(text))
        return events

    def _grow_grammar_call(self, name: str, text: str) -> list[Event]:
        events: list[Event] = []
        current = self._open
        if not isinstance(current, GrammarToolCallOutput):
            events += self._next_item()
            current = GrammarToolCallOutput(self._next_index, new_id("call"), name)
            self.items.append(current)
            events += current.started()
        return [*events, current.delta(text)]

    def _tool_call(self, call: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        function = call.get("function") or {}
        index = call.get("index", 0)
        if index not in self._calls:
            name = _text(function.get("name"), "tool call name")
            is_hosted = self.tools.ref(name).kind in HOSTED_KINDS
            if (self.max_calls is not None and len(self._calls) >= self.max_calls) or (
                is_hosted and self.hosted_calls_left == 0
            ):
                self._calls[index] = None
            else:
                events += self._open_call(index, call, name)
        current = self._calls[index]
        arguments = _text(function.get("arguments"), "tool call arguments")
        if current is not None and arguments:
            if (delta := current.delta(arguments)) is not None:
                events.append(delta)
        return events

    def _open_call(self, index: int, call: dict[str, Any], runtime_name: str) -> list[Event]:
        events = self._next_item()
        call_id = _text(call.get("id"), "tool call id") or new_id("call")
        ref = self.tools.ref(runtime_name)
        current: CallOutput
        if ref.kind == "mcp":
            assert ref.namespace is not None  # (an MCP tool's is its server's label)
            mcp_kind = McpApprovalRequestOutput if ref.approval else McpCallOutput
            current = mcp_kind(self._next_index, ref.name, ref.namespace)
            self._count_hosted()
        elif ref.kind == "file_search":
            current = FileSearchCallOutput(self._next_index)
            self._count_hosted()
        elif ref.kind == "web_search":
            current = WebSearchCallOutput(self._next_index, function=ref.name)
            self._count_hosted()
        elif ref.kind == "tool_search" and not ref.client_search:
            current = ToolSearchCallOutput(self._next_index, call_id)
        elif ref.kind in ("shell", "local_shell", "apply_patch", "tool_search"):
            current = ClientToolCall(self._next_index, call_id, ref.kind, runtime_name)
        else:
            kind = CustomToolCallOutput if ref.kind == "custom" else FunctionCallOutput
            current = kind(self._next_index, call_id, ref.name, ref.namespace)
        self._calls[index] = current
        self.items.append(current)
        return events + current.started()

    def _count_hosted(self) -> None:
        if self.hosted_calls_left is not None:
            self.hosted_calls_left -= 1

    def _next_item(self) -> list[Event]:
        """The events that close the open item before another opens: the one output boundary,
        where a steer stops the answer (AnswerSteered) instead of opening the next item."""
        events = self._close_open("completed")
        if self.steered:
            self.stopped_for = STEERED
            self._closed = True
            raise AnswerSteered(events)
        self._last_done = False  # (the next item opens)
        return events

    def _close_open(self, status: str) -> list[Event]:
        if self._open is None or self._closed or self._last_done:
            return []
        last = self._open
        if isinstance(last, ClientToolCall):
            self.items.pop()
            return self._typed(last)
        return last.done(status)

    def _typed(self, call: ClientToolCall) -> list[Event]:
        """A client tool's call made into its typed items (their events), or refused."""
        try:
            made = call.typed()
        except CallRefused as refused:
            self.refused.append(RefusedCall(call.call_id, call.runtime_name, call.arguments, str(refused)))
            self._last_done = True
            return []
        self.items += made
        return [event for typed in made for event in typed.events()]

    def settle_client_calls(self) -> list[Event]:
        """At the answer's end: its last call, if a client tool's, made into its typed items or refused."""
        return self._close_open("completed") if isinstance(self._open, ClientToolCall) else []

    def add_after(self, fields: Item) -> MadeItem:
        """An item the server makes after this answer's items (a tool search's output)."""
        made = MadeItem(self._next_index, fields)
        self.items.append(made)
        return made

    def answer_text(self) -> str:
        """The text of this answer's messages."""
        return "".join("".join(item.parts) for item in self.items if isinstance(item, MessageOutput))

    def calls_to_make(self) -> list[HostedCallOutput]:
        """The hosted calls the model made in this answer (MCP calls, searches), to be made by the server."""
        return [item for item in self.items if isinstance(item, HostedCallOutput) and item.status is None]

    def asks_client(self) -> bool:
        """Whether this answer ends the response for the client to act: it called a function of
        the client's, or an MCP call waits for the client's approval."""
        client_kinds = (FunctionCallOutput, CustomToolCallOutput, McpApprovalRequestOutput, TypedCall)
        return any(isinstance(item, client_kinds) and not isinstance(item, MadeItem) for item in self.items)

    def close_answer(self) -> list[Event]:
        """The events that close this answer's open item, before its MCP calls are made."""
        return self._close_open("completed")

    def next_answer(self) -> None:
        """After this answer's MCP calls were made: its items are finished output, its usage
        counts with what came before, and the model's next answer opens items after them."""
        self.before += [item.item("completed") for item in self.items]
        self.search_texts |= {item.id: item.for_model for item in self.items if isinstance(item, SearchCallOutput)}
        self.before_usage = self.usage_object()
        self.items, self._calls = [], {}
        self.refused, self._last_done = [], False
        self.usage, self.finish_reason, self.timings_cached = None, None, None
        self.content_chunks = self.reasoning_chunks = 0

    def add_call(self, name: str, server_label: str, arguments: str) -> McpCallOutput:
        """An MCP call the server makes without the model asking now (one the client approved)."""
        call = McpCallOutput(self._next_index, name, server_label, parts=[arguments])
        self.items.append(call)
        self._last_done = False
        return call

    def add_finished(self, item: Item) -> int:
        """An output item made outside the model's answers (an MCP server's tool list); its output index."""
        index = self._next_index
        self.before.append(item)
        return index

    def close(self) -> tuple[list[Event], list[Item]]:
        """The closing events of a generation that ran to its end, and the final output items."""
        if self._closed:  # (stopped at a steer's boundary: every item is finished)
            return [], [*self.before, *[item.item("completed") for item in self.items]]
        status = "incomplete" if self.incomplete_reason else "completed"
        events = self._close_open(status)  # (a client tool's call is made into its typed items, or refused)
        if not self.items:  # an empty answer is still one (empty) message
            empty = MessageOutput(output_index=self._next_index)
            self.items.append(empty)
            events += [*empty.started(), *empty.done(status)]
        final = [item.item("completed") for item in self.items[:-1]] + [self.items[-1].item(status)]
        return events, [*self.before, *final]

    def partial_output(self) -> list[Item]:
        """Output items of a generation that stopped early (failed or cancelled)."""
        return [
            *self.before,
            *[item.item("completed") for item in self.items[:-1]],
            *[item.item("incomplete") for item in self.items[-1:]],
        ]

    @property
    def incomplete_reason(self) -> str | None:
        return self.stopped_for or FINISH_TO_INCOMPLETE.get(self.finish_reason or "")

    def usage_object(self) -> dict[str, Any]:
        """Usage as the runtime reported it, with what made the output before this run; what it
        left out of its report is counted here (a streaming server sends one token per chunk)."""
        own = self._own_usage()
        if self.before_usage is None:
            return own
        return usage_object(
            *(own[name] + self.before_usage[name] for name in ("input_tokens", "output_tokens")),
            *(
                own[group][name] + self.before_usage[group][name]
                for group, name in (
                    ("input_tokens_details", "cached_tokens"),
                    ("output_tokens_details", "reasoning_tokens"),
                )
            ),
        )

    def _own_usage(self) -> dict[str, Any]:
        if not self.usage:
            return usage_object(0, self.content_chunks, 0, self.reasoning_chunks)
        prompt = _count(self.usage.get("prompt_tokens")) or 0
        completion = _count(self.usage.get("completion_tokens"))
        completion = self.content_chunks if completion is None else completion
        cached = _count(_details(self.usage, "prompt_tokens_details").get("cached_tokens"))
        if cached is None:  # (llama.cpp's server says it in its timings)
            cached = self.timings_cached or 0
        reasoning = _count(_details(self.usage, "completion_tokens_details").get("reasoning_tokens"))
        return usage_object(prompt, completion, cached, reasoning or min(self.reasoning_chunks, completion))


def _text(value: Any, what: str) -> str:
    if value is None or isinstance(value, str):
        return value or ""
    raise RuntimeFailure(f"model runtime sent {what} that is not text: {value!r:.100}")


def _logprobs(choice: dict[str, Any]) -> list[Item]:
    """A chunk's token log probabilities (Chat Completions `logprobs.content`), as an output_text
    part holds them."""
    logprobs = choice.get("logprobs")
    listed = logprobs.get("content") if isinstance(logprobs, dict) else None
    if listed is None:
        return []
    if not isinstance(listed, list):
        raise RuntimeFailure(f"model runtime sent logprobs that are not a list: {listed!r:.100}")
    return [_logprob(entry, with_top=True) for entry in listed]


def _logprob(entry: Any, with_top: bool) -> Item:
    if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
        raise RuntimeFailure(f"model runtime sent a logprob without a token: {entry!r:.100}")
    logprob = entry.get("logprob")
    if not isinstance(logprob, int | float) or isinstance(logprob, bool):
        raise RuntimeFailure(f"model runtime sent a logprob that is not a number: {entry!r:.100}")
    token_bytes = entry.get("bytes")
    shaped: Item = {
        "token": entry["token"],
        "bytes": token_bytes if isinstance(token_bytes, list) else list(entry["token"].encode()),
        "logprob": float(logprob),
    }
    if with_top:
        shaped["top_logprobs"] = [_logprob(top, with_top=False) for top in entry.get("top_logprobs") or []]
    return shaped


def _count(value: Any) -> int | None:
    """A token count as reported, or None for anything that is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _details(usage: dict[str, Any], name: str) -> dict[str, Any]:
    details = usage.get(name)
    return details if isinstance(details, dict) else {}
