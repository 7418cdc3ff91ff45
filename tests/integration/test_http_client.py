"""The worker's HTTP client against real sockets: scripted servers that answer as model servers
do (chunked streams, lengths, bodies until close), as broken ones do (silence, early close,
invalid HTTP, a kept connection closed under it), and as proxies do."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import trustme
import uvloop

from app.catalog import OpenAIModel, VllmModel
from tests.conftest import eventually, within
from workers.runtime_failure import RuntimeFailure
from workers.runtimes import prompt_length
from workers.runtimes.client import ChatRuntimeClient
from workers.runtimes.http_client import HttpClient, HttpError, RequestTimeouts, proxy_for

TIMEOUTS = RequestTimeouts(connect=2.0, read=2.0)


# The lane a scenario's clients take: our plain connections, or aiohttp, which the worker takes only
# for TLS and proxies; both keep the contract these scenarios check.
_lane = contextvars.ContextVar("lane", default="plain")


def client(**options: float) -> HttpClient:
    return HttpClient(plain_connections=_lane.get() == "plain", **options)


def on_each_loop_and_lane(scenario: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[str, str], None]:
    """Runs the scenario on asyncio's loop and on uvloop, which the worker runs on (its
    transports differ from asyncio's), through each lane of the client."""

    @pytest.mark.parametrize("lane", ["plain", "aiohttp"])
    @pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
    def test(loop: str, lane: str) -> None:
        _lane.set(lane)
        if loop == "uvloop":
            uvloop.run(scenario())
        else:
            asyncio.run(scenario())

    test.__name__ = scenario.__name__
    return test


