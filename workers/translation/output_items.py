"""The output items a generation produces, each with the stream events of its life: opened,
grown by deltas, done. Pure; `translate.py` decides which item a runtime chunk goes to.

Each item opens with `response.output_item.added` and ends with `response.output_item.done`,
with its own deltas between: the order the SDK's stream helper asserts (reference §8.4).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from app.protocol import client_tools, tool_search, web_search
from app.protocol.ids import Prefix, new_id
from app.protocol.shapes import Event, Item
from workers.translation.citations import CitationFilter
from workers.translation.tools import custom_input


@dataclass
class MessageOutput:
    """An assistant message with one output_text part; with `citations`, its text's citation
    markers become annotations (workers/translation/citations.py)."""

    output_index: int
    id: str = field(default_factory=lambda: new_id("msg"))
    # The text's pieces, joined when an item is made: appending to one string would copy it per token.
    parts: list[str] = field(default_factory=list)
    logprobs: list[Item] = field(default_factory=list)  # per token, when asked for
    citations: CitationFilter | None = None

    @property
    def annotations(self) -> list[Item]:
        return self.citations.annotations if self.citations is not None else []

    def item(self, status: str) -> Item:
        text = "".join(self.parts)
        content = [{"type": "output_text", "text": text, "annotations": self.annotations, "logprobs": self.logprobs}]
        return {"id": self.id, "type": "message", "status": status, "role": "assistant", "content": content}

    def started(self) -> list[Event]:
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [
            {"type": "response.output_item.added", "output_index": self.output_index, "item": self._opening()},
            {**self._where(), "type": "response.content_part.added", "part": part},
        ]

    def delta(self, text: str, logprobs: list[Item] | None = None) -> list[Event]:
        """`logprobs` as an output_text part holds them; a delta event carries them without bytes."""
        if self.citations is None:  # (the token path of nearly every answer: nothing more to do)
            return [self._delta(text, logprobs)]
        text, made = self.citations.feed(text)
        events = [self._delta(text, logprobs)] if text or logprobs else []
        first = len(self.annotations) - len(made)
        return events + [self._annotated(first + n, annotation) for n, annotation in enumerate(made)]

    def _delta(self, text: str, logprobs: list[Item] | None) -> Event:
        self.parts.append(text)
        if logprobs:
            self.logprobs += logprobs
        return {
            **self._where(),
            "type": "response.output_text.delta",
            "delta": text,
            "logprobs": _brief(logprobs) if logprobs else [],
        }

    def _annotated(self, index: int, annotation: Item) -> Event:
        return {
            **self._where(),
            "type": "response.output_text.annotation.added",
            "annotation_index": index,
            "annotation": annotation,
        }

    def done(self, status: str) -> list[Event]:
        held = self.citations.flush() if self.citations is not None else ""
        events = [self._delta(held, None)] if held else []
        item = self.item(status)
        text = item["content"][0]["text"]
        return [
            *events,
            {**self._where(), "type": "response.output_text.done", "text": text, "logprobs": _brief(self.logprobs)},
            {**self._where(), "type": "response.content_part.done", "part": item["content"][0]},
            {"type": "response.output_item.done", "output_index": self.output_index, "item": item},
        ]

    def _opening(self) -> Item:
        return {**self.item("in_progress"), "content": []}

    def _where(self) -> Event:
        return {"item_id": self.id, "output_index": self.output_index, "content_index": 0}


def _brief(logprobs: list[Item] | None) -> list[Item]:
    """Log probabilities as the text events carry them: token and logprob, without bytes."""
    return [
        {
            "token": entry["token"],
            "logprob": entry["logprob"],
            "top_logprobs": [{"token": top["token"], "logprob": top["logprob"]} for top in entry["top_logprobs"]],
        }
        for entry in logprobs or []
    ]


@dataclass
class ReasoningOutput:
    """The model's reasoning, as a reasoning item. Open models show their reasoning: it streams
    as one reasoning_text part, or, when the request asks for a summary (`reasoning.summary`),
    as one summary_text part, since open models write no separate summary. With `seal` (the
    request included reasoning.encrypted_content), the finished item carries it sealed."""

    output_index: int
    summarised: bool = False
    seal: Callable[[str], str] | None = None
    id: str = field(default_factory=lambda: new_id("rs"))
    parts: list[str] = field(default_factory=list)
    _sealed: str | None = None  # sealed once: every copy of the finished item carries the same token

    def item(self, status: str) -> Item:
        text = "".join(self.parts)
        item: Item = {"id": self.id, "type": "reasoning", "summary": [], "content": []}
        item["summary" if self.summarised else "content"] = [self._part(text)]
        if self.seal is not None and status != "in_progress":
            if self._sealed is None:
                self._sealed = self.seal(text)
            item["encrypted_content"] = self._sealed
        return item

    def started(self) -> list[Event]:
        opening = {"id": self.id, "type": "reasoning", "summary": [], "content": []}
        kind = "response.reasoning_summary_part.added" if self.summarised else "response.content_part.added"
        return [
            {"type": "response.output_item.added", "output_index": self.output_index, "item": opening},
            {**self._where(), "type": kind, "part": self._part("")},
        ]

    def delta(self, text: str) -> Event:
        self.parts.append(text)
        kind = "response.reasoning_summary_text.delta" if self.summarised else "response.reasoning_text.delta"
        return {**self._where(), "type": kind, "delta": text}

    def done(self, status: str) -> list[Event]:
        item = self.item(status)
        part = item["summary" if self.summarised else "content"][0]
        if self.summarised:
            text_done, part_done = "response.reasoning_summary_text.done", "response.reasoning_summary_part.done"
        else:
            text_done, part_done = "response.reasoning_text.done", "response.content_part.done"
        return [
            {**self._where(), "type": text_done, "text": part["text"]},
            {**self._where(), "type": part_done, "part": part},
            {"type": "response.output_item.done", "output_index": self.output_index, "item": item},
        ]

    def _part(self, text: str) -> Item:
        return {"type": "summary_text" if self.summarised else "reasoning_text", "text": text}

    def _where(self) -> Event:
        index = "summary_index" if self.summarised else "content_index"
        return {"item_id": self.id, "output_index": self.output_index, index: 0}


@dataclass
class FunctionCallOutput:
    """A call of one of the request's function tools; its arguments stream as JSON text."""

    output_index: int
    call_id: str
    name: str
    namespace: str | None = None
    id: str = field(default_factory=lambda: new_id("fc"))
    parts: list[str] = field(default_factory=list)  # of the arguments

    def item(self, status: str) -> Item:
        item = {
            "id": self.id,
            "type": "function_call",
            "status": status,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": "".join(self.parts),
        }
        if self.namespace is not None:
            item["namespace"] = self.namespace
        return item

    def started(self) -> list[Event]:
        return [
            {"type": "response.output_item.added", "output_index": self.output_index, "item": self.item("in_progress")}
        ]

    def delta(self, text: str) -> Event:
        self.parts.append(text)
        return {"type": "response.function_call_arguments.delta", **self._where(), "delta": text}

    def done(self, status: str) -> list[Event]:
        item = self.item(status)
        done = {"type": "response.function_call_arguments.done", **self._where(), "name": self.name}
        return [
            {**done, "arguments": item["arguments"]},
            {"type": "response.output_item.done", "output_index": self.output_index, "item": item},
        ]

    def _where(self) -> Event:
        return {"item_id": self.id, "output_index": self.output_index}


