"""HTTP/1.1 over plain TCP to a model server reached directly: the worker's own vLLM or llama.cpp
server, a model server on the private network (TLS and proxies go through aiohttp:
workers/runtimes/http_client.py, which states the contract both lanes keep).

A request through aiohttp spends enough of the worker's CPU before its bytes go out and after its
answer's first piece comes in to show in every time to first token (docs/benchmark.md, "The
runtime HTTP client"). Here the answer is parsed by httptools (llhttp, the parser uvicorn uses)
in the connection's callback, and a streamed body's pieces go from there to the consumer: no
stream reader, no task woken per piece.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import cast
from urllib.parse import SplitResult

import httptools

from workers.runtimes.http_answer import (
    END_GRACE_SECONDS,
    Answer,
    Consumer,
    HttpError,
    RequestTimeouts,
    SilenceGuard,
)

# Body held for a consumer not yet delivering: past this, the server is read no further until it is.
_HELD_BYTES = 1 << 20


class _Exchange:
    """One request's answer as it is parsed: its status, then its body, handed to the consumer
    from the connection's callback once one delivers."""

    def __init__(self, resume_reading: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        self.resume_reading = resume_reading  # once a consumer takes what was held
        self.status = 0
        self.headers_in: asyncio.Future[None] = loop.create_future()
        self.held: list[bytes] = []  # body come before a consumer
        self.consumer: Consumer | None = None
        self.heard: Callable[[], None] = lambda: None
        self.satisfied = False  # the consumer has all it needs
        self.error: BaseException | None = None
        self.ended = False
        self.keep_alive = False
        self.until_close = True  # no length and not chunked: the body ends with the connection
        self._changed: asyncio.Future[None] | None = None

    def changed(self) -> asyncio.Future[None]:
        """Done at the next piece, end or failure."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return self._changed

    def note(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)

    def fail(self, error: BaseException) -> None:
        if not self.headers_in.done():
            self.headers_in.set_exception(error)
            self.headers_in.exception()  # (retrieved: a cancelled request never awaits it)
        elif self.error is None and not self.ended:
            self.error = error
        self.note()

    def take(self, piece: bytes) -> None:
        if self.consumer is None:
            self.held.append(piece)
            return
        if self.satisfied or self.error is not None:
            return
        self.heard()
        try:
            self.satisfied = self.consumer(piece)
        except BaseException as exc:  # (raised by `deliver`, in the task that delivers)
            self.error = exc
        if self.satisfied or self.error is not None:
            self.note()


class _Connection(asyncio.Protocol):
    """A connection to one server, one exchange at a time."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.closed = False
        self.retire: asyncio.TimerHandle | None = None  # while idle
        self._paused = False

    def send(self, data: bytes) -> _Exchange:
        assert self._transport is not None and self.exchange is None
        self.exchange = _Exchange(self.resume)
        self._transport.write(data)
        return self.exchange

    def done_with(self) -> None:
        """The exchange is over and its body read to the end: the connection can take another."""
        self.exchange = None
        self.resume()

    def close(self) -> None:
        self.closed = True
        if self.retire is not None:
            self.retire.cancel()
        if self._transport is not None:
            self._transport.close()

    def resume(self) -> None:
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # (uvloop's is not asyncio's class)

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None or exchange.ended:  # nothing was asked: not a server to keep
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            exchange.fail(HttpError(f"invalid HTTP from the server: {exc}"))
            self.close()
            return
        if exchange.consumer is None and sum(map(len, exchange.held)) > _HELD_BYTES and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True  # (if idle, its retirement forgets it)
        exchange = self.exchange
        if exchange is None or exchange.ended:
            return
        if not exchange.headers_in.done():
            exchange.fail(HttpError("the server closed the connection before it answered"))
        elif exchange.until_close:
            exchange.ended = True
            exchange.note()
        else:
            exchange.fail(HttpError("the server closed the connection before the answer ended"))

    # httptools' callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.exchange is not None
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.exchange.until_close = False

    def on_headers_complete(self) -> None:
        exchange = self.exchange
        assert exchange is not None
        exchange.status = self._parser.get_status_code()
        if exchange.status in (204, 304):
            exchange.until_close = False
        exchange.headers_in.set_result(None)

    def on_body(self, body: bytes) -> None:
        assert self.exchange is not None
        self.exchange.take(body)

    def on_message_complete(self) -> None:
        exchange = self.exchange
        assert exchange is not None
        exchange.ended = True
        exchange.keep_alive = self._parser.should_keep_alive()
        exchange.note()


class _PlainAnswer(Answer):
    def __init__(self, exchange: _Exchange, read_timeout: float) -> None:
        self._exchange = exchange
        self._read_timeout = read_timeout

    @property
    def status(self) -> int:
        return self._exchange.status

    async def deliver(self, consumer: Consumer) -> None:
        exchange = self._exchange
        with SilenceGuard(self._read_timeout) as guard:
            exchange.heard = guard.heard
            held, exchange.held = exchange.held, []
            exchange.consumer = consumer
            for piece in held:
                exchange.take(piece)
            exchange.resume_reading()
            while not (exchange.ended or exchange.satisfied or exchange.error is not None):
                await exchange.changed()
            if exchange.error is not None:
                raise exchange.error
        if exchange.satisfied:  # the connection is kept if the body's end is on its way
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(END_GRACE_SECONDS):
                    while not (exchange.ended or exchange.error is not None):
                        await exchange.changed()


class PlainHttp:
    """Keeps idle connections per host, without limit on how many are in use. Made on the loop
    that uses it."""

    def __init__(self, idle_seconds: float) -> None:
        self._idle_seconds = idle_seconds
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    @contextlib.asynccontextmanager
    async def request(
        self, method: str, url: SplitResult, timeouts: RequestTimeouts, body: bytes, fields: Mapping[str, str]
    ) -> AsyncIterator[Answer]:
        """The answer once its headers are in. Leaving before the body ended closes the
        connection (a model server then stops generating); else it is kept for reuse."""
        assert url.hostname is not None
        host, port = url.hostname, url.port or 80
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        head = _head(method, target, {"Host": url.netloc, **fields}, len(body))
        connection = self._idle_connection((host, port)) or await _connect(host, port, timeouts.connect)
        kept = False
        try:
            exchange = connection.send(head + body)
            try:
                async with asyncio.timeout(timeouts.read):
                    await exchange.headers_in
            except TimeoutError:
                raise TimeoutError(f"no data from the server for {timeouts.read:g} s") from None
            yield _PlainAnswer(exchange, timeouts.read)
            kept = exchange.ended and exchange.keep_alive and exchange.error is None and not connection.closed
        finally:
            if kept:
                connection.done_with()
                self._park((host, port), connection)
            else:
                connection.close()

    def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    def _idle_connection(self, key: tuple[str, int]) -> _Connection | None:
        connections = self._idle.get(key)
        while connections:
            connection = connections.pop()
            if not connection.closed:
                if connection.retire is not None:
                    connection.retire.cancel()
                return connection
        return None

    def _park(self, key: tuple[str, int], connection: _Connection) -> None:
        connections = self._idle.setdefault(key, [])
        connections.append(connection)

        def retire() -> None:
            connection.close()
            with contextlib.suppress(ValueError):
                connections.remove(connection)

        connection.retire = asyncio.get_running_loop().call_later(self._idle_seconds, retire)


async def _connect(host: str, port: int, timeout: float) -> _Connection:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            _, connection = await loop.create_connection(_Connection, host, port)
    except TimeoutError:
        raise TimeoutError(f"no connection within {timeout:g} s") from None
    except OSError as exc:
        raise HttpError(f"cannot connect to {host}:{port}: {exc}") from exc
    return connection


def _head(method: str, target: str, fields: Mapping[str, str], length: int) -> bytes:
    lines = [f"{method} {target} HTTP/1.1"]
    for name, value in fields.items():
        if any(c in name or c in value for c in "\r\n"):  # (a field can only be ended by the client)
            raise ValueError(f"a line break in the header field {name!r}")
        lines.append(f"{name}: {value}")
    if length or method not in ("GET", "HEAD"):
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