Answering = Callable[["Server", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """Counts connections and keeps what each request sent."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[bytes] = []
        self.disconnected = asyncio.Event()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
        )
        request = head + await reader.readexactly(length)
        self.requests.append(request)
        return request

    async def answer_ok(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Reads a request and answers "ok", keeping the connection open."""
        await self.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()


@asynccontextmanager
async def serving(answer: Answering) -> AsyncIterator[tuple[Server, str]]:
    server = Server()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        try:
            await answer(server, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    listening = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        yield server, f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        listening.close()


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)


STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


async def endless(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Streams until the client leaves, and tells the test it noticed."""
    await server.read_request(reader)
    writer.write(STREAM_HEAD)
    while not reader.at_eof():
        writer.write(chunked(b"data: more\n\n"))
        await writer.drain()
        await asyncio.sleep(0.01)
    server.disconnected.set()


async def broken_off(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Starts a stream and closes the connection in the middle of it."""
    await server.read_request(reader)
    writer.write(STREAM_HEAD + chunked(b"data: one\n\n"))
    await writer.drain()


class Collect:
    """A consumer that keeps what it gets (and when it last got something), and has all it needs
    once `until` came."""

    def __init__(self, until: bytes | None = None) -> None:
        self.pieces: list[bytes] = []
        self.until = until
        self.last_at = 0.0

    def __call__(self, piece: bytes) -> bool:
        self.pieces.append(piece)
        self.last_at = asyncio.get_running_loop().time()
        return self.until is not None and self.until in piece


def keep_answering(body: bytes) -> Answering:
    async def answer(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()

    return answer


@on_each_loop_and_lane
async def test_bodies_with_a_length_or_until_close_are_read_whole() -> None:
    async def until_close(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nall of ")
        await writer.drain()
        writer.write(b"it")

    http = client()
    async with serving(keep_answering(b'{"count": 7}')) as (_, url):
        async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
            assert await reply.read() == b'{"count": 7}'
    async with serving(until_close) as (_, url):
        async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
            assert await reply.read() == b"all of it"
    await http.aclose()


@on_each_loop_and_lane
async def test_an_error_answer_has_its_status_and_body() -> None:
    async def answer(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        body = b'{"error": "too long"}'
        writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))

    http = client()
    async with serving(answer) as (_, url):
        async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
            assert (reply.status, await reply.read()) == (400, b'{"error": "too long"}')
    await http.aclose()


@on_each_loop_and_lane
async def test_connections_are_kept_and_reused() -> None:
    http = client()
    async with serving(keep_answering(b"ok")) as (server, url):
        for _ in range(3):
            async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
                assert await reply.read() == b"ok"
        assert server.connections == 1

        # Side by side, each request has a connection of its own.
        async def one() -> bytes:
            async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
                await asyncio.sleep(0.05)
                return await reply.read()

        assert list(await asyncio.gather(one(), one(), one())) == [b"ok"] * 3
        assert server.connections == 3
    await http.aclose()


async def answer_once_then_drop(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers a stream, keeps the connection (no "Connection: close"), and closes it on the next
    request without answering, as when its keep-alive runs out just as the client reuses it."""
    await server.read_request(reader)
    writer.write(STREAM_HEAD)
    writer.write(chunked(b'data: {"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]}\n\n'))
    writer.write(chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()
    await reader.readuntil(b"\r\n\r\n")


@on_each_loop_and_lane
async def test_a_post_the_server_dropped_unanswered_is_not_resent_by_the_client() -> None:
    """Re-sending a POST is the caller's decision (RFC 9112, 9.3.1): the client reports it."""
    http = client()
    async with serving(answer_once_then_drop) as (server, url):
        async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
            await reply.read()
        with pytest.raises(HttpError, match="closed the connection before it answered"):
            async with http.post_json(url, {}, {}, TIMEOUTS):
                pass
        assert (server.connections, len(server.requests)) == (1, 1)
    await http.aclose()


@on_each_loop_and_lane
async def test_a_generation_whose_kept_connection_was_dropped_is_sent_again_on_a_new_one() -> None:
    runtime = ChatRuntimeClient(connect_timeout=2.0, read_timeout=2.0)
    async with serving(answer_once_then_drop) as (server, url):
        model = OpenAIModel(id="m", runtime="openai", base_url=url.removesuffix("/chat/completions"), max_retries=1)
        for _ in range(2):
            chunks: list[dict[str, Any]] = []
            await runtime.stream(model, {"model": "m", "messages": []}, chunks.append)
            assert chunks[0]["choices"][0]["delta"] == {"content": "ok"}
        assert server.connections == 2
    await runtime.aclose()


@on_each_loop_and_lane
async def test_connection_close_is_honoured() -> None:
    async def answer(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(1)  # the client must not wait for this close, nor reuse the connection

    http = client()
    async with serving(answer) as (server, url):
        for _ in range(2):
            async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
                assert await reply.read() == b"ok"
        assert server.connections == 2
    await http.aclose()


@on_each_loop_and_lane
async def test_leaving_a_stream_early_closes_its_connection() -> None:
    http = client()
    async with serving(endless) as (server, url):
        async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
            assert reply.status == 200  # and leave, the stream still going
        # The server notices at once: that is how a model server is told to stop generating.
        await within(server.disconnected.wait(), 2)
        async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
            assert reply.status == 200
        assert server.connections == 2
    await http.aclose()


@on_each_loop_and_lane
async def test_a_silent_server_times_out() -> None:
    async def silent_after_one(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(STREAM_HEAD + chunked(b"data: one\n\n"))
        await writer.drain()
        await asyncio.sleep(5)

    async def silent(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        await asyncio.sleep(5)

    http = client()
    quick = RequestTimeouts(connect=2.0, read=0.3)
    async with serving(silent_after_one) as (_, url):
        received = Collect()
        async with http.post_json(url, {}, {}, quick) as reply:
            with pytest.raises(TimeoutError):
                await reply.deliver(received)
        assert received.pieces == [b"data: one\n\n"]
        assert 0.25 < asyncio.get_running_loop().time() - received.last_at < 1.5
    async with serving(silent) as (_, url):  # before the headers, too
        with pytest.raises(TimeoutError):
            async with http.post_json(url, {}, {}, quick):
                pass
    await http.aclose()


@on_each_loop_and_lane
async def test_invalid_http_fails() -> None:
    async def not_http(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    http = client()
    async with serving(not_http) as (_, url):
        with pytest.raises(HttpError, match="invalid HTTP"):
            async with http.post_json(url, {}, {}, TIMEOUTS):
                pass
    await http.aclose()


@on_each_loop_and_lane
async def test_an_unreachable_server_or_a_bad_url_fails_at_once() -> None:
    listening = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    listening.close()
    await listening.wait_closed()
    http = client()
    with pytest.raises(HttpError, match=r"cannot connect to 127\.0\.0\.1"):
        async with http.post_json(f"http://127.0.0.1:{port}/v1", {}, {}, TIMEOUTS):
            pass
    with pytest.raises(ValueError, match="not an http"):
        async with http.post_json("ftp://127.0.0.1/v1", {}, {}, TIMEOUTS):
            pass


@on_each_loop_and_lane
async def test_a_server_that_answers_the_count_without_one_fails_retryably() -> None:
    http = client()
    async with serving(keep_answering(b"<html>not found</html>")) as (_, url):
        # As a worker that started the vLLM server sets its address.
        model = VllmModel(id="m", runtime="vllm", model="m").model_copy(
            update={"base_url": url.removesuffix("/chat/completions")}
        )
        with pytest.raises(RuntimeFailure, match="no token count") as failure:
            await prompt_length.measure(http, model, {"model": "m", "messages": []}, {}, TIMEOUTS)
    await http.aclose()
    assert failure.value.retryable


@on_each_loop_and_lane
async def test_a_consumer_gets_the_stream_as_it_comes_and_the_connection_is_kept() -> None:
    async def answer(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            writer.write(STREAM_HEAD)
            for token in (b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"):
                writer.write(chunked(token))
                await writer.drain()
                await asyncio.sleep(0.02)
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    http = client()
    async with serving(answer) as (server, url):
        for _ in range(2):
            received = Collect()
            async with http.post_json(url, {"stream": True}, {"Authorization": "Bearer k"}, TIMEOUTS) as reply:
                assert reply.status == 200
                await reply.deliver(received)
            assert received.pieces == [b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"]  # each as it came
        assert server.connections == 1
    await http.aclose()
    request = server.requests[0]
    assert request.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer k\r\n" in request
    assert b"\r\nContent-Type: application/json\r\n" in request
    assert request.endswith(b'\r\n\r\n{"stream":true}')


@on_each_loop_and_lane
async def test_a_consumer_with_all_it_needs_stops_the_delivery() -> None:
    async def answer(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(STREAM_HEAD + chunked(b"data: [DONE]\n\n"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(chunked(b"data: more\n\n"))
        await writer.drain()
        await asyncio.sleep(5)  # and the body never ends

    http = client()
    received = Collect(until=b"[DONE]")
    async with serving(answer) as (server, url):
        started = asyncio.get_running_loop().time()
        async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
            await reply.deliver(received)
        # Nothing after "enough", and no waiting for an end that does not come past a short grace.
        assert received.pieces == [b"data: [DONE]\n\n"]
        assert asyncio.get_running_loop().time() - started < 3
        async with http.post_json(url, {}, {}, TIMEOUTS):  # that connection was not kept
            pass
        assert server.connections == 2
    await http.aclose()


@on_each_loop_and_lane
async def test_a_failing_consumer_or_a_broken_stream_fails_the_delivery() -> None:
    def refuse(piece: bytes) -> bool:
        raise ValueError("not what I expected")

    http = client()
    async with serving(endless) as (server, url):
        with pytest.raises(ValueError, match="not what I expected"):
            async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
                await reply.deliver(refuse)
        await within(server.disconnected.wait(), 2)  # the server was told at once
    async with serving(broken_off) as (_, url):
        with pytest.raises(HttpError, match="closed the connection before the answer ended"):
            async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
                await reply.deliver(lambda piece: False)
        async with http.post_json(url, {}, {}, TIMEOUTS) as reply:  # unless it had all it needed
            await reply.deliver(lambda piece: True)
    await http.aclose()


@on_each_loop_and_lane
async def test_a_consumer_failing_on_a_piece_that_came_with_the_end_fails_the_delivery() -> None:
    """The piece it fails on and the body's end can arrive in one read. The failure was lost: a
    model server's malformed last chunk read as a stream that ended without finishing."""
    go = asyncio.Event()

    async def all_at_once(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(STREAM_HEAD)
        await writer.drain()
        await go.wait()  # the consumer is waiting for the body: it gets it from the callback
        writer.write(chunked(b"data: bad\n\n", b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        await reader.read()

    def refuse_bad(piece: bytes) -> bool:
        if b"bad" in piece:
            raise ValueError("not what I expected")
        return False

    http = client()
    async with serving(all_at_once) as (_, url):
        async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
            delivery = asyncio.create_task(reply.deliver(refuse_bad))
            await asyncio.sleep(0)
            go.set()
            with pytest.raises(ValueError, match="not what I expected"):
                await delivery
    await http.aclose()


@on_each_loop_and_lane
async def test_a_request_cancelled_before_its_answer_on_a_kept_connection_closes_it() -> None:
    async def slow_second(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.answer_ok(reader, writer)
        await server.read_request(reader)  # the second request, on the kept connection: no answer yet
        await reader.read()  # until the client closes it
        server.disconnected.set()

    http = client()
    patient = RequestTimeouts(connect=2.0, read=30.0)  # only the cancel can close it in time
    async with serving(slow_second) as (server, url):
        async with http.post_json(url, {}, {}, patient) as reply:
            assert await reply.read() == b"ok"

        async def second() -> None:
            async with http.post_json(url, {}, {}, patient):
                pass

        waiting = asyncio.create_task(second())
        await eventually(lambda: len(server.requests) == 2, timeout=2)
        waiting.cancel()  # as a stop does, while the model server has not answered yet
        await within(server.disconnected.wait(), 1)  # it is told at once
        assert server.connections == 1
    await http.aclose()


@on_each_loop_and_lane
async def test_an_https_model_server_is_reached_and_its_certificate_checked() -> None:
    """A model server behind TLS (a remote OpenAI-compatible endpoint): the certificate is
    checked against the system's trust store, which SSL_CERT_FILE can extend (an internal CA)."""
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("localhost").configure_cert(server_context)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecret")
            await writer.drain()
        writer.close()

    listening = await asyncio.start_server(handle, "localhost", 0, ssl=server_context)
    url = f"https://localhost:{listening.sockets[0].getsockname()[1]}/v1/models"
    with tempfile.TemporaryDirectory() as directory:
        trusted = Path(directory) / "ca.pem"
        authority.cert_pem.write_to_path(str(trusted))
        untrusting = client()
        with pytest.raises(HttpError, match="certificate verify failed"):
            async with untrusting.request("GET", url, TIMEOUTS):
                pass
        previous = os.environ.get("SSL_CERT_FILE")
        os.environ["SSL_CERT_FILE"] = str(trusted)
        try:
            trusting = client()
            async with trusting.request("GET", url, TIMEOUTS) as reply:
                assert (reply.status, await reply.read()) == (200, b"secret")
        finally:
            if previous is None:
                del os.environ["SSL_CERT_FILE"]
            else:
                os.environ["SSL_CERT_FILE"] = previous
    for http in (untrusting, trusting):
        await http.aclose()
    listening.close()


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


async def proxy_answering(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A forward proxy that answers itself (the origin it names does not exist)."""
    request = await server.read_request(reader)
    if request.startswith(b"CONNECT "):
        writer.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
    else:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nvia proxy!")
    await writer.drain()


@on_each_loop_and_lane
async def test_a_model_server_is_reached_through_the_proxy_the_environment_names() -> None:
    http = client()
    async with serving(proxy_answering) as (proxy, proxy_url):
        proxy_base = proxy_url.removesuffix("/v1/chat/completions")
        with environment(HTTP_PROXY=proxy_base, HTTPS_PROXY=proxy_base, NO_PROXY=""):
            async with http.post_json("http://models.internal:8000/v1/chat/completions", {}, {}, TIMEOUTS) as reply:
                assert (reply.status, await reply.read()) == (200, b"via proxy!")
            with pytest.raises(HttpError):  # the proxy refuses the tunnel
                async with http.request("GET", "https://models.example:8443/v1/models", TIMEOUTS):
                    pass
            # A worker's own model server on loopback is never reached through a proxy.
            async with serving(keep_answering(b"direct")) as (direct, direct_url):
                async with http.post_json(direct_url, {}, {}, TIMEOUTS) as reply:
                    assert await reply.read() == b"direct"
                assert len(direct.requests) == 1
    await http.aclose()
    absolute_form, tunnel = proxy.requests
    assert absolute_form.startswith(b"POST http://models.internal:8000/v1/chat/completions HTTP/1.1\r\n")
    assert tunnel.startswith(b"CONNECT models.example:8443 HTTP/1.1\r\n")


def test_no_proxy_and_loopback_addresses_go_directly() -> None:
    proxies = {"HTTP_PROXY": "http://proxy:3128", "HTTPS_PROXY": "http://tls-proxy:3128"}
    with environment(**proxies, NO_PROXY=".svc.local,10.0.0.5"):
        assert proxy_for(urlsplit("http://vllm.internal:8000/v1")) == "http://proxy:3128"
        assert proxy_for(urlsplit("https://api.example/v1")) == "http://tls-proxy:3128"
        assert proxy_for(urlsplit("http://vllm.svc.local:8000/v1")) is None
        assert proxy_for(urlsplit("http://10.0.0.5:8000/v1")) is None
        for loopback in ("127.0.0.1", "127.1.2.3", "[::1]", "localhost"):
            assert proxy_for(urlsplit(f"http://{loopback}:8000/v1")) is None
    with environment(HTTP_PROXY="", HTTPS_PROXY="", NO_PROXY=""):
        assert proxy_for(urlsplit("http://vllm.internal:8000/v1")) is None


@on_each_loop_and_lane
async def test_a_header_field_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    """A field is ended by the client alone: a line break in a configured key would start a
    header (or a request) of the value's choosing."""
    http = client()
    async with serving(keep_answering(b"ok")) as (server, url):
        with pytest.raises(ValueError):
            async with http.post_json(url, {}, {"Authorization": "Bearer k\r\nX-Injected: 1"}, TIMEOUTS):
                pass
        async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
            assert await reply.read() == b"ok"
        assert len(server.requests) == 1 and b"X-Injected" not in server.requests[0]
    await http.aclose()


@on_each_loop_and_lane
async def test_a_body_read_late_is_read_whole() -> None:
    """What arrives before its reader is held (up to a bound, then the server is read no further)
    and handed over once it reads."""
    body = bytes(range(256)) * (3 * 4096)  # 3 MiB

    http = client()
    async with serving(keep_answering(body)) as (server, url):
        for _ in range(2):
            async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
                await asyncio.sleep(0.2)  # the server has sent what the socket takes meanwhile
                assert await reply.read() == body
        assert server.connections == 1
    await http.aclose()


@on_each_loop_and_lane
async def test_an_idle_connection_is_retired() -> None:
    http = client(idle_seconds=0.2)
    async with serving(keep_answering(b"ok")) as (server, url):
        for pause in (0.05, 0.5):  # the first reuses its connection, the second finds it retired
            async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
                assert await reply.read() == b"ok"
            await asyncio.sleep(pause)
        async with http.post_json(url, {}, {}, TIMEOUTS) as reply:
            assert await reply.read() == b"ok"
        assert server.connections == 2
    await http.aclose()
