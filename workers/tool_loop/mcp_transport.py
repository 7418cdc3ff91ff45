"""The MCP client's HTTP transport through the egress guard (app/process/egress.py): each request,
the first and every later one of a session, goes to the address checked for its host, or is
refused before it leaves, so an MCP server chosen by a caller cannot be the host's own network
unless the operator allows it (RESPONSES_MCP_ALLOW)."""

from __future__ import annotations

import httpx2

from app.process.egress import EgressGuard


class GuardedTransport(httpx2.AsyncBaseTransport):
    def __init__(self, guard: EgressGuard) -> None:
        self._guard = guard
        self._inner = httpx2.AsyncHTTPTransport(trust_env=False)
        # The last HTTP error status the server answered: the SDK reports it as a JSON-RPC error
        # without the status, which tells a server without this transport (405) from others.
        self.refused_with: int | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        to = await self._guard.destination(str(request.url))  # (EgressRefused: the link reads it)
        request.url = httpx2.URL(to.url)
        request.headers["Host"] = to.host
        if to.server_name:
            request.extensions = {**request.extensions, "sni_hostname": to.server_name}
        response = await self._inner.handle_async_request(request)
        if response.status_code >= 400:
            self.refused_with = response.status_code
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
