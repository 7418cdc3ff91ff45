"""Server-sent events: encoding, and a response that notices a client leaving right away.

Starlette's StreamingResponse only notices a disconnect when a write fails; a foreground
response must stop its generation (and free the GPU) as soon as its client is gone, even while
the model is still thinking, so this response listens for `http.disconnect` the whole time.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import anyio
from starlette.types import Receive, Scope, Send

from app import errors
from app.error_reporting import client_error, request_id_of, task_group
from app.protocol.encoding import WireEvent

_OBFUSCATION_TARGET = 16  # pad short deltas so event sizes do not reveal token lengths
# What a padding is cut from, at a random place: its length is what hides a token's, and drawing
# fresh random bytes for every delta of every follower was a share of a busy process's CPU.
_PADDING_SOURCE = secrets.token_urlsafe(3 * 1024)


def encode(event: WireEvent, obfuscate: bool) -> bytes:
    data = event.json
    if obfuscate and event.type.endswith(".delta"):
        # Pad to a multiple of the target size; the padding is URL-safe base64, so it can be
        # spliced into the JSON text as it is.
        padding = _OBFUSCATION_TARGET - len(data) % _OBFUSCATION_TARGET or _OBFUSCATION_TARGET
        at = random.randrange(len(_PADDING_SOURCE) - padding)
        data = f'{data[:-1]},"obfuscation":"{_PADDING_SOURCE[at : at + padding]}"}}'
    return f"event: {event.type}\ndata: {data}\n\n".encode()


KEEP_ALIVE = b": keep-alive\n\n"


async def wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class EventStreamResponse:
    """Streams batches of events (None means "send a keep-alive"); runs `on_disconnect` if the
    client leaves before the stream ends."""

    def __init__(
        self,
        events: AsyncIterator[list[WireEvent] | None],
        *,
        obfuscate: bool,
        on_disconnect: Callable[[], Awaitable[None]] | None = None,
        on_error: Callable[[errors.APIError], WireEvent] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.events = events
        self.obfuscate = obfuscate
        self.on_disconnect = on_disconnect
        self.on_error = on_error
        self.headers = [(name.encode(), value.encode()) for name, value in (headers or {}).items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                    *self.headers,
                ],
            }
        )
        disconnected = False
        async with task_group() as group:

            async def watch() -> None:
                nonlocal disconnected
                await wait_for_disconnect(receive)
                disconnected = True
                group.cancel_scope.cancel()

            group.start_soon(watch)
            await self._send_events(send, request_id_of(scope))
            group.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            await self.events.aclose()  # type: ignore[attr-defined]
        if disconnected:
            if self.on_disconnect is not None:
                with anyio.CancelScope(shield=True):
                    await self.on_disconnect()
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_events(self, send: Send, request_id: str) -> None:
        try:
            async for batch in self.events:  # one write per batch: a replayed page goes out at once
                body = KEEP_ALIVE if batch is None else b"".join(encode(e, self.obfuscate) for e in batch)
                await send({"type": "http.response.body", "body": body, "more_body": True})
        except Exception as exc:
            # Headers are out: a failure can only be told in-band.
            if self.on_error is None:
                raise
            event = self.on_error(client_error(exc, request_id))
            await send({"type": "http.response.body", "body": encode(event, False), "more_body": True})
