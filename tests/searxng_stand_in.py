"""A stand-in for SearXNG's JSON API (`GET /search?q=…&format=json`), on a loopback port in a
thread of the test process, as the server's web_search tool asks it. Each query is answered with
results from several domains, titled after the query; queries naming a misbehaviour answer as no
working SearXNG would: `down` (HTTP 500), `slow` (later than any test's timeout), `garbage` (not
JSON), `shapeless` (JSON without results), `refusing` (403: JSON not enabled), `enormous` (an answer
larger than the server reads). It records every
query it was asked, so a test can tell what was asked and how often.

It serves web pages too, at `/pages/NAME` (`PAGES`: HTML, plain text, bytes that are no text, a
page larger than any test's limit), recording each one fetched."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.conftest import free_port
from tests.threaded_server import ThreadedServer

DOMAINS = ("docs.python.org", "en.wikipedia.org", "blog.example.com", "news.example.org", "python.org", "w3.org")
SLOW_SECONDS = 5.0
TEA = (
    "<html><head><title>All about tea</title></head><body><h1>Tea</h1>"
    "<p>Tea came to Portugal from Macau in the 16th century.</p>"
    "<p>Green tea is steamed; black tea is oxidised.</p></body></html>"
)
PAGES: dict[str, tuple[str, bytes]] = {
    "tea": ("text/html; charset=utf-8", TEA.encode()),
    "notes": ("text/plain", b"Plain notes about coffee and tea."),
    "binary": ("application/octet-stream", bytes(range(256)) * 4),
    "huge": ("text/html", b"<p>" + b"x" * 300_000 + b"</p>"),
}


def results_for(query: str) -> list[dict[str, Any]]:
    """What the stand-in answers for a query: one result per domain, best first."""
    return [
        {
            "url": f"https://{domain}/{n}",
            "title": f"{query} — {domain}",
            "content": f"Passage {n} about {query}, from {domain}.",
            "engine": "stand-in",
            "score": 1.0 / (n + 1),
            "publishedDate": None,
        }
        for n, domain in enumerate(DOMAINS)
    ]


@dataclass
class SearxngStandIn:
    port: int = field(default_factory=free_port)
    queries: list[str] = field(default_factory=list)
    pages: list[str] = field(default_factory=list)  # those fetched, by name
    _server: ThreadedServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> SearxngStandIn:
        routes = [Route("/search", self._search), Route("/pages/{name}", self._page)]
        self._server = ThreadedServer(Starlette(routes=routes), self.port, "SearXNG stand-in")
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    async def _page(self, request: Request) -> Response:
        name = request.path_params["name"]
        self.pages.append(name)
        if name not in PAGES:
            return PlainTextResponse("no such page", status_code=404)
        media_type, body = PAGES[name]
        return Response(body, media_type=media_type)

    async def _search(self, request: Request) -> Response:
        query = request.query_params.get("q", "")
        self.queries.append(query)
        if request.query_params.get("format") != "json":
            return PlainTextResponse("html only", status_code=400)
        if "refusing" in query:
            return PlainTextResponse("Forbidden", status_code=403)
        if "down" in query:
            return PlainTextResponse("Internal Server Error", status_code=500)
        if "slow" in query:
            await asyncio.sleep(SLOW_SECONDS)
        if "garbage" in query:
            return PlainTextResponse("<html>not json</html>")
        if "enormous" in query:  # (past the 4 MiB a search's answer may take)
            return PlainTextResponse('{"results": [' + '{"url": "https://x.org", "title": "x"},' * 120_000 + "{}]}")
        if "shapeless" in query:
            return JSONResponse({"query": query, "answers": []})
        return JSONResponse({"query": query, "number_of_results": len(DOMAINS), "results": results_for(query)})
