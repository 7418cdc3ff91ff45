"""A foreground JSON response: wait for the terminal event, answer with its Response object,
and stop the generation if the client leaves first (design, "Lifecycle")."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
from starlette.types import Receive, Scope, Send

from app import errors
from app.error_reporting import task_group
from app.events.sse import wait_for_disconnect
from app.process import request_log
from app.protocol.encoding import WireEvent
from app.protocol.shapes import Event
from app.protocol.vocabulary import OUTPUT_DELTAS, TERMINAL_EVENT_TYPES

CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"


class FinalResponse:
    def __init__(
        self,
        events: AsyncIterator[list[WireEvent] | None],
        on_disconnect: Callable[[], Awaitable[None]] | None,
        render: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """`render`: the answer made of a Response that did not fail (default: the Response).
        `headers`: what the answer carries besides its content type, whatever its status."""
        self.events = events
        self.on_disconnect = on_disconnect
        self.render = render
        self.headers = [(name.encode(), value.encode()) for name, value in (headers or {}).items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        terminal: Event | None = None
        async with task_group() as group:

            async def watch() -> None:
                await wait_for_disconnect(receive)
                group.cancel_scope.cancel()

            group.start_soon(watch)
            try:
                terminal = await self._terminal()
            finally:
                group.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await self.events.aclose()  # type: ignore[attr-defined]
        if terminal is None:  # the client left
            if self.on_disconnect is not None:
                with anyio.CancelScope(shield=True):
                    await self.on_disconnect()
            return
        status, body = _answer(terminal)
        if status == 200 and self.render is not None:
            body = await self.render(body)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), *self.headers],
            }
        )
        await send({"type": "http.response.body", "body": json.dumps(body).encode()})

    async def _terminal(self) -> Event:
        async for batch in self.events:
            if batch and any(event.type in OUTPUT_DELTAS for event in batch):
                request_log.since_start("first_token")
            if batch and batch[-1].type in TERMINAL_EVENT_TYPES:  # the terminal event ends a batch
                return batch[-1].data()
        raise errors.GenerationFailed("The response ended without a terminal event.")


def _answer(terminal: Event) -> tuple[int, dict[str, Any]]:
    response = terminal["response"]
    if response["status"] != "failed":
        return 200, response
    error = response.get("error") or {}
    message = f"Response {response['id']} failed: {error.get('message', 'unknown error')}"
    if error.get("code") == CONTEXT_LENGTH_EXCEEDED:  # the client's input, not our failure
        refusal = errors.InvalidRequest(message, param="input", code=CONTEXT_LENGTH_EXCEEDED)
        return refusal.status_code, refusal.body()
    if error.get("code") == MCP_LIST_FAILED:  # a server the request named, as OpenAI answers it
        connector = errors.ExternalConnectorFailed(error.get("message"), param="tools", code=MCP_LIST_FAILED)
        return connector.status_code, connector.body()
    failure = errors.GenerationFailed(message, code=error.get("code") or "server_error")
    return failure.status_code, failure.body()


MCP_LIST_FAILED = "http_error"  # the error code of a response whose MCP server's tools were not listed
