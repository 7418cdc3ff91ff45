"""About the least a server in Python between a client and its model runtime can cost: a TCP
relay on uvloop that copies bytes both ways (each client connection gets a runtime connection of
its own), parsing nothing, storing nothing, in a process of its own.

`bench/stream_benchmark.py --relay` streams the direct path's requests through it as well: on a
machine shared with the load generator and the runtime, what the relay adds to time to first
token is a floor for a server in Python that reads and writes every token (docs/benchmark.md).

    python bench/relay.py PORT UPSTREAM_PORT
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import free_port, wait_for_http


class _Upstream(asyncio.Protocol):
    """The runtime's side: what it sends goes to the client as it comes."""

    def __init__(self, client: asyncio.Transport) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        self.client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


class _Client(asyncio.Protocol):
    """The client's side: held until the runtime connection is open, then copied to it."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.upstream: asyncio.Transport | None = None
        self.early: list[bytes] = []
        self.gone = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
        # (held: a task nothing refers to may be collected before it ends)
        self.connecting = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            upstream, _ = await loop.create_connection(
                lambda: _Upstream(self.transport), "127.0.0.1", self.upstream_port
            )
        except OSError:  # the runtime is away: so is the relay, for this client
            self.transport.close()
            return
        if self.gone:  # the client left meanwhile
            upstream.close()
            return
        self.upstream = upstream
        for data in self.early:
            upstream.write(data)
        self.early.clear()

    def data_received(self, data: bytes) -> None:
        if self.upstream is None:
            self.early.append(data)
        else:
            self.upstream.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        if self.upstream is not None:
            self.upstream.close()


async def _serve(port: int, upstream_port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(upstream_port), "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


@contextmanager
def running_relay(upstream_port: int) -> Iterator[tuple[str, int]]:
    """The relay as a process in front of the runtime on `upstream_port`: its URL and pid."""
    port = free_port()
    process = subprocess.Popen([sys.executable, __file__, str(port), str(upstream_port)])
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{url}/_stats", process)  # (answered by the runtime, through the relay)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(10)


if __name__ == "__main__":
    uvloop.run(_serve(int(sys.argv[1]), int(sys.argv[2])))
