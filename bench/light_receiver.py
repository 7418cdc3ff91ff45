"""A webhook receiver for the benchmarks: a process of its own with a bare HTTP/1.1 parser on
asyncio, so that receiving costs the machine far less than the server sending (a Starlette
receiver spends as much CPU a request as the sender). It answers 200 to every POST and appends
`webhook-id arrival-time` lines to a file.

    python bench/light_receiver.py PORT FILE
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import uvloop


class _Connection(asyncio.Protocol):
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
            length = int(fields.get("content-length", "0"))
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self.log.append(f"{fields.get('webhook-id', '')} {time.time():.6f}\n")
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")


async def _serve(port: int, path: Path) -> None:
    log: list[str] = []
    server = await asyncio.get_running_loop().create_server(lambda: _Connection(log), "127.0.0.1", port, backlog=4096)
    async with server:
        with path.open("a") as out:
            while True:
                await asyncio.sleep(0.05)
                if log:
                    out.write("".join(log))
                    out.flush()
                    log.clear()


class LightReceiver:
    """Runs the receiver as a process; `arrivals()` reads what it has received."""

    def __init__(self, port: int, path: Path) -> None:
        self.port, self.path = port, path
        path.write_text("")
        self._process = subprocess.Popen([sys.executable, __file__, str(port), str(path)])
        deadline = time.monotonic() + 10
        while True:  # until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def arrivals(self) -> list[tuple[str, float]]:
        lines = self.path.read_text().splitlines()
        return [(webhook_id, float(at)) for webhook_id, at in (line.split() for line in lines)]

    async def wait_for(self, count: int, timeout: float) -> list[tuple[str, float]]:
        deadline = time.monotonic() + timeout
        while len(arrived := self.arrivals()) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(arrived)} of {count} webhook requests arrived")
            await asyncio.sleep(0.05)
        return arrived

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(10)


if __name__ == "__main__":
    uvloop.run(_serve(int(sys.argv[1]), Path(sys.argv[2])))
