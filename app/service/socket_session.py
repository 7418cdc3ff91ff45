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

Steering (`response.steer`) is app/service/steering.py's; the successor of a steered response
is created here, on its lane.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from app import errors
from app.error_reporting import client_error
from app.protocol import encoding
from app.protocol.input_items import ANSWER_TYPES
from app.protocol.lifecycle import lifecycle_event
from app.protocol.response_object import usage_object
from app.protocol.socket_frames import ClientEvent, error_frame, read_frame, stream_frame
from app.protocol.steering import SUCCESSOR_FAILED
from app.protocol.vocabulary import TERMINAL_EVENT_TYPES
from app.service import creation, validating
from app.service.state import AppState
from app.service.steering import Send, SocketSteering, Steer, Steered
from app.storage.accounts import Caller

MAX_ACTIVE = 16  # responses generating at once on one socket, across its lanes (OpenAI's)
MAX_NAMED_LANES = 32  # distinct stream_ids over a socket's life (OpenAI's; the default lane is free)
IGNORED_EVENTS = frozenset({"response.processed"})  # Codex's acknowledgement of a turn: nothing to do


@dataclass(frozen=True)
class _Context:
    """A store=false response's whole conversation so far, as input items."""

    response_id: str
    items: list[Any]


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
        self._steering = SocketSteering(state, self._send, socket_id)
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
                await self._steering.steer(event)
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
        taking = self._steering.waiting_for(event.stream_id, body.get("previous_response_id"))
        await self._create(body, event.size, event.stream_id, taking)

    async def _create(self, body: dict[str, Any], size: int, stream_id: str | None, taking: list[Steer]) -> None:
        """A create on a lane; `taking`: the steers whose input goes in it, after the answers to the
        calls it continues and before the rest."""
        generate = body.pop("generate", True)
        if not isinstance(generate, bool):
            raise errors.InvalidRequest("Invalid type for 'generate': expected a boolean.", param="generate")
        body["stream"] = True  # implied on a socket (clients send it all the same)
        cache = body.get("prompt_cache_options")
        if isinstance(cache, dict) and cache.get("prewarm") is True:  # a prewarm generates nothing
            generate = False
            body["prompt_cache_options"] = {key: value for key, value in cache.items() if key != "prewarm"}
        opening = dict(body)  # (what a successor inherits)
        if taking:
            sent = _as_items(body.get("input"))
            answers = next((n for n, item in enumerate(sent) if not _answers(item)), len(sent))
            steered = [item for steer in taking for item in steer.items]
            body["input"] = sent[:answers] + steered + sent[answers:]
        parent = self._continued(body)
        if parent is not None:
            body.pop("previous_response_id")
            body["input"] = parent.items + _as_items(body.get("input"))
        try:
            if generate:
                await self._generate(body, size, stream_id, opening, taking)
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
        self, body: dict[str, Any], size: int, stream_id: str | None, opening: dict[str, Any], taking: list[Steer]
    ) -> None:
        """`size`: the frame's, what an HTTP create's body would be (admission estimates by it);
        `opening`: the create as the client sent it (what a successor inherits)."""
        try:
            created = await creation.create(self._state, self._caller, body, size)
        except errors.APIError as error:  # (the steers it was to take will never be applied)
            await self._steering.failed(taking, SUCCESSOR_FAILED, error.message, stream_id)
            raise
        assert created.events is not None  # (a stream)
        record = created.record
        await self._steering.taken(taking, record.id, record.store)
        running = self._steering.opened(record.id, stream_id, opening, record.store)
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
            try:
                await created.events.aclose()  # type: ignore[attr-defined]
            finally:
                steers = await self._steering.closed(running)
        ended = terminal.data()["response"] if terminal is not None and (remembered or steers) else None
        if ended is not None and remembered:
            self._remember(stream_id, ended["id"], body, ended.get("output") or [])
        if steers:
            await self._steering.after(running, steers, ended, partial(self._successor, running))

    async def _successor(self, steered: Steered, body: dict[str, Any], size: int, steers: list[Steer]) -> None:
        """A steered response's successor, on its lane (a refusal is its steers' failure, not the lane's error)."""
        with contextlib.suppress(errors.APIError):
            await self._create(body, size, steered.stream_id, steers)

    async def _prepare(self, body: dict[str, Any], stream_id: str | None) -> None:
        """A response that generates nothing: its request checked in full and its context kept
        on this socket (and only here, stored or not) for a continuation."""
        create, model = await validating.validated(self._state, self._caller.account_id, body)
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


def _answers(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") in ANSWER_TYPES


def _as_items(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if isinstance(value, list):
        return value
    raise errors.InvalidRequest("Invalid type for 'input': expected a string or an array of items.", param="input")
