"""The worker's HTTP client for model servers: plain connections of our own to a server reached
directly over http (workers/runtimes/plain_http.py: the worker's own vLLM or llama.cpp server, a
model server on the private network), aiohttp for TLS and proxies.

What the worker relies on, whichever way a server is reached (workers/runtimes/http_answer.py):

- A streamed body is handed to a consumer piece by piece as it arrives (`Answer.deliver`); a
  consumer that has all it needs ends the delivery, and the connection is kept only if the
  body's formal end follows within a short grace.
- Leaving an answer before its body ended closes the connection: that is how a model server is
  told to stop generating. Cancelling a request does the same.
- `read` is the longest silence from the server: for the headers, from the request on; then
  between two pieces of the body.
- Proxies come from the environment as curl reads them (`HTTP_PROXY`, `HTTPS_PROXY`,
  `NO_PROXY`), except for loopback addresses: a worker's own model server on 127.0.0.1 is
  always reached directly.
- A POST is never re-sent by the client; a request that got no answer fails retryably, and the
  runtime client decides whether to send it again.
- Failures are `TimeoutError`, `HttpError` (refused, reset, invalid HTTP, bad certificate), or
  what the consumer raised; a URL or a header field that cannot be sent as it is (a line break in
  a value) is a `ValueError`, before anything is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import ssl
import urllib.request
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any
from urllib.parse import SplitResult, urlsplit

import aiohttp
import orjson

from workers.runtime_failure import RuntimeFailure, refusal
from workers.runtimes.http_answer import (
    END_GRACE_SECONDS,
    IDLE_SECONDS,
    Answer,
    Consumer,
    HttpError,
    RequestTimeouts,
    SilenceGuard,
)
from workers.runtimes.plain_http import PlainHttp

__all__ = ["Answer", "HttpClient", "HttpError", "RequestTimeouts", "proxy_for", "refusal_of"]

_OUR_FIELDS = {"User-Agent": "responses-server"}


@contextlib.contextmanager
def _as_our_errors(timeouts: RequestTimeouts) -> Iterator[None]:
    try:
        yield
    except TimeoutError as exc:  # aiohttp's own timeouts are TimeoutErrors too
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            raise TimeoutError(f"no connection within {timeouts.connect:g} s") from exc
        raise TimeoutError(f"no data from the server for {timeouts.read:g} s") from exc
    except aiohttp.ClientConnectorCertificateError as exc:
        raise HttpError(f"cannot connect to {exc.host}:{exc.port}: {exc.certificate_error}") from exc
    except aiohttp.ClientConnectorError as exc:
        raise HttpError(f"cannot connect to {exc.host}:{exc.port}: {exc.os_error}") from exc
    except aiohttp.ClientHttpProxyError as exc:
        raise HttpError(f"the proxy refused: {exc.status} {exc.message}") from exc
    except aiohttp.ClientPayloadError as exc:
        raise HttpError(f"the server closed the connection before the answer ended: {exc}") from exc
    except aiohttp.ClientResponseError as exc:  # aiohttp's parser refused what came
        raise HttpError(f"invalid HTTP from the server: {exc.message}") from exc
    except aiohttp.ServerDisconnectedError as exc:
        raise HttpError("the server closed the connection before it answered") from exc
    except aiohttp.ClientError as exc:
        raise HttpError(str(exc) or type(exc).__name__) from exc


class _AiohttpAnswer(Answer):
    def __init__(self, response: aiohttp.ClientResponse, timeouts: RequestTimeouts) -> None:
        self._response = response
        self._timeouts = timeouts

    @property
    def status(self) -> int:
        return self._response.status

    async def deliver(self, consumer: Consumer) -> None:
        content = self._response.content
        with _as_our_errors(self._timeouts), SilenceGuard(self._timeouts.read) as guard:
            async for piece in content.iter_any():
                guard.heard()
                if consumer(piece):
                    break
            else:
                return
        # The consumer has all it needs: the connection is kept if the body's end is on its way.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(END_GRACE_SECONDS):
                await content.read()


class HttpClient:
    """Keeps idle connections per host, without limit on how many are in use. Made on the loop
    that uses it."""

    def __init__(self, plain_connections: bool = True, idle_seconds: float = IDLE_SECONDS) -> None:
        """`plain_connections`: False sends every request through aiohttp (the tests hold both
        lanes to one contract). `idle_seconds`: how long an idle connection is kept."""
        self._tls = ssl.create_default_context()  # the trust store as it is now (SSL_CERT_FILE)
        self._session: aiohttp.ClientSession | None = None
        self._idle_seconds = idle_seconds
        self._plain = PlainHttp(idle_seconds) if plain_connections else None

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
        proxy = proxy_for(parts)
        if self._plain is not None and parts.scheme == "http" and proxy is None and parts.username is None:
            async with self._plain.request(method, parts, timeouts, body, {**_OUR_FIELDS, **(headers or {})}) as answer:
                yield answer
            return
        # The wait for the headers is timed as a whole; the body's silences by `Answer.deliver`.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect, sock_read=None)
        with _as_our_errors(timeouts):
            async with asyncio.timeout(timeouts.read):
                response = await self._session_now().request(
                    method,
                    url,
                    data=body or None,
                    headers=headers,
                    timeout=timeout,
                    proxy=proxy,
                    allow_redirects=False,
                )
        try:
            yield _AiohttpAnswer(response, timeouts)
        finally:
            if response.content.is_eof():
                response.release()
            else:
                response.close()

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=self._idle_seconds, ssl=self._tls)
            self._session = aiohttp.ClientSession(connector=connector, headers=_OUR_FIELDS, trust_env=False)
        return self._session

    async def aclose(self) -> None:
        if self._plain is not None:
            self._plain.close()
        if self._session is not None:
            await self._session.close()
            self._session = None


def proxy_for(url: SplitResult) -> str | None:
    """The proxy the environment names for this URL, None to go directly."""
    host = url.hostname or ""
    if _is_loopback(host) or urllib.request.proxy_bypass(host):
        return None
    return urllib.request.getproxies().get(url.scheme)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def refusal_of(answer: Answer) -> RuntimeFailure:
    """The failure for a model server's error answer, with the start of its body."""
    return refusal(answer.status, (await answer.read()).decode(errors="replace")[:500])
