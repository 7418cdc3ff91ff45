"""What a search found: kept whole in its stored item (a `file_search_call`'s `results`, a
`web_search_call`'s `results` and `action.sources`), because the model reads it again in every
later turn and a worker continuing the response after a lost one needs it, but shown to a client
only where it asked for it in `include` (the response's create, or the read itself), as OpenAI
shows it: a file search's `results: null`, a web search's action without `sources`, otherwise."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from typing import Any

from app.protocol.encoding import WireEvent, encode
from app.protocol.shapes import Item

SEARCH_RESULTS = "file_search_call.results"
WEB_SEARCH_SOURCES = "web_search_call.action.sources"
WEB_SEARCH_RESULTS = "web_search_call.results"  # (ours: OpenAI's schema names no such field)
_SHOWN_BY = (SEARCH_RESULTS, WEB_SEARCH_SOURCES, WEB_SEARCH_RESULTS)
_MARKS = ('"file_search_call"', '"web_search_call"')  # in an event's text only where such an item is in it


def shows_all(include: Collection[str] | None) -> bool:
    return include is not None and all(name in include for name in _SHOWN_BY)


def item_shown(item: Item, include: Collection[str] | None) -> Item:
    """The item as a client with this `include` sees it."""
    kind = item.get("type")
    include = include or ()
    if kind == "file_search_call" and item.get("results") is not None and SEARCH_RESULTS not in include:
        return {**item, "results": None}
    if kind != "web_search_call":
        return item
    if "results" in item and WEB_SEARCH_RESULTS not in include:
        item = {key: value for key, value in item.items() if key != "results"}
    action = item.get("action")
    if isinstance(action, dict) and "sources" in action and WEB_SEARCH_SOURCES not in include:
        item = {**item, "action": {key: value for key, value in action.items() if key != "sources"}}
    return item


def output_shown(output: list[Item], include: Collection[str] | None) -> list[Item]:
    return output if shows_all(include) else [item_shown(item, include) for item in output]


def event_shown(event: WireEvent, include: Collection[str] | None) -> WireEvent:
    """The event as a client with this `include` sees it (the item it carries, or its response's output)."""
    if not any(mark in event.json for mark in _MARKS):
        return event
    data = event.data()
    if isinstance(data.get("item"), dict):
        data["item"] = item_shown(data["item"], include)
    response = data.get("response")
    if isinstance(response, dict) and isinstance(response.get("output"), list):
        data["response"] = {**response, "output": output_shown(response["output"], include)}
    return WireEvent(event.sequence_number, event.type, encode(data))


def events_shown(
    events: AsyncIterator[list[WireEvent] | None], include: Collection[str] | None
) -> AsyncIterator[list[WireEvent] | None]:
    """A response's events as this client sees them."""
    return events if shows_all(include) else _shown(events, include)


async def _shown(
    events: AsyncIterator[list[WireEvent] | None], include: Collection[str] | None
) -> AsyncIterator[list[WireEvent] | None]:
    try:
        async for batch in events:
            yield None if batch is None else [event_shown(event, include) for event in batch]
    finally:
        closing: Any = getattr(events, "aclose", None)  # the follower's subscription ends with it
        if closing is not None:
            await closing()
