"""The ASGI application: `create_app(settings)` builds it; uvicorn serves it (`responses-server api`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import errors
from app.api.routes import conversations, input_items, meta, metrics, responses, responses_socket
from app.error_reporting import REQUEST_ID, client_error
from app.process import gc_tuning, request_log
from app.process.metrics import HTTP_REQUESTS
from app.process.request_log import RequestLog
from app.protocol.ids import new_id
from app.service.state import AppState
from app.settings import Settings


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state = await AppState.open(settings)
        app.state.responses = state
        gc_tuning.tune_after_startup()
        try:
            yield
        finally:
            await state.close()

    app = Starlette(
        routes=[
            *responses.routes,
            *responses_socket.routes,
            *input_items.routes,
            *conversations.routes,
            *meta.routes,
            *metrics.routes,
        ],
        lifespan=lifespan,
        exception_handlers={errors.APIError: _api_error, HTTPException: _http_error},
    )
    app.add_middleware(RequestIdMiddleware)
    return app


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, errors.APIError)
    return JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.answer_headers())


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error = (
        errors.NotFound(f"Unknown route: {request.method} {request.url.path}")
        if exc.status_code == 404
        else errors.InvalidRequest(f"{exc.detail}: {request.method} {request.url.path}")
    )
    error.status_code = exc.status_code
    return JSONResponse(error.body(), status_code=exc.status_code)


# Probes and scrapes, every few seconds from every load balancer and Prometheus: not logged.
UNLOGGED_PATHS = frozenset({"/health", "/ready", "/metrics"})


class RequestIdMiddleware:
    """Adds `x-request-id` to every response (and puts it in the request's state for streams,
    which tell their errors in-band), turns anything unhandled into OpenAI's error envelope, and
    writes the request's log line and a JSON answer's Server-Timing (app/process/request_log.py)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_id("req")
        scope.setdefault("state", {})[REQUEST_ID] = request_id
        started = False
        entry = RequestLog(request_id, scope["method"], scope["path"])
        token = request_log.CURRENT.set(entry)

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
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
        except Exception as exc:
            if started:
                raise
            await _answer_error(send_with_id, client_error(exc, request_id))
        finally:
            request_log.CURRENT.reset(token)
            if scope["path"] not in UNLOGGED_PATHS:
                entry.write()


async def _answer_error(send: Send, error: errors.APIError) -> None:
    headers = [(b"content-type", b"application/json")]
    headers += [(name.encode(), value.encode()) for name, value in error.answer_headers().items()]
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(error.body()).encode()})
