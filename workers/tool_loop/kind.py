"""What the tool loop asks of each kind of call the server makes for a response (an MCP tool's,
a file search, a web search): what it makes ready before the model is asked, the events that open
a call (the call is known to be in flight once they are committed), the call made, and what
becomes of a call that was in flight when the worker making it stopped. And what the searches
share: the markers of those made before a continued loop (`keep_earlier_results`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from app.protocol import file_search, web_search
from app.protocol.shapes import Event, Item
from workers.translation.output_items import HostedCallOutput
from workers.translation.translate import StreamTranslator


class HostedKind(Protocol):
    def handles(self, call: HostedCallOutput) -> bool:
        """Whether the call is of this kind."""
        ...

    async def prepare(self, context: list[Item]) -> None:
        """Before the model is first asked: what the model is offered is ready (an MCP server's
        tools listed), from the context where it already holds it."""
        ...

    def opening(self, call: HostedCallOutput) -> list[Event]:
        """The events that open the call, once the model's arguments are whole."""
        ...

    async def make(self, call: HostedCallOutput) -> list[Event]:
        """Makes the call; the events that close it."""
        ...

    async def make_interrupted(self, call: HostedCallOutput) -> list[Event]:
        """A call that was in flight when the worker making it stopped: made again if that is
        safe, else ended failed (design invariant 4); the events that close it."""
        ...


# How the model read each kind of search's results: the text with markers, what a marker names.
_SEARCHES: dict[str, tuple[Callable[[list[Item], int], str], Callable[[Item], Item]]] = {
    "file_search_call": (file_search.for_the_model, file_search.citation_of),
    "web_search_call": (web_search.for_the_model, web_search.citation_of),
}


def keep_earlier_results(translator: StreamTranslator) -> None:
    """The markers of this response's searches before now (a continued loop's), in the order they
    were made, so that the next ones follow them, its answer's citations still name what they cite,
    and the model reads those results with the same markers as the worker before this one gave it."""
    for item in translator.before:
        if item["type"] not in _SEARCHES:
            continue
        for_the_model, citation_of = _SEARCHES[item["type"]]
        results = item.get("results")
        if results is not None:
            translator.search_texts[item["id"]] = for_the_model(results, len(translator.citations) + 1)
        translator.citations += [citation_of(result) for result in results or []]
