"""WebSocket mode: the responses one client creates on one socket.

Each `response.create` is a create as over HTTP (`stream` implied), answered with the same
numbered events from the same event log, so a response made on a socket can be retrieved,
followed over SSE on any replica, resumed and cancelled like any other. Creates on one lane
(`stream_id`; none is the default lane) run one after another; lanes run side by side, at most
MAX_ACTIVE responses at once (more wait their turn), at most MAX_NAMED_LANES named lanes a socket.

A `store: false` response lives nowhere after it ends; as OpenAI's connection-local cache does,
the socket keeps the context of each lane's latest one (its input and its output), so that a
create naming it as `previous_response_id` continues it: its context is sent with the new input.
A `generate: false` create prepares such a context without generating (Codex's warm-up).

A socket that closes stops its foreground responses, as a dropped HTTP stream does; background
ones go on, and can be followed over SSE.

Steering (`response.steer`) queues user input for a response this socket is running: stored
before it is acknowledged (a stored response's, in Postgres), and its worker told to end the
response at its next output boundary (`incomplete`, reason `steered`). Once the response ends
without waiting for its client, the socket creates its successor on the same lane: the response's
own settings, `previous_response_id` the steered response, the steers' input in the order they
came. A response that ends waiting for tool output or an approval keeps its steers for the
client's next create on that lane naming it (`response.steer.pending`), which they are prepended
to. Steers the socket closes with are not applied (as OpenAI's, they live on the connection).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from app import errors
from app.error_reporting import client_error
from app.protocol import encoding, steering
from app.protocol.ids import new_id
from app.protocol.lifecycle import lifecycle_event
from app.protocol.response_object import usage_object
from app.protocol.shapes import Item
from app.protocol.socket_frames import ClientEvent, error_frame, read_frame, stream_frame
from app.protocol.steering import SteerRefused
from app.protocol.vocabulary import TERMINAL_EVENT_TYPES
from app.queue.jobs import signal_steer
from app.service import creation, validating
from app.service.state import AppState
from app.storage import steers as steers_db
from app.storage.accounts import Caller

MAX_ACTIVE = 16  # responses generating at once on one socket, across its lanes (OpenAI's)
MAX_NAMED_LANES = 32  # distinct stream_ids over a socket's life (OpenAI's; the default lane is free)
IGNORED_EVENTS = frozenset({"response.processed"})  # Codex's acknowledgement of a turn: nothing to do
MAX_PENDING_STEERS = 16  # steers queued for one response (more: too_many_pending_steers)
REMEMBERED_ENDINGS = 256  # ended responses whose status a late steer is told

Send = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class _Context:
    """A store=false response's whole conversation so far, as input items."""

    response_id: str
    items: list[Any]


@dataclass(frozen=True)
class _Steer:
    id: str
    items: list[Item]
    given: Any  # its input as the client sent it: what a failure hands back


@dataclass
class _Running:
    """A response this socket created, from its create to its end: what a steer needs of it."""

    id: str
    stream_id: str | None
    settings: dict[str, Any]  # its create less input and previous_response_id: what a successor inherits
    durable: bool  # (its steers are stored)
    unsteerable: str | None  # why it cannot be steered
    steers: list[_Steer]
    ended: str | None = None  # its terminal status, once its terminal event was sent