@dataclass
class CustomToolCallOutput:
    """A call of a custom tool. The model writes it as a function's JSON arguments, `{"input":
    "…"}`; the free-text input is known only once they are whole, so it streams as one delta."""

    output_index: int
    call_id: str
    name: str
    namespace: str | None = None
    id: str = field(default_factory=lambda: new_id("ctc"))
    parts: list[str] = field(default_factory=list)  # of the model's arguments

    def item(self, status: str) -> Item:
        item = {
            "id": self.id,
            "type": "custom_tool_call",
            "status": status,
            "call_id": self.call_id,
            "name": self.name,
            "input": custom_input("".join(self.parts)),
        }
        if self.namespace is not None:
            item["namespace"] = self.namespace
        return item

    def started(self) -> list[Event]:
        opening = {**self.item("in_progress"), "input": ""}
        return [{"type": "response.output_item.added", "output_index": self.output_index, "item": opening}]

    def delta(self, text: str) -> None:
        self.parts.append(text)

    def done(self, status: str) -> list[Event]:
        item = self.item(status)
        where = {"item_id": self.id, "output_index": self.output_index}
        return [
            {"type": "response.custom_tool_call_input.delta", **where, "delta": item["input"]},
            {"type": "response.custom_tool_call_input.done", **where, "input": item["input"]},
            {"type": "response.output_item.done", "output_index": self.output_index, "item": item},
        ]


