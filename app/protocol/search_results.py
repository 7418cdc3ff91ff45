"""A file search's results: kept whole in the stored `file_search_call` item, because the model
reads them again in every later turn and a worker continuing the response after a lost one needs
them, but shown to a client only where it asked for `file_search_call.results` in `include`
(the response's create, or the read itself), as OpenAI shows them: `results: null` otherwise."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from typing import Any

from app.protocol.encoding import WireEvent, encode
from app.protocol.shapes import Item

SEARCH_RESULTS = "file_search_call.results"
_MARK = '"file_search_call"'  # in an event's text only where such an item is in it


def shows_results(include: Collection[str] | None) -> bool:
    return include is not None and SEARCH_RESULTS in include


def without_results(item: Item) -> Item:
    if item.get("type") == "file_search_call" and item.get("results") is not None:
        return {**item, "results": None}
    return item


def output_shown(output: list[Item], include: Collection[str] | None) -> list[Item]:
    return output if shows_results(include) else [without_results(item) for item in output]


def event_shown(event: WireEvent) -> WireEvent:
    """The event without search results (the item it carries, or its response's output)."""
    if _MARK not in event.json:
        return event
    data = event.data()
    if isinstance(data.get("item"), dict):
        data["item"] = without_results(data["item"])
    response = data.get("response")
    if isinstance(response, dict) and isinstance(response.get("output"), list):
        data["response"] = {**response, "output": [without_results(item) for item in response["output"]]}
    return WireEvent(event.sequence_number, event.type, encode(data))


def events_shown(
    events: AsyncIterator[list[WireEvent] | None], include: Collection[str] | None
) -> AsyncIterator[list[WireEvent] | None]:
    """A response's events as this client sees them."""
    return events if shows_results(include) else _without_results(events)


async def _without_results(events: AsyncIterator[list[WireEvent] | None]) -> AsyncIterator[list[WireEvent] | None]:
    try:
        async for batch in events:
            yield None if batch is None else [event_shown(event) for event in batch]
    finally:
        closing: Any = getattr(events, "aclose", None)  # the follower's subscription ends with it
        if closing is not None:
            await closing()