class SocketSession:
    def __init__(self, state: AppState, caller: Caller, send: Send, socket_id: str) -> None:
        """`socket_id`: what the log and an internal error's message name the socket by."""
        self._state = state
        self._socket_id = socket_id
        self._caller = caller
        self._send_text = send
        self._sending = asyncio.Lock()  # lanes write frames whole, one at a time
        self._lanes: dict[str | None, asyncio.Queue[ClientEvent]] = {}
        self._lane_tasks: list[asyncio.Task[None]] = []
        self._active = asyncio.Semaphore(MAX_ACTIVE)
        self._latest: dict[str | None, _Context] = {}  # each lane's latest store=false response
        self._running: dict[str, _Running] = {}  # by id: what a steer may target
        self._ended: dict[str, str] = {}  # the last REMEMBERED_ENDINGS ended, by id: their statuses
        # Each lane's steers kept for the client's next create naming their response.
        self._pending: dict[str | None, tuple[str, list[_Steer]]] = {}
        self.busy = 0  # creates received and not yet answered to their end

    async def receive(self, text: str | None) -> None:
        """Takes one client frame; what is wrong with it is answered with an `error` event, and
        the socket stays usable."""
        try:
            event = read_frame(text)
            if event.type == "response.create":
                self._lane(event.stream_id).put_nowait(event)
                self.busy += 1
            elif event.type == "response.steer":
                await self._steer(event)
            elif event.type not in IGNORED_EVENTS:
                raise errors.InvalidRequest(
                    f"Unknown event type '{event.type}': a client sends 'response.create' or 'response.steer'.",
                    param="type",
                    code="unknown_event_type",
                )
        except errors.APIError as error:
            await self._send(error_frame(error))
        except _SocketGone:
            pass  # (its close comes next)

    async def close(self) -> None:
        """The socket is gone: each lane stops, stopping its foreground response."""
        for task in self._lane_tasks:
            task.cancel()
        await asyncio.gather(*self._lane_tasks, return_exceptions=True)

    def _lane(self, stream_id: str | None) -> asyncio.Queue[ClientEvent]:
        lane = self._lanes.get(stream_id)
        if lane is None:
            if stream_id is not None and sum(key is not None for key in self._lanes) >= MAX_NAMED_LANES:
                raise errors.InvalidRequest(
                    f"This connection has reached the maximum number of distinct stream IDs ({MAX_NAMED_LANES}).",
                    param="stream_id",
                    code="websocket_stream_limit_reached",
                )
            lane = self._lanes[stream_id] = asyncio.Queue()
            self._lane_tasks.append(
                asyncio.create_task(self._run_lane(stream_id, lane), name=f"socket lane {stream_id}")
            )
        return lane

    async def _run_lane(self, stream_id: str | None, lane: asyncio.Queue[ClientEvent]) -> None:
        while True:
            event = await lane.get()
            try:
                async with self._active:
                    await self._answer(event)
            except _SocketGone:
                return  # (the socket's own close ends the session)
            except Exception as exc:
                await self._send(error_frame(client_error(exc, self._socket_id), stream_id))
            finally:
                self.busy -= 1

    async def _answer(self, event: ClientEvent) -> None:
        body = dict(event.body)
        taking: list[_Steer] = []
        pending = self._pending.get(event.stream_id)
        if pending is not None and pending[0] == body.get("previous_response_id"):
            del self._pending[event.stream_id]
            taking = pending[1]
        await self._create(body, event.size, event.stream_id, taking)

    async def _create(self, body: dict[str, Any], size: int, stream_id: str | None, taking: list[_Steer]) -> None:
        """A create on a lane; `taking`: the steers whose input goes first in it."""
        generate = body.pop("generate", True)
        if not isinstance(generate, bool):
            raise errors.InvalidRequest("Invalid type for 'generate': expected a boolean.", param="generate")
        body["stream"] = True  # implied on a socket (clients send it all the same)
        cache = body.get("prompt_cache_options")
        if isinstance(cache, dict) and cache.get("prewarm") is True:  # a prewarm generates nothing
            generate = False
            body["prompt_cache_options"] = {key: value for key, value in cache.items() if key != "prewarm"}
        settings = {key: value for key, value in body.items() if key not in ("input", "previous_response_id")}
        if taking:
            body["input"] = [item for steer in taking for item in steer.items] + _as_items(body.get("input"))
        parent = self._continued(body)
        if parent is not None:
            body.pop("previous_response_id")
            body["input"] = parent.items + _as_items(body.get("input"))
        try:
            if generate:
                await self._generate(body, size, stream_id, settings, taking)
            else:
                await self._prepare(body, stream_id)
        except errors.APIError:
            if parent is not None and self._latest.get(stream_id) is parent:
                del self._latest[stream_id]  # a continuation refused evicts its parent (OpenAI's)
            raise

    def _continued(self, body: dict[str, Any]) -> _Context | None:
        """The store=false response this create continues, if the socket holds it."""
        wanted = body.get("previous_response_id")
        return next((context for context in self._latest.values() if context.response_id == wanted), None)

    async def _generate(
        self, body: dict[str, Any], size: int, stream_id: str | None, settings: dict[str, Any], taking: list[_Steer]
    ) -> None:
        """`size`: the frame's, what an HTTP create's body would be (admission estimates by it);
        `settings`: what a successor of this response inherits."""
        created = await creation.create(self._state, self._caller, body, size)
        assert created.events is not None  # (a stream)
        record = created.record
        if taking and record.store:  # (its create stored their input: they are committed)
            async with self._state.engine.begin() as conn:
                await steers_db.taken_by(conn, [steer.id for steer in taking], record.id)
        unsteerable = (
            "a response in a conversation"
            if body.get("conversation")
            else "a response with automatic compaction (context_management)"
            if body.get("context_management")
            else None
        )
        running = self._running[record.id] = _Running(record.id, stream_id, settings, record.store, unsteerable, [])
        remembered = not record.store  # (only a store=false response is kept, and only here)
        terminal = None
        try:
            async for batch in created.events:
                for wire in batch or ():  # (None: a keep-alive moment; the socket pings on its own)
                    if wire.type in TERMINAL_EVENT_TYPES:  # (no steer is taken once its end is sent)
                        terminal, running.ended = wire, wire.type.removeprefix("response.")
                    await self._send(stream_frame(wire, stream_id))
        except (asyncio.CancelledError, _SocketGone):
            if created.on_disconnect is not None:  # the socket closed: as a dropped HTTP stream
                await asyncio.shield(created.on_disconnect())
            raise
        finally:
            await created.events.aclose()  # type: ignore[attr-defined]
            del self._running[record.id]
            self._ended[record.id] = running.ended or "failed"
            if len(self._ended) > REMEMBERED_ENDINGS:
                del self._ended[next(iter(self._ended))]
        ended = terminal.data()["response"] if terminal is not None and (remembered or running.steers) else None
        if ended is not None and remembered:
            self._remember(stream_id, ended["id"], body, ended.get("output") or [])
        if running.steers:
            await self._after_steers(running, ended)

    async def _after_steers(self, running: _Running, ended: dict[str, Any] | None) -> None:
        """A steered response ended: its successor, made of its steers, or its steers kept for the
        client's next create when it waits for the client, or failed when it failed."""
        steers, lane = running.steers, running.stream_id
        if ended is None or ended["status"] not in ("completed", "incomplete"):
            message = f"Response '{running.id}' ended {running.ended or 'failed'}: its steering input was not applied."
            for steer in steers:
                await self._send(
                    steering.failed_frame(steering.NOT_ACTIVE, message, running.id, steer.given, steer.id, lane)
                )
            return
        stubs = steering.required_input(ended.get("output") or [])
        if stubs:
            self._pending[lane] = (running.id, steers)
            for steer in steers:
                await self._send(steering.pending_frame(steer.id, running.id, stubs, lane))
            return
        successor = {**running.settings, "previous_response_id": running.id}
        try:
            await self._create(successor, len(json.dumps([s.items for s in steers])), lane, steers)
        except errors.APIError as error:
            for steer in steers:
                await self._send(
                    steering.failed_frame(
                        steering.SUCCESSOR_FAILED, error.message, running.id, steer.given, steer.id, lane
                    )
                )

    async def _steer(self, event: ClientEvent) -> None:
        """A `response.steer`: refused (`response.steer.failed`), or stored, its response's worker
        told, and acknowledged (`response.steer.accepted`)."""
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
            steer = _Steer(new_id("steer"), items, given)
            if running.durable:  # stored before it is acknowledged
                async with self._state.engine.begin() as conn:
                    await steers_db.add(conn, steer.id, running.id, items)
            running.steers.append(steer)
        except SteerRefused as refused:
            await self._send(steering.failed_frame(refused.code, str(refused), target, given, stream_id=lane))
            return
        except Exception as exc:  # (its storing: the database away)
            error = client_error(exc, self._socket_id)
            await self._send(steering.failed_frame(str(error.code), error.message, target, given, stream_id=lane))
            return
        await signal_steer(self._state.redis, running.id)
        await self._send(steering.accepted_frame(steer.id, running.id, lane))

    def _steerable(self, target: Any) -> _Running:
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
                steering.TOO_MANY_PENDING,
                f"Response '{target}' has {MAX_PENDING_STEERS} steers waiting already.",
            )
        return running

    async def _prepare(self, body: dict[str, Any], stream_id: str | None) -> None:
        """A response that generates nothing: its request checked in full and its context kept
        on this socket (and only here, stored or not) for a continuation."""
        create, model = await validating.validated(self._state, body)
        record = validating.new_record(create, model).evolve(status="in_progress")
        done = record.evolve(status="completed", completed_at=time.time(), usage=usage_object(0, 0))
        events = [
            lifecycle_event("response.created", record),
            lifecycle_event("response.in_progress", record),
            lifecycle_event("response.completed", done),
        ]
        for wire in encoding.numbered(events, [encoding.encode(event) for event in events], 0):
            await self._send(stream_frame(wire, stream_id))
        self._remember(stream_id, record.id, body, [])

    def _remember(self, stream_id: str | None, response_id: str, body: dict[str, Any], output: list[Any]) -> None:
        self._latest[stream_id] = _Context(response_id, _as_items(body.get("input")) + output)

    async def _send(self, text: str) -> None:
        async with self._sending:
            try:
                await self._send_text(text)
            except Exception as exc:  # (whichever the server raises for a socket closed under it)
                raise _SocketGone from exc


class _SocketGone(Exception):
    """The client closed the socket: nothing can be sent on it any more."""


def _as_items(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if isinstance(value, list):
        return value
    raise errors.InvalidRequest("Invalid type for 'input': expected a string or an array of items.", param="input")