@dataclass
class GrammarToolCallOutput(CustomToolCallOutput):
    """A call of a custom tool with a grammar: the model's answer, held to the grammar, is its
    input as written, so the input streams as it comes."""

    def item(self, status: str) -> Item:
        return {**super().item(status), "input": "".join(self.parts)}

    def delta(self, text: str) -> Event:  # type: ignore[override]
        self.parts.append(text)
        return {
            "type": "response.custom_tool_call_input.delta",
            "item_id": self.id,
            "output_index": self.output_index,
            "delta": text,
        }

    def done(self, status: str) -> list[Event]:
        item = self.item(status)
        where = {"item_id": self.id, "output_index": self.output_index}
        return [
            {"type": "response.custom_tool_call_input.done", **where, "input": item["input"]},
            {"type": "response.output_item.done", "output_index": self.output_index, "item": item},
        ]


class _ArgumentsWhole:
    """A call of which nothing streams while the model writes its arguments: they are gathered
    and read whole once the call is (its events are its own, made by its tool's kind)."""

    parts: list[str]

    @property
    def arguments(self) -> str:
        return "".join(self.parts)

    def started(self) -> list[Event]:
        return []

    def delta(self, text: str) -> None:
        self.parts.append(text)

    def done(self, status: str) -> list[Event]:
        return []


@dataclass
class McpCallOutput(_ArgumentsWhole):
    """A call of a remote MCP server's tool, which the server makes (workers/tool_loop/loop.py). Its
    events are the loop's, not the stream's: `opening()` once the model's arguments are whole
    (OpenAI sends them in one delta), `closing()` once the call answered."""

    output_index: int
    name: str
    server_label: str
    id: str = field(default_factory=lambda: new_id("mcp"))
    parts: list[str] = field(default_factory=list)  # of the arguments
    approval_request_id: str | None = None
    output: str | None = None
    error: dict[str, Any] | None = None
    status: str | None = None  # set once the call answered: completed or failed

    def item(self, status: str) -> Item:
        return {
            "id": self.id,
            "type": "mcp_call",
            "server_label": self.server_label,
            "name": self.name,
            "arguments": self.arguments,
            "approval_request_id": self.approval_request_id,
            "output": self.output,
            "error": self.error,
            "status": self.status or status,
        }

    def opening(self) -> list[Event]:
        """Once the model's arguments are whole: before the call is made."""
        opened = {key: value for key, value in self.item("in_progress").items() if key != "status"}
        where = {"item_id": self.id, "output_index": self.output_index}
        return [
            {
                "type": "response.output_item.added",
                "output_index": self.output_index,
                "item": opened | {"arguments": ""},
            },
            {"type": "response.mcp_call.in_progress", **where},
            {"type": "response.mcp_call_arguments.delta", **where, "delta": self.arguments},
            {"type": "response.mcp_call_arguments.done", **where, "arguments": self.arguments},
        ]

    def closing(self, output: str | None, error: dict[str, Any] | None) -> list[Event]:
        self.output, self.error = output, error
        self.status = "failed" if error is not None else "completed"
        where = {"item_id": self.id, "output_index": self.output_index}
        return [
            {"type": f"response.mcp_call.{self.status}", **where},
            {"type": "response.output_item.done", "output_index": self.output_index, "item": self.item(self.status)},
        ]


@dataclass
class McpApprovalRequestOutput:
    """A call of an MCP tool that waits for the client's approval: shown whole once its arguments
    are (OpenAI has no events of its own for it), and the response ends after it."""

    output_index: int
    name: str
    server_label: str
    id: str = field(default_factory=lambda: new_id("mcpr"))
    parts: list[str] = field(default_factory=list)

    def item(self, status: str) -> Item:
        return {
            "id": self.id,
            "type": "mcp_approval_request",
            "server_label": self.server_label,
            "name": self.name,
            "arguments": "".join(self.parts),
        }

    def started(self) -> list[Event]:
        return []

    def delta(self, text: str) -> None:
        self.parts.append(text)

    def done(self, status: str) -> list[Event]:
        item = self.item(status)
        return [
            {"type": "response.output_item.added", "output_index": self.output_index, "item": item},
            {"type": "response.output_item.done", "output_index": self.output_index, "item": item},
        ]


