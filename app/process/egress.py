"""The egress guard: what this server connects to on someone else's say (an image URL in a
request, an account's webhook endpoint), never the host's own network.

Only http(s); every address the host resolves to must be a public one (loopback, private,
link-local — cloud metadata included —, shared, multicast and reserved ranges are refused)
unless the operator's allow list names its network; the connection then goes to the address
that was checked (no second lookup to rebind), with the URL's host as Host and TLS server name.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Destination:
    """A URL as the guard lets it be connected to: `url` names the checked address; `host` goes
    in the Host header and `server_name` (https) is the TLS server name, both the URL's host."""

    url: str
    host: str
    server_name: str | None


class EgressRefused(Exception):
    """Why a URL is not connected to (its message reads after "… was not …: ")."""


class EgressGuard:
    def __init__(self, allowed_networks: list[Network]) -> None:
        self.allowed_networks = allowed_networks

    @classmethod
    def from_config(cls, allowed: str) -> EgressGuard:
        """`allowed`: comma-separated networks (`10.0.0.0/8,127.0.0.1/32`)."""
        return cls([ipaddress.ip_network(net.strip()) for net in allowed.split(",") if net.strip()])

    async def destination(self, url: str) -> Destination:
        """Where to connect for `url`: the one address checked for its host."""
        target = httpx.URL(url)
        if target.scheme not in ("http", "https") or not target.host:
            raise EgressRefused("only http and https URLs are connected to")
        address = await self._checked_address(target)
        return Destination(
            str(target.copy_with(host=str(address))),
            target.netloc.decode("ascii"),
            target.host if target.scheme == "https" else None,
        )

    async def request(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes | None = None,
    ) -> httpx.Request:
        """An httpx request for `url` sent to its destination."""
        to = await self.destination(url)
        return client.build_request(
            method,
            to.url,
            headers={"Host": to.host, **headers},
            content=content,
            extensions={"sni_hostname": to.server_name} if to.server_name else {},
        )

    async def _checked_address(self, target: httpx.URL) -> Address:
        try:
            addresses = [ipaddress.ip_address(target.host)]
        except ValueError:
            port = target.port or (443 if target.scheme == "https" else 80)
            try:
                found = await asyncio.get_running_loop().getaddrinfo(target.host, port, type=socket.SOCK_STREAM)
            except OSError:
                raise EgressRefused(f"the host '{target.host}' could not be resolved") from None
            addresses = [ipaddress.ip_address(entry[4][0]) for entry in found]
        for address in addresses:
            if not self.allowed(address):
                raise EgressRefused(f"its host resolves to {address}, an address this server does not connect to")
        return addresses[0]

    def allowed(self, address: Address) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.allowed_networks) or address.is_global
