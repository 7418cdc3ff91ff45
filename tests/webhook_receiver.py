"""A webhook receiver for the tests: a Starlette app on a loopback port, served by uvicorn in a
thread of its own (so sync and async tests alike can use it), that records what it is sent and
answers as scripted."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.conftest import free_port
from tests.threaded_server import ThreadedServer


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() when it arrived
    concurrent: int  # requests in flight when it arrived, itself included


@dataclass
class Receiver:
    port: int = field(default_factory=free_port)
    statuses: list[int] = field(default_factory=list)  # answered in turn, then 200
    delay: float = 0.0  # seconds before answering
    received: list[Received] = field(default_factory=list)
    in_flight: int = 0
    _server: ThreadedServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _hook(self, request: Request) -> Response:
        self.in_flight += 1
        try:
            body = await request.body()
            self.received.append(Received(dict(request.headers), body, time.time(), self.in_flight))
            await asyncio.sleep(self.delay)
            return Response(status_code=self.statuses.pop(0) if self.statuses else 200)
        finally:
            self.in_flight -= 1

    def start(self) -> Receiver:
        app = Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])
        self._server = ThreadedServer(app, self.port, "webhook receiver", lifespan="off", timeout_graceful_shutdown=1)
        self._server.start()
        return self

    def stop(self) -> None:
        assert self._server is not None
        self._server.stop()

    async def arrival(self, count: int, timeout: float = 15.0) -> list[Received]:
        """`wait_for` for a test whose loop runs the deliverer: it waits without blocking it."""
        deadline = time.monotonic() + timeout
        while len(self.received) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.received)} of {count} webhook requests arrived")
            await asyncio.sleep(0.02)
        return self.received

    def wait_for(self, count: int, timeout: float = 15.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.received) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.received)} of {count} webhook requests arrived")
            time.sleep(0.02)
        return self.received
