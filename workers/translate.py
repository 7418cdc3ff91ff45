"""Chat Completions chunks → Responses stream events and output items. Pure: no I/O, no clock.

Events come out without `sequence_number`; the event log numbers them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.ids import new_id
from app.protocol.response_object import usage_object

Event = dict[str, Any]
Item = dict[str, Any]

FINISH_TO_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


@dataclass
class TextMessageState:
    """The one assistant message being generated."""

    id: str = field(default_factory=lambda: new_id("msg"))
    output_index: int = 0
    text: str = ""

    def item(self, status: str) -> Item:
        content = [{"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}]
        return {"id": self.id, "type": "message", "status": status, "role": "assistant", "content": content}

    def started(self) -> list[Event]:
        return [
            {
                "type": "response.output_item.added",
                "output_index": self.output_index,
                "item": {**self.item("in_progress"), "content": []},
            },
            {
                "type": "response.content_part.added",
                "item_id": self.id,
                "output_index": self.output_index,
                "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []},
            },
        ]

    def delta(self, text: str) -> Event:
        self.text += text
        return {
            "type": "response.output_text.delta",
            "item_id": self.id,
            "output_index": self.output_index,
            "content_index": 0,
            "delta": text,
            "logprobs": [],
        }

    def done(self, status: str) -> list[Event]:
        item = self.item(status)
        return [
            {
                "type": "response.output_text.done",
                "item_id": self.id,
                "output_index": self.output_index,
                "content_index": 0,
                "text": self.text,
                "logprobs": [],
            },
            {
                "type": "response.content_part.done",
                "item_id": self.id,
                "output_index": self.output_index,
                "content_index": 0,
                "part": item["content"][0],
            },
            {"type": "response.output_item.done", "output_index": self.output_index, "item": item},
        ]


@dataclass
class StreamTranslator:
    """Folds a runtime's chunks into Responses events, then tells how the generation ended."""

    message: TextMessageState | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    content_chunks: int = 0

    def on_chunk(self, chunk: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content")
            if text:
                events += self._text(text)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return events

    def _text(self, text: str) -> list[Event]:
        self.content_chunks += 1
        events: list[Event] = []
        if self.message is None:
            self.message = TextMessageState()
            events += self.message.started()
        events.append(self.message.delta(text))
        return events

    def close(self) -> tuple[list[Event], list[Item]]:
        """The closing events of a generation that ran to its end, and the final output items."""
        events: list[Event] = []
        if self.message is None:  # an empty answer is still one (empty) message
            self.message = TextMessageState()
            events += self.message.started()
        status = "incomplete" if self.incomplete_reason else "completed"
        events += self.message.done(status)
        return events, [self.message.item(status)]

    def partial_output(self) -> list[Item]:
        """Output items of a generation that stopped early (failed or cancelled)."""
        return [] if self.message is None else [self.message.item("incomplete")]

    @property
    def incomplete_reason(self) -> str | None:
        return FINISH_TO_INCOMPLETE.get(self.finish_reason or "")

    def usage_object(self) -> dict[str, Any]:
        """Usage as the runtime reported it; what it left out of its report is counted here (a
        streaming server sends one token per content chunk)."""
        if not self.usage:
            return usage_object(0, self.content_chunks)
        prompt = self.usage.get("prompt_tokens") or 0
        completion = self.usage.get("completion_tokens", self.content_chunks)
        cached = (self.usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        reasoning = (self.usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
        return usage_object(prompt, completion, cached, reasoning)
