"""What wraps every HTTP request, outermost first:

- `RequestLogMiddleware`: what a request leaves behind. Its id (`x-request-id`, and in the
  request's state for streams, which tell their errors in-band), its count in the metrics, its
  log line, and a JSON answer's Server-Timing (app/process/request_log.py).
- `ErrorEnvelopeMiddleware`: anything unhandled, before the answer started, answered in OpenAI's
  error envelope with what a client may be told of it (app/error_reporting.py).

WebSocket scopes pass through both: a socket answers its errors as `error` events."""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import errors
from app.error_reporting import REQUEST_ID, client_error
from app.process import request_log
from app.process.metrics import HTTP_REQUESTS
from app.process.request_log import RequestLog
from app.protocol.ids import new_id

# Probes and scrapes, every few seconds from every load balancer and Prometheus: not logged.
UNLOGGED_PATHS = frozenset({"/health", "/ready", "/metrics"})


def install(app: Starlette) -> None:
    app.add_middleware(ErrorEnvelopeMiddleware)
    app.add_middleware(RequestLogMiddleware)  # (added last: outermost)


class RequestLogMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_id("req")
        scope.setdefault("state", {})[REQUEST_ID] = request_id
        entry = RequestLog(request_id, scope["method"], scope["path"])
        token = request_log.CURRENT.set(entry)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                entry.status = message["status"]
                endpoint = scope.get("endpoint")  # set by the router on the scope it was given
                route = getattr(endpoint, "__name__", "unknown")
                HTTP_REQUESTS.labels(route, scope["method"], str(message["status"])).inc()
                headers = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
                if (b"content-type", b"application/json") in headers:  # not a stream: its phases are over
                    headers.append((b"server-timing", entry.server_timing().encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_log.CURRENT.reset(token)
            if scope["path"] not in UNLOGGED_PATHS:
                entry.write()


class ErrorEnvelopeMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_noting_start(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_noting_start)
        except Exception as exc:
            if started:
                raise
            await _answer_error(send, client_error(exc, scope.get("state", {}).get(REQUEST_ID, "")))


async def _answer_error(send: Send, error: errors.APIError) -> None:
    headers = [(b"content-type", b"application/json")]
    headers += [(name.encode(), value.encode()) for name, value in error.answer_headers().items()]
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(error.body()).encode()})
