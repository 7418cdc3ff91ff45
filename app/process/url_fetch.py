"""URLs are fetched here (image and file URLs when the request arrives, web pages a web search
opens), never by the model server: a client, or a model, could otherwise make the GPU host fetch
any address, internal ones included.

Through the egress guard (app/process/egress.py: public addresses only unless
RESPONSES_IMAGE_FETCH_ALLOW names their network, the connection to the address checked); each
redirect is checked the same way, at most three; the body must be within its size limit and
arrive within the time limit. Proxies from the environment are not used, since they would
connect elsewhere.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit

import httpx

from app import errors
from app.process.egress import EgressGuard, EgressRefused

MAX_REDIRECTS = 3


@dataclass(frozen=True, slots=True)
class Fetched:
    body: bytes
    media_type: str  # as the server declared it, without parameters ('' if none)
    url: str  # where it was found, after redirects

    @property
    def filename(self) -> str:
        """The last segment of its URL's path ('' if none)."""
        return unquote(urlsplit(self.url).path.rsplit("/", 1)[-1])


class UrlFetcher:
    def __init__(self, guard: EgressGuard, timeout: float) -> None:
        self.guard = guard
        self.timeout = timeout
        self._client = httpx.AsyncClient(trust_env=False, follow_redirects=False, timeout=timeout)

    @classmethod
    def from_config(cls, allowed: str, timeout: float) -> UrlFetcher:
        return cls(EgressGuard.from_config(allowed), timeout)

    async def close(self) -> None:
        await self._client.aclose()

    async def fetch(self, url: str, param: str, *, what: str, accept: str, limit: int) -> Fetched:
        """What is at `url`, at most `limit` bytes; a 400 naming `param` (`what` says what it
        was meant to be: "image", "file") for anything that stops it."""
        try:
            async with asyncio.timeout(self.timeout):
                return await self._follow(url, param, what, accept, limit)
        except TimeoutError:
            raise refused(param, url, what, f"it did not arrive within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise refused(param, url, what, f"it could not be downloaded ({type(exc).__name__})") from None
        except EgressRefused as refusal:
            raise refused(param, url, what, str(refusal)) from None

    async def _follow(self, url: str, param: str, what: str, accept: str, limit: int) -> Fetched:
        for _ in range(MAX_REDIRECTS + 1):
            request = await self.guard.request(self._client, "GET", url, {"Accept": accept})
            response = await self._client.send(request, stream=True)
            try:
                if response.is_redirect and "location" in response.headers:
                    url = urljoin(url, response.headers["location"])
                    continue
                if response.status_code != 200:
                    raise refused(param, url, what, f"the server answered HTTP {response.status_code}")
                body = await _body(response, param, url, what, limit)
                media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
                return Fetched(body, media_type, url)
            finally:
                await response.aclose()
        raise refused(param, url, what, f"more than {MAX_REDIRECTS} redirects")


async def _body(response: httpx.Response, param: str, url: str, what: str, limit: int) -> bytes:
    too_large = f"it is larger than {limit:,} bytes"
    if int(response.headers.get("content-length") or 0) > limit:
        raise refused(param, url, what, too_large)
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise refused(param, url, what, too_large)
        chunks.append(chunk)
    return b"".join(chunks)


def refused(param: str, url: str, what: str, why: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(
        f"Invalid '{param}': the {what} at '{url[:200]}' was not fetched: {why}.",
        param=param,
        code=f"invalid_{what}_url",
    )
