"""Image URLs are fetched here, when the request arrives, never by the model server: a client
could otherwise make the GPU host fetch any address, internal ones included.

The egress guard: only http(s); every address the host resolves to must be a public one
(loopback, private, link-local — cloud metadata included —, shared, multicast and reserved ranges
are refused) unless RESPONSES_IMAGE_FETCH_ALLOW names its network; the connection goes to the
address that was checked (no second lookup to rebind); each redirect is checked the same way, at
most three; the body must be an image type, at most 20 MiB, within the time limit. Proxies from
the environment are not used, since they would connect elsewhere. The image then travels as a
data: URL, checked as the client's own would be.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urljoin

import httpx

from app import errors
from app.protocol.images import MAX_IMAGE_BYTES, check_data_url, check_image, data_url, image_parts
from app.protocol.input_items import Item

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_REDIRECTS = 3


class ImageFetcher:
    def __init__(self, allowed_networks: list[Network], timeout: float) -> None:
        self.allowed_networks = allowed_networks
        self.timeout = timeout
        self._client = httpx.AsyncClient(trust_env=False, follow_redirects=False, timeout=timeout)

    @classmethod
    def from_config(cls, allowed: str, timeout: float) -> ImageFetcher:
        networks = [ipaddress.ip_network(net.strip()) for net in allowed.split(",") if net.strip()]
        return cls(networks, timeout)

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
        if not media_type.startswith("image/"):
            raise _refused(param, url, f"it is {media_type or 'of no content type'}, not an image")
        return data_url(raw, check_image(raw, param))

    async def _follow(self, url: str, param: str) -> tuple[bytes, str]:
        for _ in range(MAX_REDIRECTS + 1):
            target = httpx.URL(url)
            if target.scheme not in ("http", "https") or not target.host:
                raise _refused(param, url, "only http and https URLs are fetched")
            address = await self._checked_address(target, param, url)
            request = self._client.build_request(
                "GET",
                target.copy_with(host=str(address)),
                headers={"Host": target.netloc.decode("ascii"), "Accept": "image/*"},
                extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
            )
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

    async def _checked_address(self, target: httpx.URL, param: str, url: str) -> Address:
        try:
            addresses = [ipaddress.ip_address(target.host)]
        except ValueError:
            port = target.port or (443 if target.scheme == "https" else 80)
            try:
                found = await asyncio.get_running_loop().getaddrinfo(target.host, port, type=socket.SOCK_STREAM)
            except OSError:
                raise _refused(param, url, f"the host '{target.host}' could not be resolved") from None
            addresses = [ipaddress.ip_address(entry[4][0]) for entry in found]
        for address in addresses:
            if not self._allowed(address):
                raise _refused(
                    param, url, f"its host resolves to {address}, an address this server does not fetch from"
                )
        return addresses[0]

    def _allowed(self, address: Address) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.allowed_networks) or address.is_global


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
