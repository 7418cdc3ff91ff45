"""Events stored by reference to what the log or the output items hold already.

When a response ends, its closing events repeat its output: `output_text.done` the text,
`content_part.done` the part, `output_item.done` the item, and the terminal event the whole
output, which the same statement stores as items. A long answer was stored five times in its
events. A closing event of a large answer is stored with that value left out, and where it was
(`output_at`, a character offset) and what it was (`output_path`, its path in the output array:
`{}` the whole array, `{2}` item 2, `{2,content,0,text}` its text); a read puts it back from the
items (app/storage/events.py), as the very text the followers got live. Small answers are stored
whole: for a few hundred bytes a reference costs the read more than it saves.

A response opens with two events that carry the same response object (`created` then
`in_progress`, or a background one's `created` then `queued`), its settings and tools echoed
whole: the second is stored with the object left out, `output_path` `{response}`, and a read
takes it from the event before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.protocol import encoding
from app.protocol.encoding import WireEvent
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
    """How each event is stored: whole, with its piece of the output left out (the closing
    events of a large answer that `output` ends), or with the response object of the event
    before it left out."""
    stored = _opening_by_reference([event["type"] for event in events], encoded, ["}"] * len(encoded))
    if output is None or not encoded or len(encoded[-1]) < REFERENCE_FROM_BYTES:
        return stored
    if any(next(iter(item), None) != "id" for item in output):  # read back with its id first
        return stored
    return [_by_reference(event, output) or one for event, one in zip(events, stored, strict=True)]


def numbered_as_stored(events: Sequence[WireEvent]) -> list[Stored]:
    """Events numbered already (a create's opening ones) as stored: whole, or without the
    response object of the event before them."""
    tails = [f',"sequence_number":{event.sequence_number}}}' for event in events]
    return _opening_by_reference([event.type for event in events], [event.json for event in events], tails)


OPENED_AGAIN = frozenset({"response.in_progress", "response.queued"})
RESPONSE_OBJECT = "response"  # the output_path of an event whose response object is the one before it's


def _opening_by_reference(types: Sequence[str], texts: Sequence[str], tails: Sequence[str]) -> list[Stored]:
    """Each event whole, but an opening event whose response object is, to the character, that of
    the event stored whole before it in the batch: that one without it. `tails[n]` is what
    follows the object in `texts[n]` (its closing brace, or its sequence number and the brace).
    Only an opening event's type leads to reading the texts: a batch of deltas costs a lookup each."""
    stored = [Stored(text) for text in texts]
    for n in range(1, len(texts)):
        if types[n] not in OPENED_AGAIN or stored[n - 1].output_at is not None:
            continue
        before, this = (
            _response_object(types[n - 1], texts[n - 1], tails[n - 1]),
            _response_object(types[n], texts[n], tails[n]),
        )
        if before is not None and before == this:
            at = len(_object_prefix(types[n]))
            stored[n] = Stored(texts[n][:at] + tails[n], at, RESPONSE_OBJECT)
    return stored


def _object_prefix(kind: str) -> str:
    return f'{{"type":"{kind}","response":'


def _response_object(kind: str, text: str, tail: str) -> str | None:
    """The response object of an encoded lifecycle event, from its prefix to its tail, as the
    read takes it (app/storage/events.py); None for any other event."""
    prefix = _object_prefix(kind)
    if not kind.startswith("response.") or not text.startswith(prefix) or not text.endswith(tail):
        return None
    return text[len(prefix) : len(text) - len(tail)]


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