def mcp_list_tools_events(item: Item, output_index: int, failed: bool) -> tuple[list[Event], list[Event]]:
    """An `mcp_list_tools` item's events: before the server is asked (the item with no tools yet)
    and after it answered (`item` as it is then)."""
    where = {"item_id": item["id"], "output_index": output_index}
    opening = {**item, "tools": [], "error": None}
    return (
        [
            {"type": "response.output_item.added", "output_index": output_index, "item": opening},
            {"type": "response.mcp_list_tools.in_progress", **where},
        ],
        [
            {"type": f"response.mcp_list_tools.{'failed' if failed else 'completed'}", **where},
            {"type": "response.output_item.done", "output_index": output_index, "item": item},
        ],
    )


@dataclass
class _SearchCall(_ArgumentsWhole):
    """A search the server makes for the model (a kind of the tool loop), as OpenAI streams one:
    nothing while the model's arguments come; `_opened()` once they are whole (the item added,
    `in_progress`, `searching`), `closing()` once it answered (`completed`, the item done). What it
    found is kept in the item whatever `include` says; clients see it only where `include` asks
    (app/protocol/search_results.py). The loop hands it to the model with citation markers
    (`for_model`)."""

    ITEM_TYPE: ClassVar[str]
    ID_PREFIX: ClassVar[Prefix]

    output_index: int
    id: str = ""
    parts: list[str] = field(default_factory=list)  # of the arguments
    results: list[Item] | None = None
    for_model: str = ""  # what the model reads of the results (with citation markers)
    status: str | None = None  # set once it answered: completed or failed

    def __post_init__(self) -> None:
        self.id = self.id or new_id(self.ID_PREFIX)

    def item(self, status: str) -> Item:
        raise NotImplementedError

    def _opened(self) -> list[Event]:
        where = {"item_id": self.id, "output_index": self.output_index}
        return [
            {"type": "response.output_item.added", "output_index": self.output_index, "item": self.item("in_progress")},
            {"type": f"response.{self.ITEM_TYPE}.in_progress", **where},
            {"type": f"response.{self.ITEM_TYPE}.searching", **where},
        ]

    def closing(self, results: list[Item] | None, for_model: str) -> list[Event]:
        """`results` None: it failed."""
        self.results, self.for_model = results, for_model
        self.status = "failed" if results is None else "completed"
        where = {"item_id": self.id, "output_index": self.output_index}
        done = [{"type": f"response.{self.ITEM_TYPE}.completed", **where}] if results is not None else []
        return [
            *done,
            {"type": "response.output_item.done", "output_index": self.output_index, "item": self.item(self.status)},
        ]


@dataclass
class FileSearchCallOutput(_SearchCall):
    """A search of the request's vector stores (the tool loop's file_search kind), with its queries
    in the item from its opening."""

    ITEM_TYPE = "file_search_call"
    ID_PREFIX = "fs"
    queries: list[str] = field(default_factory=list)

    def item(self, status: str) -> Item:
        return {
            "id": self.id,
            "type": "file_search_call",
            "status": self.status or status,
            "queries": self.queries,
            "results": self.results,
        }

    def opening(self, queries: list[str]) -> list[Event]:
        self.queries = queries
        return self._opened()


@dataclass
class WebSearchCallOutput(_SearchCall):
    """A web search, or a page opened (the tool loop's web_search kind): the item added without its
    action, done with it (a search's `sources`, those the model read)."""

    ITEM_TYPE = "web_search_call"
    ID_PREFIX = "ws"
    function: str = web_search.FUNCTION_NAME  # which of the tool's functions the model called
    action: Item | None = None

    def item(self, status: str) -> Item:
        item: Item = {"id": self.id, "type": "web_search_call", "status": self.status or status}
        if self.status is not None:
            action = self.action or web_search.search_action("", None)  # (one whose arguments were lost)
            if action["type"] == "search":
                action = web_search.search_action(action["query"], self.results)
            item["action"] = action
            if self.results is not None:
                item["results"] = self.results
        return item

    def opening(self, action: Item) -> list[Event]:
        self.action = action
        return self._opened()


