"""The tool loop's web_search kind: the model's call asks the configured search backend
(app/web_search/) for its query, `site:`-scoped where the tool allows one domain; the results the
tool's `filters.allowed_domains` lets through, as many as its `search_context_size` says, are
what the model reads, each with a citation marker (the markers become `url_citation`
annotations: the translator's citations). The call is a `web_search_call` item, opened as OpenAI
streams it and closed with its action (the query, and the sources the model was given).

A backend that is down, slow or answers garbage fails the call: the model is told, and the
response goes on (nothing is retried against a backend that answered). A call in flight when its
worker stopped cannot be made again, for its query was never stored (OpenAI's opening events
carry no action): it ends failed, and the model is told to search again if it needs to.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from app.protocol.response_object import ResponseRecord
from app.protocol.shapes import Event, Item
from app.protocol.web_search import (
    RESULTS_BY_CONTEXT,
    allowed_domains,
    citation_of,
    for_the_model,
    is_allowed,
    query_of,
)
from app.web_search.backend import SearchFailed
from workers.state import WorkerState
from workers.translation.output_items import HostedCallOutput, WebSearchCallOutput
from workers.translation.translate import StreamTranslator

log = logging.getLogger(__name__)


@dataclass
class WebSearchKind:
    state: WorkerState
    record: ResponseRecord
    translator: StreamTranslator

    @property
    def tool(self) -> dict[str, Any]:
        return next(tool for tool in self.record.settings["tools"] if tool["type"].startswith("web_search"))

    def handles(self, call: HostedCallOutput) -> bool:
        return isinstance(call, WebSearchCallOutput)

    async def prepare(self, context: list[Item]) -> None:
        """The markers of this response's searches before now (a continued loop's), as
        FileSearchKind.prepare keeps them."""
        for item in self.translator.before:
            if item["type"] == "web_search_call":
                results = item.get("results")
                if results is not None:
                    first_marker = len(self.translator.citations) + 1
                    self.translator.search_texts[item["id"]] = for_the_model(results, first_marker)
                self.translator.citations += [citation_of(result) for result in results or []]

    def opening(self, call: HostedCallOutput) -> list[Event]:
        assert isinstance(call, WebSearchCallOutput)
        return call.opening(query_of(call.arguments))

    async def make(self, call: HostedCallOutput) -> list[Event]:
        assert isinstance(call, WebSearchCallOutput)
        if not call.query:
            return call.closing(None, "The web search was called without a query: give it one.")
        try:
            results = await self._search(call.query)
        except SearchFailed as failed:
            log.warning("response %s: web search failed: %s", self.record.id, failed)
            return call.closing(None, f"The web search failed: {failed}. Answer without it, or try again later.")
        first_marker = len(self.translator.citations) + 1
        self.translator.citations += [citation_of(result) for result in results]
        return call.closing(results, for_the_model(results, first_marker))

    async def make_interrupted(self, call: HostedCallOutput) -> list[Event]:
        assert isinstance(call, WebSearchCallOutput)
        return call.closing(None, "The web search was interrupted before it answered: search again if you need it.")

    async def _search(self, query: str) -> list[Item]:
        if self.state.web_search is None:  # (a worker configured unlike the API that took the request)
            raise SearchFailed("this server has no search backend configured")
        tool = self.tool
        domains = allowed_domains(tool)
        asked = f"site:{domains[0]} {query}" if len(domains) == 1 else query
        found = await self.state.web_search.search(asked)
        kept = [result for result in found if is_allowed(result["url"], domains)]
        return kept[: RESULTS_BY_CONTEXT[tool.get("search_context_size", "medium")]]
