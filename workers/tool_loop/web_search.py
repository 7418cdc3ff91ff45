"""The tool loop's web_search kind. A search asks the configured backend (app/web_search/) for
its query, `site:`-scoped where the tool allows one domain; the results the tool's
`filters.allowed_domains` lets through, as many as its `search_context_size` says, are what the
model reads, each with a citation marker (the markers become `url_citation` annotations: the
translator's citations). A page opened (`open_page`) or searched for a pattern (`find_in_page`)
is fetched through the egress guard, if the tool allows its domain; the model reads its text, or
the passages around the pattern, with the page's marker. Each call is a `web_search_call` item,
opened as OpenAI streams it and closed with its action.

A backend or a page that is down, slow, refused or answers garbage fails the call: the model is
told, and the response goes on (nothing is retried once it answered). A call in flight when its
worker stopped cannot be made again, for its arguments were never stored (OpenAI's opening events
carry no action): it ends failed, and the model is told to call it again if it needs to.
"""

from __future__ import annotations

import html
import logging
import re
from dataclasses import dataclass
from typing import Any

from app import errors
from app.documents.formats import DocumentRefused, read_html, read_text
from app.protocol.response_object import ResponseRecord
from app.protocol.shapes import Event, Item
from app.protocol.web_search import (
    PAGE_CHARS_BY_CONTEXT,
    RESULTS_BY_CONTEXT,
    SNIPPET_CHARS,
    action_of,
    allowed_domains,
    citation_of,
    for_the_model,
    is_allowed,
    passages,
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
        """Nothing to make ready (the earlier searches' markers are the loop's: kind.keep_earlier_results)."""

    def opening(self, call: HostedCallOutput) -> list[Event]:
        assert isinstance(call, WebSearchCallOutput)
        return call.opening(action_of(call.function, call.arguments))

    async def make(self, call: HostedCallOutput) -> list[Event]:
        assert isinstance(call, WebSearchCallOutput) and call.action is not None
        action = call.action
        try:
            if action["type"] == "search":
                results = await self._search(action["query"])
            else:
                results = await self._page(action)
        except SearchFailed as failed:
            log.warning("response %s: web search failed: %s", self.record.id, failed)
            return call.closing(None, f"The web search failed: {failed}. Answer without it, or try again later.")
        first_marker = len(self.translator.citations) + 1
        self.translator.citations += [citation_of(result) for result in results]
        if action["type"] == "find_in_page" and not results:
            return call.closing(results, f"'{action['pattern']}' is not in the page.")
        return call.closing(results, for_the_model(results, first_marker))

    async def make_interrupted(self, call: HostedCallOutput) -> list[Event]:
        assert isinstance(call, WebSearchCallOutput)
        return call.closing(None, "The web search was interrupted before it answered: search again if you need it.")

    async def _search(self, query: str) -> list[Item]:
        if not query:
            raise SearchFailed("it was called without a query")
        if self.state.web_search is None:  # (a worker configured unlike the API that took the request)
            raise SearchFailed("this server has no search backend configured")
        tool = self.tool
        domains = allowed_domains(tool)
        asked = f"site:{domains[0]} {query}" if len(domains) == 1 else query
        found = await self.state.web_search.search(asked)
        kept = [result for result in found if is_allowed(result["url"], domains)]
        kept = kept[: RESULTS_BY_CONTEXT[tool.get("search_context_size", "medium")]]
        return [{**result, "snippet": result["snippet"][:SNIPPET_CHARS]} for result in kept]

    async def _page(self, action: Item) -> list[Item]:
        """The page's text as one result (open_page), or its passages around the pattern (find_in_page)."""
        url = action["url"]
        if not url.startswith(("http://", "https://")):
            raise SearchFailed("a page's address must begin with http:// or https://")
        if not is_allowed(url, allowed_domains(self.tool)):
            raise SearchFailed("the page is not in the domains this search may read")
        if self.state.page_fetcher is None or self.tool.get("external_web_access") is False:
            raise SearchFailed("this search reads no live page")
        try:
            fetched = await self.state.page_fetcher.fetch(
                url, "url", what="page", accept="text/html, text/*;q=0.9", limit=self.state.settings.web_fetch_max_bytes
            )
        except errors.InvalidRequest as refused:
            raise SearchFailed(refused.message.removeprefix("Invalid 'url': ").rstrip(".")) from None
        try:
            text = read_html(fetched.body) if "html" in fetched.media_type else read_text(fetched.body)
        except DocumentRefused:
            raise SearchFailed(f"the page is not text ({fetched.media_type or 'no type given'})") from None
        title = _title(fetched.body) or fetched.url
        if action["type"] == "find_in_page":
            return [
                {"url": fetched.url, "title": title, "snippet": found} for found in passages(text, action["pattern"])
            ]
        size = self.tool.get("search_context_size", "medium")
        return [{"url": fetched.url, "title": title, "snippet": text[: PAGE_CHARS_BY_CONTEXT[size]]}]


def _title(body: bytes) -> str:
    found = re.search(rb"<title[^>]*>(.*?)</title>", body[:65536], re.IGNORECASE | re.DOTALL)
    return html.unescape(found.group(1).decode("utf-8", "replace")).strip()[:300] if found else ""
