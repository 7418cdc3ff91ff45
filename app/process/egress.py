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

import httpx

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class EgressRefused(Exception):
    """Why a URL is not connected to (its message reads after "… was not …: ")."""


class EgressGuard:
    def __init__(self, allowed_networks: list[Network]) -> None:
        self.allowed_networks = allowed_networks

    @classmethod
    def from_config(cls, allowed: str) -> EgressGuard:
        """`allowed`: comma-separated networks (`10.0.0.0/8,127.0.0.1/32`)."""
        return cls([ipaddress.ip_network(net.strip()) for net in allowed.split(",") if net.strip()])

    async def request(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes | None = None,
    ) -> httpx.Request:
        """A request for `url` sent to the one address checked for its host."""
        target = httpx.URL(url)
        if target.scheme not in ("http", "https") or not target.host:
            raise EgressRefused("only http and https URLs are connected to")
        address = await self._checked_address(target)
        return client.build_request(
            method,
            target.copy_with(host=str(address)),
            headers={"Host": target.netloc.decode("ascii"), **headers},
            content=content,
            extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
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
