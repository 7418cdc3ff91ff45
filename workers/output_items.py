"""The output items a generation produces, each with the stream events of its life: opened,
grown by deltas, done. Pure; `translate.py` decides which item a runtime chunk goes to.

Each item opens with `response.output_item.added` and ends with `response.output_item.done`,
with its own deltas between: the order the SDK's stream helper asserts (reference §8.4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.ids import new_id
from workers.runtime_tools import custom_input

Event = dict[str, Any]
Item = dict[str, Any]


@dataclass
class MessageOutput:
    """An assistant message with one output_text part."""

    output_index: int
    id: str = field(default_factory=lambda: new_id("msg"))
    # The text's pieces, joined when an item is made: appending to one string would copy it per token.
    parts: list[str] = field(default_factory=list)

    def item(self, status: str) -> Item:
        content = [{"type": "output_text", "text": "".join(self.parts), "annotations": [], "logprobs": []}]
        return {"id": self.id, "type": "message", "status": status, "role": "assistant", "content": content}

    def started(self) -> list[Event]:
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [
            {"type": "response.output_item.added", "output_index": self.output_index, "item": self._opening()},
            {**self._where(), "type": "response.content_part.added", "part": part},
        ]

    def delta(self, text: str) -> Event:
        self.parts.append(text)
        return {**self._where(), "type": "response.output_text.delta", "delta": text, "logprobs": []}

    def done(self, status: str) -> list[Event]:
        item = self.item(status)
        text = item["content"][0]["text"]
        return [
            {**self._where(), "type": "response.output_text.done", "text": text, "logprobs": []},
            {**self._where(), "type": "response.content_part.done", "part": item["content"][0]},
            {"type": "response.output_item.done", "output_index": self.output_index, "item": item},
        ]

    def _opening(self) -> Item:
        return {**self.item("in_progress"), "content": []}

    def _where(self) -> Event:
        return {"item_id": self.id, "output_index": self.output_index, "content_index": 0}


@dataclass
class ReasoningOutput:
    """The model's reasoning, as a reasoning item with one reasoning_text part (open models
    show their reasoning; there is no summary)."""

    output_index: int
    id: str = field(default_factory=lambda: new_id("rs"))
    parts: list[str] = field(default_factory=list)

    def item(self, status: str) -> Item:
        return {"id": self.id, "type": "reasoning", "summary": [], "content": [self._part()]}

    def started(self) -> list[Event]:
        return [
            {
                "type": "response.output_item.added",
                "output_index": self.output_index,
                "item": {**self.item("in_progress"), "content": []},
            },
            {**self._where(), "type": "response.content_part.added", "part": {"type": "reasoning_text", "text": ""}},
        ]

    def delta(self, text: str) -> Event:
        self.parts.append(text)
        return {**self._where(), "type": "response.reasoning_text.delta", "delta": text}

    def done(self, status: str) -> list[Event]:
        item = self.item(status)
        part = item["content"][0]
        return [
            {**self._where(), "type": "response.reasoning_text.done", "text": part["text"]},
            {**self._where(), "type": "response.content_part.done", "part": part},
            {"type": "response.output_item.done", "output_index": self.output_index, "item": item},
        ]

    def _part(self) -> Item:
        return {"type": "reasoning_text", "text": "".join(self.parts)}

    def _where(self) -> Event:
        return {"item_id": self.id, "output_index": self.output_index, "content_index": 0}


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


OutputItem = MessageOutput | ReasoningOutput | FunctionCallOutput | CustomToolCallOutput
