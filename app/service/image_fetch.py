"""Image URLs are fetched here, when the request arrives, never by the model server: a client
could otherwise make the GPU host fetch any address, internal ones included.

Through the egress guard (app/process/egress.py: public addresses only unless
RESPONSES_IMAGE_FETCH_ALLOW names their network, the connection to the address checked); each
redirect is checked the same way, at most three; the body must be an image type, at most 20 MiB,
within the time limit. Proxies from the environment are not used, since they would connect
elsewhere. The image then travels as a data: URL, checked as the client's own would be.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urljoin

import httpx

from app import errors
from app.process.egress import EgressGuard, EgressRefused
from app.protocol.images import MAX_IMAGE_BYTES, check_data_url, check_image, data_url, image_parts
from app.protocol.shapes import Item

MAX_REDIRECTS = 3


class ImageFetcher:
    def __init__(self, guard: EgressGuard, timeout: float) -> None:
        self.guard = guard
        self.timeout = timeout
        self._client = httpx.AsyncClient(trust_env=False, follow_redirects=False, timeout=timeout)

    @classmethod
    def from_config(cls, allowed: str, timeout: float) -> ImageFetcher:
        return cls(EgressGuard.from_config(allowed), timeout)

    async def close(self) -> None:
        await self._client.aclose()

    async def fetch(self, url: str, param: str) -> str:
        """The image at `url` as a data: URL; a 400 naming `param` for anything else."""
        try:
            async with asyncio.timeout(self.timeout):
                raw, media_type = await self._follow(url, param)
        except TimeoutError:
            raise _refused(param, url, f"it did not arrive within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise _refused(param, url, f"it could not be downloaded ({type(exc).__name__})") from None
        except EgressRefused as refused:
            raise _refused(param, url, str(refused)) from None
        if not media_type.startswith("image/"):
            raise _refused(param, url, f"it is {media_type or 'of no content type'}, not an image")
        return data_url(raw, check_image(raw, param))

    async def _follow(self, url: str, param: str) -> tuple[bytes, str]:
        for _ in range(MAX_REDIRECTS + 1):
            request = await self.guard.request(self._client, "GET", url, {"Accept": "image/*"})
            response = await self._client.send(request, stream=True)
            try:
                if response.is_redirect and "location" in response.headers:
                    url = urljoin(url, response.headers["location"])
                    continue
                if response.status_code != 200:
                    raise _refused(param, url, f"the server answered HTTP {response.status_code}")
                return await _body(response, param, url), response.headers.get("content-type", "")
            finally:
                await response.aclose()
        raise _refused(param, url, f"more than {MAX_REDIRECTS} redirects")


async def _body(response: httpx.Response, param: str, url: str) -> bytes:
    if int(response.headers.get("content-length") or 0) > MAX_IMAGE_BYTES:
        raise _refused(param, url, f"it is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB")
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_IMAGE_BYTES:
            raise _refused(param, url, f"it is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB")
        chunks.append(chunk)
    return b"".join(chunks)


def _refused(param: str, url: str, why: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(
        f"Invalid '{param}': the image at '{url[:200]}' was not fetched: {why}.", param=param, code="invalid_image_url"
    )


async def check_images(items: list[Item], fetcher: ImageFetcher | None) -> None:
    """Every image is checked before anything is stored; one given by URL is fetched here and
    goes on (and is stored) as the data: URL the model sees."""
    fetches = []
    for part, param in image_parts(items):
        url = part["image_url"]
        if url.startswith("data:"):
            check_data_url(url, param)
        elif fetcher is None:
            raise errors.InvalidRequest(
                f"Invalid '{param}': this server does not fetch image URLs; send the image as a data: URL.",
                param=param,
                code="unsupported_value",
            )
        else:
            fetches.append((part, fetcher.fetch(url, param)))
    if fetches:
        fetched = await asyncio.gather(*(fetch for _, fetch in fetches))
        for (part, _), url in zip(fetches, fetched, strict=True):
            part["image_url"] = url