@dataclass
class ClientToolCall(_ArgumentsWhole):
    """The model's call of a tool the client runs that is not a function (shell, local_shell,
    apply_patch: app/protocol/client_tools.py). Nothing of it is streamed while its arguments come:
    once they are whole, `typed()` makes its typed items, or refuses it (CallRefused) without a
    trace, so that the model is told and asked again."""

    output_index: int
    call_id: str
    kind: str  # the tool's type
    runtime_name: str
    parts: list[str] = field(default_factory=list)  # of the arguments

    def item(self, status: str) -> Item:  # (never shown: a call in the making)
        return {"type": f"{self.kind}_call", "call_id": self.call_id, "status": status}

    def typed(self) -> list[TypedCall]:
        """Its typed items, from `output_index` on; CallRefused if its arguments make none."""
        if self.kind == "tool_search":
            arguments = client_tools.arguments_object(self.arguments)
            fields = [{"type": "tool_search_call", "execution": "client", "arguments": arguments}]
        elif self.kind == "shell":
            fields = [client_tools.shell_call(self.arguments)]
        elif self.kind == "local_shell":
            fields = [client_tools.local_shell_call(self.arguments)]
        else:
            fields = [
                {"type": "apply_patch_call", "operation": op} for op in client_tools.patch_operations(self.arguments)
            ]
        return [
            TypedCall(self.output_index + n, {"call_id": self.call_id if n == 0 else f"{self.call_id}_{n + 1}", **made})
            for n, made in enumerate(fields)
        ]


@dataclass
class TypedCall:
    """A typed call of a client's tool, made whole from the model's call: its events all at once."""

    output_index: int
    fields: Item  # its type, call_id and action or operation
    id: str = ""

    def __post_init__(self) -> None:
        self.id = self.id or new_id(TYPED_PREFIXES[self.fields["type"]])

    def item(self, status: str) -> Item:
        return {"id": self.id, **self.fields, "status": "completed"}

    def started(self) -> list[Event]:
        return []

    def delta(self, text: str) -> None:
        return None

    def done(self, status: str) -> list[Event]:
        return []

    def events(self) -> list[Event]:
        where = {"output_index": self.output_index}
        events: list[Event] = [
            {"type": "response.output_item.added", **where, "item": {**self.item(""), "status": "in_progress"}}
        ]
        for n, command in enumerate(
            self.fields.get("action", {}).get("commands", []) if self.fields["type"] == "shell_call" else []
        ):
            at = {**where, "command_index": n}
            events += [
                {"type": "response.shell_call_command.added", **at, "command": ""},
                {"type": "response.shell_call_command.delta", **at, "delta": command},
                {"type": "response.shell_call_command.done", **at, "command": command},
            ]
        return [*events, {"type": "response.output_item.done", **where, "item": self.item("completed")}]


@dataclass
class MadeItem(TypedCall):
    """An item the server made after an answer's (a tool search's output): nothing for the client."""


TYPED_PREFIXES: dict[str, Prefix] = {
    "shell_call": "sh",
    "local_shell_call": "lsh",
    "apply_patch_call": "apc",
    "tool_search_call": "tsc",
    "tool_search_output": "tso",
}


@dataclass
class ToolSearchCallOutput(_ArgumentsWhole):
    """A search of the deferred tools that the server makes (the tool loop's tool_search kind): the
    call item added once the model's query is whole (`opening()`), done once searched, with the
    `tool_search_output` that the kind adds after this answer's items (StreamTranslator.add_after)."""

    output_index: int
    call_id: str
    id: str = field(default_factory=lambda: new_id("tsc"))
    parts: list[str] = field(default_factory=list)  # of the arguments
    status: str | None = None  # set once searched

    def item(self, status: str) -> Item:
        return {
            "id": self.id,
            "type": "tool_search_call",
            "call_id": self.call_id,
            "execution": "server",
            "arguments": {"query": tool_search.query_of(self.arguments)},
            "status": self.status or status,
        }

    def opening(self) -> list[Event]:
        return [
            {"type": "response.output_item.added", "output_index": self.output_index, "item": self.item("in_progress")}
        ]

    def closing(self) -> list[Event]:
        self.status = "completed"
        return [
            {"type": "response.output_item.done", "output_index": self.output_index, "item": self.item("completed")}
        ]


SearchCallOutput = FileSearchCallOutput | WebSearchCallOutput
HostedCallOutput = McpCallOutput | FileSearchCallOutput | WebSearchCallOutput | ToolSearchCallOutput
CallOutput = (
    ClientToolCall
    | TypedCall
    | FunctionCallOutput
    | CustomToolCallOutput
    | McpCallOutput
    | McpApprovalRequestOutput
    | FileSearchCallOutput
    | WebSearchCallOutput
    | ToolSearchCallOutput
)
OutputItem = MessageOutput | ReasoningOutput | CallOutput
