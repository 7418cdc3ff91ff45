"""Steering a socket's responses (WebSocket mode's `response.steer`).

A steer targets a response its socket is running. It is checked, stored (a stored response's, in
Postgres; a `store: false` one's only here), then acknowledged, and the response's worker is told
to end the response at its next output boundary (`incomplete`, reason `steered`). When the
response has ended, its steers become its successor's input, on the same lane, with its settings;
or, when it waits for its client (tool output, an approval), they wait for the client's next
create naming it, which they join after the answers it sends first (its tool outputs, approval
responses: a chat template may refuse a user message between calls and their results)
(`response.steer.pending`). Steers the socket closes
with are not applied: as OpenAI's, they live on the connection.

A steer's check, storing and acknowledgement hold its response's lock, which the response's end
takes too before it reads the steers: a steer is either among them or refused as too late.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from app.error_reporting import client_error
from app.protocol import steering
from app.protocol.ids import new_id
from app.protocol.shapes import Item
from app.protocol.socket_frames import ClientEvent
from app.protocol.steering import SteerRefused
from app.queue.jobs import signal_steer
from app.service.state import AppState
from app.storage import steers as steers_db
from app.storage.driver import unreachable

log = logging.getLogger(__name__)

MAX_PENDING_STEERS = 16  # steers queued for one response (more: too_many_pending_steers)
REMEMBERED_ENDINGS = 256  # ended responses whose status a late steer is told

Send = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class Steer:
    id: str
    response_id: str  # the response it steers
    items: list[Item]
    given: Any  # its input as the client sent it: what a failure hands back


@dataclass
class Steered:
    """A response this socket is running, as steering sees it."""

    id: str
    stream_id: str | None
    settings: dict[str, Any]  # its create less input and previous_response_id: what a successor inherits
    durable: bool  # (its steers are stored)
    unsteerable: str | None  # why it cannot be steered
    steers: list[Steer] = field(default_factory=list)
    ended: str | None = None  # its terminal status, once its terminal event was sent
    taking: asyncio.Lock = field(default_factory=asyncio.Lock)


class SocketSteering:
    def __init__(self, state: AppState, send: Send, socket_id: str) -> None:
        self._state = state
        self._send = send
        self._socket_id = socket_id
        self._running: dict[str, Steered] = {}
        self._ended: dict[str, str] = {}  # the last REMEMBERED_ENDINGS ended, by id: their statuses
        # Each lane's steers kept for the client's next create naming their response.
        self._pending: dict[str | None, tuple[str, list[Steer]]] = {}

    def opened(self, response_id: str, stream_id: str | None, body: dict[str, Any], durable: bool) -> Steered:
        """A response created on the socket: steerable until its end. `body`: its create."""
        unsteerable = (
            "a response in a conversation"
            if body.get("conversation")
            else "a response with automatic compaction (context_management)"
            if body.get("context_management")
            else None
        )
        settings = {key: value for key, value in body.items() if key not in ("input", "previous_response_id")}
        running = self._running[response_id] = Steered(response_id, stream_id, settings, durable, unsteerable)
        return running

    async def closed(self, running: Steered) -> list[Steer]:
        """The response's stream is over: no steer is taken any more; the steers it took."""
        async with running.taking:
            del self._running[running.id]
            self._ended[running.id] = running.ended or "failed"
            if len(self._ended) > REMEMBERED_ENDINGS:
                del self._ended[next(iter(self._ended))]
            return running.steers

    def waiting_for(self, stream_id: str | None, previous_response_id: Any) -> list[Steer]:
        """The steers a create on this lane continuing `previous_response_id` takes first."""
        pending = self._pending.get(stream_id)
        if pending is None or pending[0] != previous_response_id:
            return []
        del self._pending[stream_id]
        return pending[1]

    async def taken(self, steers: list[Steer], successor_id: str, stored: bool) -> None:
        """The steers' input went into `successor_id`, created: they are marked with it. Postgres
        unreachable at that moment cuts nothing: the successor runs and streams, and its steers
        stay unmarked (only the operator's "who steered what" reads the mark once its response
        has ended)."""
        if not (steers and stored):
            return
        try:
            async with self._state.engine.begin() as conn:
                await steers_db.taken_by(conn, [steer.id for steer in steers], successor_id)
        except Exception as error:
            if not unreachable(error):
                raise
            log.warning("steers %s: not marked as taken by %s (%s)", [s.id for s in steers], successor_id, error)

    async def after(
        self,
        running: Steered,
        steers: list[Steer],
        ended: dict[str, Any] | None,
        create_successor: Callable[[dict[str, Any], int, list[Steer]], Awaitable[None]],
    ) -> None:
        """A steered response ended (`ended`: its Response): its successor, made of its steers;
        or its steers kept for the client's next create when it waits for the client; or failed."""
        lane = running.stream_id
        if ended is None or ended["status"] not in ("completed", "incomplete"):
            message = f"Response '{running.id}' ended {running.ended or 'failed'}: its steering input was not applied."
            await self.failed(steers, steering.NOT_ACTIVE, message, lane)
            return
        stubs = steering.required_input(ended.get("output") or [])
        if stubs:
            self._pending[lane] = (running.id, steers)
            for steer in steers:
                await self._send(steering.pending_frame(steer.id, running.id, stubs, lane))
            return
        successor = {**running.settings, "previous_response_id": running.id}
        await create_successor(successor, len(json.dumps([steer.items for steer in steers])), steers)

    async def failed(self, steers: list[Steer], code: str, message: str, stream_id: str | None) -> None:
        """Accepted steers that will never be applied."""
        for steer in steers:
            await self._send(steering.failed_frame(code, message, steer.response_id, steer.given, steer.id, stream_id))

    async def steer(self, event: ClientEvent) -> None:
        """A `response.steer`: refused (`response.steer.failed`), or stored, acknowledged
        (`response.steer.accepted`) and its response's worker told."""
        target, given = event.body.get("previous_response_id"), event.body.get("input")
        running = self._running.get(target) if isinstance(target, str) else None
        lane = running.stream_id if running is not None else None
        try:
            if unknown := sorted(set(event.body) - steering.STEER_FIELDS) + (["stream_id"] if event.stream_id else []):
                raise SteerRefused(
                    steering.INVALID_INPUT,
                    f"Unknown parameter '{unknown[0]}': a steer takes only previous_response_id and input "
                    "(its response decides its lane).",
                )
            items = steering.steer_items(given)
            running = self._steerable(target)
            async with running.taking:
                running = self._steerable(target)  # (it may have ended meanwhile)
                steer = Steer(new_id("steer"), running.id, items, given)
                if running.durable:  # stored before it is acknowledged
                    async with self._state.engine.begin() as conn:
                        await steers_db.add(conn, steer.id, running.id, items)
                running.steers.append(steer)
                await self._send(steering.accepted_frame(steer.id, running.id, lane))
        except SteerRefused as refused:
            await self._send(steering.failed_frame(refused.code, str(refused), target, given, stream_id=lane))
            return
        except Exception as exc:  # (its storing: the database away)
            error = client_error(exc, self._socket_id)
            await self._send(steering.failed_frame(str(error.code), error.message, target, given, stream_id=lane))
            return
        await signal_steer(self._state.redis, running.id)

    def _steerable(self, target: Any) -> Steered:
        running = self._running.get(target) if isinstance(target, str) else None
        ended = running.ended if running is not None else self._ended.get(target) if isinstance(target, str) else None
        if ended is not None:
            code = steering.ALREADY_COMPLETED if ended in ("completed", "incomplete") else steering.NOT_ACTIVE
            raise SteerRefused(code, f"Response '{target}' has ended ({ended}): it takes no more steering input.")
        if running is None:
            raise SteerRefused(
                steering.RESPONSE_NOT_FOUND, f"No response with id '{target}' is running on this connection."
            )
        if running.unsteerable is not None:
            raise SteerRefused(steering.NOT_SUPPORTED, f"Steering is not supported for {running.unsteerable}.")
        if len(running.steers) >= MAX_PENDING_STEERS:
            raise SteerRefused(
                steering.TOO_MANY_PENDING, f"Response '{target}' has {MAX_PENDING_STEERS} steers waiting already."
            )
        return running
