"""WebSocket mode on /v1/responses (the path HTTP creates use; the router tells them apart by
the scope's type).

The upgrade is authenticated as an HTTP request is: a refused key (or a database outage) is
answered before the upgrade, with the HTTP status and OpenAI's error envelope, as OpenAI answers
it. Then each text frame is an event for the socket's session (app/service/socket_session.py).
A socket lives at most RESPONSES_WEBSOCKET_MAX_SECONDS (then, once its responses have ended, an
`error` naming the limit and a close with 1000) and, with nothing running, stays silent at most
RESPONSES_WEBSOCKET_IDLE_SECONDS (then a close with 1000)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from starlette.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from app import errors
from app.api.auth import authenticate
from app.error_reporting import client_error
from app.protocol.ids import new_id
from app.protocol.socket_frames import error_frame
from app.service.socket_session import SocketSession
from app.service.state import AppState

log = logging.getLogger(__name__)

BUSY_POLL_SECONDS = 1.0  # how often a socket with responses running looks at its clock


@functools.cache
def _lifetime_reached(seconds: float) -> str:
    """The `error` frame of a socket past its lifetime (made once, when a socket first gets there)."""
    return error_frame(
        errors.InvalidRequest(
            f"Responses websocket connection limit reached ({seconds / 60:g} minutes). "
            "Create a new websocket connection to continue.",
            code="websocket_connection_limit_reached",
        )
    )


async def _responses_socket(scope: Scope, receive: Receive, send: Send) -> None:
    """An ASGI app rather than a Starlette endpoint: each frame goes straight to the server's
    `send`, not through Starlette's WebSocket checks and its second exception wrapper (a stream
    sends a frame per event)."""
    websocket = WebSocket(scope, receive, send)
    state: AppState = websocket.app.state.responses
    socket_id = new_id("req")  # (the upgrade request's id: what a 401 names)
    try:
        caller = await authenticate(state, websocket)
    except Exception as exc:
        error = client_error(exc, socket_id)
        denial = JSONResponse(error.body(), status_code=error.status_code, headers=error.answer_headers())
        await websocket.send_denial_response(denial)
        return
    await websocket.accept()
    settings = state.settings
    opened = quiet_since = time.monotonic()

    async def send_frame(text: str) -> None:
        await send({"type": "websocket.send", "text": text})

    session = SocketSession(state, caller, send_frame, socket_id)
    frames: asyncio.Queue[Message] = asyncio.Queue()
    receiver = asyncio.create_task(_receive_into(websocket, frames), name=f"socket {socket_id}")
    received = 0
    try:
        while True:
            now = time.monotonic()
            if session.busy:
                quiet_since = now
            expired = now - opened >= settings.websocket_max_seconds
            if expired and not session.busy:
                await websocket.send_text(_lifetime_reached(settings.websocket_max_seconds))
                await websocket.close(1000, "connection lifetime reached")
                return
            if now - quiet_since >= settings.websocket_idle_seconds:
                await websocket.close(1000, "idle")
                return
            wait = BUSY_POLL_SECONDS
            if not session.busy:
                wait = min(
                    settings.websocket_idle_seconds - (now - quiet_since), opened + settings.websocket_max_seconds - now
                )
            try:
                async with asyncio.timeout(max(wait, 0.01)):
                    message = await frames.get()
            except TimeoutError:
                continue
            quiet_since = time.monotonic()
            if message["type"] == "websocket.disconnect":
                return
            received += 1
            if expired:  # nothing new once the lifetime is reached: the client reconnects
                await websocket.send_text(_lifetime_reached(settings.websocket_max_seconds))
                continue
            await session.receive(message.get("text"))
    finally:
        receiver.cancel()
        await session.close()
        log.info(
            "websocket %s closed after %.1fs and %d frames (account %s)",
            socket_id,
            time.monotonic() - opened,
            received,
            caller.account_id,
        )


async def _receive_into(websocket: WebSocket, frames: asyncio.Queue[Message]) -> None:
    while True:
        message = await websocket.receive()
        frames.put_nowait(message)
        if message["type"] == "websocket.disconnect":
            return


class _AsgiApp:
    """Starlette's routes take an ASGI app where a plain coroutine function would be an endpoint."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


routes = [WebSocketRoute("/v1/responses", _AsgiApp(_responses_socket))]
