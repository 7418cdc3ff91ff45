"""A lean HTTP/1.1 client for the worker's calls to model servers: the token stream is the
worker's hottest loop.

With hundreds of streams, a general client's per-chunk machinery (a stream reader, a read-timeout
timer rescheduled on every chunk, layers of iterators) cost about as much CPU as everything else
the worker does per token. Here the C parser (httptools, which uvicorn uses too) runs in the
protocol's `data_received`, and a streamed body is handed to its consumer right there
(`Answer.deliver`): no task wakes up per token. The read timeout is one timer per request that
re-arms itself only when it expires.

Connections are kept alive and reused per host. A reused connection that the server had
already closed (its keep-alive ran out while ours was idle) is replaced at once, before the
request is considered failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import httptools
import orjson

# Servers close idle keep-alive connections after a few seconds (uvicorn: 5); ours retire sooner.
IDLE_SECONDS = 4.0
# How long a consumer that has all it needs waits for the body's formal end (to keep the
# connection) before closing it.
END_GRACE_SECONDS = 1.0

# Takes a piece of body; True once it needs no more.
Consumer = Callable[[bytes], bool]


class HttpError(Exception):
    """The server broke the exchange: it closed the connection early or sent invalid HTTP."""


@dataclass(frozen=True, slots=True)
class RequestTimeouts:
    connect: float  # to open a connection
    read: float  # the longest silence from the server, from the request on


@dataclass(frozen=True, slots=True)
class _Origin:
    host: str
    port: int
    tls: bool


class _Connection(asyncio.Protocol):
    """One connection and, while a request is on it, that request's answer as it arrives."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.idle_since = 0.0
        self._framed = False
        self._read_timeout = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._begin()

    def _begin(self) -> None:
        self.status = 0
        self.headers_complete = False
        self.keep_alive = False
        self.complete = False
        self.received_any = False
        self.error: BaseException | None = None
        self.body: list[bytes] = []
        self.consumer: Consumer | None = None  # takes the body as it arrives, instead of `body`
        self.enough = False  # the consumer needs no more
        self._until_close = False  # no length and not chunked: the body ends with the connection
        self._waiter: asyncio.Future[None] | None = None
        self._notable = False  # something a waiting reader needs to see arrived
        self._last_read = self._loop.time()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._last_read = self._loop.time()
        if not self.received_any:
            self.received_any = self._notable = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(HttpError(f"invalid HTTP from the server: {exc}"))
            self.close()
        if self._notable:  # at most once per arrival
            self._notable = False
            self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._until_close and self.headers_complete:
            self.complete = True
        elif not self.complete:
            self._fail(HttpError("the server closed the connection before the answer ended"))
        self._wake()

    # httptools callbacks

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.keep_alive = self._parser.should_keep_alive()  # only known here
        self.headers_complete = self._notable = True
        self._until_close = self._framing_is_close

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_message_begin(self) -> None:
        self._framed = False

    @property
    def _framing_is_close(self) -> bool:
        return not self._framed and self.status not in (204, 304) and self.status >= 200

    def on_body(self, body: bytes) -> None:
        if self.consumer is None:
            self.body.append(body)
            self._notable = True
        elif not self.enough:
            try:
                self.enough = self._notable = self.consumer(body)
            except Exception as exc:  # the consumer's failure ends the exchange
                self.consumer = None
                self._fail(exc)
                self.close()

    def on_message_complete(self) -> None:
        self.complete = self._notable = True

    # for the request

    def send(self, head: bytes, body: bytes, read_timeout: float) -> None:
        self._begin()
        assert self.transport is not None
        self.transport.write(head + body)
        self._read_timeout = read_timeout
        self._timer = self._loop.call_later(read_timeout, self._check_read_timeout)

    def _check_read_timeout(self) -> None:
        quiet = self._loop.time() - self._last_read
        if self.complete or self.error is not None:
            return
        if quiet >= self._read_timeout:
            self._fail(TimeoutError(f"no data from the server for {self._read_timeout:g} s"))
            self.close()
        else:
            self._timer = self._loop.call_later(self._read_timeout - quiet, self._check_read_timeout)

    def done_with_request(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def arrival(self) -> asyncio.Future[None]:
        """Done when more arrives or the connection fails. Made at once (not in a coroutine that
        starts later), so nothing that arrives in between goes unnoticed."""
        self._waiter = self._loop.create_future()
        return self._waiter

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    @property
    def reusable(self) -> bool:
        return self.complete and self.keep_alive and self.error is None and not self.lost

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Answer:
    """A server's answer: its status once the headers are in, then its body."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection

    @property
    def status(self) -> int:
        return self._connection.status

    async def read(self) -> bytes:
        """The whole body."""
        pieces: list[bytes] = []

        def keep(piece: bytes) -> bool:
            pieces.append(piece)
            return False

        await self.deliver(keep)
        return b"".join(pieces)

    async def deliver(self, consumer: Consumer) -> None:
        """Hands the body to `consumer` as it arrives, from the connection's own callback, until
        the body ends or the consumer has all it needs; raises what the consumer raised, or why
        the body broke off before the consumer had all it needs."""
        connection = self._connection
        if connection.body:
            arrived, connection.body = connection.body, []
            if consumer(b"".join(arrived)):
                return
        connection.consumer = consumer
        try:
            while not connection.complete:
                if connection.enough:
                    if connection.error is None:  # keep the connection if its end is on its way
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(connection.arrival(), END_GRACE_SECONDS)
                    return
                if connection.error is not None:
                    raise connection.error
                await connection.arrival()
            if connection.error is not None:  # the consumer failed on a piece that came with the end
                raise connection.error
        finally:
            connection.consumer = None


class HttpClient:
    """Keeps idle connections per host, without limit on how many are in use."""

    def __init__(self) -> None:
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._tls: ssl.SSLContext | None = None

    def post_json(
        self, url: str, payload: Any, headers: Mapping[str, str], timeouts: RequestTimeouts
    ) -> contextlib.AbstractAsyncContextManager[Answer]:
        headers = {"Content-Type": "application/json", **headers}
        return self.request("POST", url, timeouts, body=orjson.dumps(payload), headers=headers)

    @contextlib.asynccontextmanager
    async def request(
        self,
        method: str,
        url: str,
        timeouts: RequestTimeouts,
        *,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[Answer]:
        """The answer once its headers are in. Leaving before the body ended closes the
        connection (a model server then stops generating); else it is kept for reuse."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        tls = parts.scheme == "https"
        origin = _Origin(parts.hostname, parts.port or (443 if tls else 80), tls)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"{method} {path} HTTP/1.1", f"Host: {parts.netloc}", "User-Agent: responses-server"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if body or method not in ("GET", "HEAD"):
            lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

        connection = await self._send(origin, head, body, timeouts)
        try:
            while not connection.headers_complete:
                if connection.error is not None:
                    raise connection.error
                await connection.arrival()
            yield Answer(connection)
        finally:
            connection.done_with_request()
            if connection.reusable:
                connection.idle_since = asyncio.get_running_loop().time()
                self._idle.setdefault(origin, []).append(connection)
            else:
                connection.close()

    async def _send(self, origin: _Origin, head: bytes, body: bytes, timeouts: RequestTimeouts) -> _Connection:
        """The request sent on a kept connection that still works, or on a new one."""
        while (connection := self._kept(origin)) is not None:
            connection.send(head, body, timeouts.read)
            # A server may close a kept connection just as we reuse it: the request then gets no
            # byte of answer, and goes out again on another connection.
            try:
                while not connection.received_any and connection.error is None:
                    await connection.arrival()
            except BaseException:  # cancelled (a stop): the server must learn it at once
                connection.done_with_request()
                connection.close()
                raise
            if connection.received_any:
                return connection
            connection.done_with_request()
            connection.close()
        connection = await self._connect(origin, timeouts.connect)
        connection.send(head, body, timeouts.read)
        return connection

    def _kept(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = asyncio.get_running_loop().time()
        while idle:
            connection = idle.pop()
            if not connection.lost and now - connection.idle_since < IDLE_SECONDS:
                return connection
            connection.close()
        return None

    async def _connect(self, origin: _Origin, timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        tls = None
        if origin.tls:
            self._tls = self._tls or ssl.create_default_context()
            tls = self._tls
        async with asyncio.timeout(timeout):
            _, connection = await loop.create_connection(lambda: _Connection(loop), origin.host, origin.port, ssl=tls)
        return connection

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
