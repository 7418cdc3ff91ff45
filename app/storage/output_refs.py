"""Closing events stored by reference to the output items.

When a response ends, its closing events repeat its output: `output_text.done` the text,
`content_part.done` the part, `output_item.done` the item, and the terminal event the whole
output, which the same statement stores as items. A long answer was stored five times in its
events. A closing event of a large answer is stored with that value left out, and where it was
(`output_at`, a character offset) and what it was (`output_path`, its path in the output array:
`{}` the whole array, `{2}` item 2, `{2,content,0,text}` its text); a read puts it back from the
items (app/storage/events.py), as the very text the followers got live. Small answers are stored
whole: for a few hundred bytes a reference costs the read more than it saves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.protocol import encoding
from app.protocol.shapes import Event
from app.protocol.vocabulary import TERMINAL_EVENT_TYPES

Path = list[str | int]

REFERENCE_FROM_BYTES = 2 * 1024  # a terminal event at least this long: its answer is stored by reference

# What no encoded event holds anywhere else: a NUL never reaches an event (the API refuses it,
# model output has it replaced), so this JSON string marks exactly the place left out.
_MARK = "\x00output\x00"
_MARK_JSON = orjson.dumps(_MARK).decode()


@dataclass(frozen=True, slots=True)
class Stored:
    payload: str
    output_at: int | None = None
    output_path: str | None = None  # comma-separated


def as_stored(events: Sequence[Event], encoded: Sequence[str], output: list[Event] | None) -> list[Stored]:
    """How each event is stored: whole, or (the closing events of a large answer that `output`
    ends) with its piece of the output left out."""
    whole = [Stored(text) for text in encoded]
    if output is None or not encoded or len(encoded[-1]) < REFERENCE_FROM_BYTES:
        return whole
    if any(next(iter(item), None) != "id" for item in output):  # read back with its id first
        return whole
    return [_by_reference(event, output) or one for event, one in zip(events, whole, strict=True)]


def _places(event: Event) -> tuple[list[str], Path] | None:
    """Where a closing event holds a piece of the output, and where the output holds it."""
    kind = event["type"]
    if kind in TERMINAL_EVENT_TYPES:
        return ["response", "output"], []
    if kind == "response.output_item.done":
        return ["item"], [event["output_index"]]
    index: int = event.get("output_index", -1)
    if kind == "response.content_part.done":
        return ["part"], [index, "content", event["content_index"]]
    if kind in ("response.output_text.done", "response.reasoning_text.done"):
        return ["text"], [index, "content", event["content_index"], "text"]
    if kind == "response.reasoning_summary_part.done":
        return ["part"], [index, "summary", event["summary_index"]]
    if kind == "response.reasoning_summary_text.done":
        return ["text"], [index, "summary", event["summary_index"], "text"]
    if kind == "response.function_call_arguments.done":
        return ["arguments"], [index, "arguments"]
    return None


def _by_reference(event: Event, output: list[Event]) -> Stored | None:
    places = _places(event)
    if places is None:
        return None
    in_event, in_output = places
    try:
        value = _at(output, in_output)
        if _at(event, in_event) != value:
            return None
    except (LookupError, TypeError):
        return None
    text = encoding.encode(_with(event, in_event, _MARK))
    at = text.index(_MARK_JSON)
    return Stored(text[:at] + text[at + len(_MARK_JSON) :], at, ",".join(map(str, in_output)))


def _at(value: Any, path: Sequence[str | int]) -> Any:
    for step in path:
        value = value[step]
    return value


def _with(event: Event, path: list[str], new: Any) -> Event:
    """A copy of the event with the value at `path` replaced (copied along the path only)."""
    step, *rest = path
    return {**event, step: _with(event[step], rest, new) if rest else new}
