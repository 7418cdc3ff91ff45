"""SearXNG as the search backend, through its JSON API (`GET /search?q=…&format=json`; the
instance must list `json` under `search.formats` in its settings.yml, else it answers 403).

The operator configures its address (RESPONSES_WEB_SEARCH_URL), as it does a runtime's: it is
asked directly, not through the egress guard (an instance on the operator's own network is the
usual case). Only the results of the answer's first page are read; a result without an http(s)
address or a title is skipped; an answer of any other shape is a failed search.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from app.protocol.shapes import Item
from app.web_search.backend import SearchFailed

MAX_ANSWER_BYTES = 4 * 1024 * 1024


class SearxngBackend:
    def __init__(self, url: str, timeout: float) -> None:
        self._search_url = url.rstrip("/") + "/search"
        self._client = httpx.AsyncClient(timeout=timeout, follow_redirects=False)

    async def close(self) -> None:
        await self._client.aclose()

    async def search(self, query: str) -> list[Item]:
        try:
            async with self._client.stream(
                "GET", self._search_url, params={"q": query, "format": "json", "pageno": 1}
            ) as answer:
                if answer.status_code == 403:
                    raise SearchFailed("the search backend refused JSON (SearXNG needs json in search.formats)")
                if answer.status_code != 200:
                    raise SearchFailed(f"the search backend answered HTTP {answer.status_code}")
                body = await _read(answer)
        except httpx.TimeoutException:
            raise SearchFailed("the search backend did not answer in time") from None
        except httpx.HTTPError as failed:
            raise SearchFailed(f"the search backend could not be reached ({type(failed).__name__})") from None
        return _results(body)


async def _read(answer: httpx.Response) -> bytes:
    body = bytearray()
    async for piece in answer.aiter_bytes():
        body += piece
        if len(body) > MAX_ANSWER_BYTES:
            raise SearchFailed("the search backend's answer was too large")
    return bytes(body)


def _results(body: bytes) -> list[Item]:
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        raise SearchFailed("the search backend did not answer JSON") from None
    results = parsed.get("results") if isinstance(parsed, dict) else None
    if not isinstance(results, list):
        raise SearchFailed("the search backend's answer has no list of results")
    found = []
    for result in results:
        if not isinstance(result, dict):
            continue
        url, title, content = result.get("url"), result.get("title"), result.get("content")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or not isinstance(title, str):
            continue
        snippet = content.strip() if isinstance(content, str) else ""
        found.append({"url": url, "title": title.strip(), "snippet": snippet})
    return found
