"""/v1/responses: create, retrieve (JSON or replayed stream), cancel, delete, count input tokens."""

from __future__ import annotations

import time
from functools import partial

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from app import errors, input_tokens, request_log, service
from app.auth import authenticate
from app.events.final_response import FinalResponse
from app.events.follow import follow
from app.events.sse import EventStreamResponse
from app.http import json_body, query_bool, query_int, response_id_in_path
from app.metrics import CREATED
from app.protocol.encoding import WireEvent
from app.protocol.response_object import render
from app.protocol.vocabulary import ACTIVE_STATUSES
from app.state import AppState

CANCEL_WAIT_SECONDS = 10.0


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.responses
    return state


async def create(request: Request) -> Response | ASGIApp:
    state = _state(request)
    account_id = await authenticate(state, request)
    body = await json_body(request, state.settings.max_body_bytes)
    accepted = await service.accept(state, account_id, body, request.state.limits, request.state.body_bytes)
    record = accepted.record
    request_log.note(model=record.model, response_id=record.id)
    CREATED.labels(record.model, "background" if record.background else "stream" if record.stream else "json").inc()
    followed = record.stream or not record.background
    subscription = None
    try:
        if followed:  # before enqueueing: a transient response's events exist only live
            subscription = await state.hub.subscribe(record.id, accepted.durable)
        await service.enqueue(state, accepted)
    except BaseException:
        if subscription is not None:
            await subscription.close()
        await service.withdraw(state, accepted)
        raise
    request_log.phase("queue")
    if subscription is None:
        return JSONResponse(render(record))
    # Before its job runs, a response's log holds what its create stored: nothing, or a background
    # one's first two events.
    events = follow(state.log_source(accepted.durable), subscription, record.id, -1, known_log=accepted.opening)
    # A background response outlives its connection; a foreground one stops when its client leaves.
    on_disconnect = partial(service.stop, state, record.id, accepted.durable)
    if record.stream:
        options = body.get("stream_options") or {}
        return EventStreamResponse(
            events,
            obfuscate=options.get("include_obfuscation") is not False,
            on_disconnect=None if record.background else on_disconnect,
            on_error=_error_event,
        )
    return FinalResponse(events, on_disconnect)


async def retrieve(request: Request) -> Response | ASGIApp:
    state = _state(request)
    account_id = await authenticate(state, request)
    response_id = response_id_in_path(request)
    record = await service.retrieve(state, account_id, response_id)
    if not query_bool(request, "stream"):
        return JSONResponse(render(record))
    if not record.background:
        raise errors.InvalidRequest(
            "This response cannot be streamed because it was not created with background=true.",
            param="stream",
            code="invalid_request_error",
        )
    if not record.stream:
        raise errors.InvalidRequest(
            "This response cannot be streamed because it was not created with stream=true.",
            param="stream",
            code="invalid_request_error",
        )
    window = state.settings.stream_log_hours
    if record.events_purged or (record.completed_at and record.completed_at < time.time() - window * 3600):
        raise errors.InvalidRequest(
            f"This response can no longer be streamed because it ended more than {window:g} hours ago.",
            param="stream",
            code="invalid_request_error",
        )
    after = query_int(request, "starting_after", default=-1, low=-1)
    subscription = await state.hub.subscribe(record.id, durable=True)
    events = follow(
        state.log_source(True),
        subscription,
        record.id,
        after if after is not None else -1,
    )
    return EventStreamResponse(
        events, obfuscate=query_bool(request, "include_obfuscation", True), on_error=_error_event
    )


async def cancel(request: Request) -> Response:
    state = _state(request)
    account_id = await authenticate(state, request)
    response_id = response_id_in_path(request)
    record = await service.retrieve(state, account_id, response_id)
    if not record.background:
        raise errors.InvalidRequest(
            "Only responses created with background=true can be cancelled.",
            param="response_id",
            code="invalid_request_error",
        )
    if record.status in ACTIVE_STATUSES:
        await service.cancel_and_wait(state, record.id, CANCEL_WAIT_SECONDS)
        record = await service.retrieve(state, account_id, response_id)
    return JSONResponse(render(record))


async def delete(request: Request) -> Response:
    state = _state(request)
    account_id = await authenticate(state, request)
    response_id = response_id_in_path(request)
    await service.delete(state, account_id, response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


def _error_event(error: errors.APIError) -> WireEvent:
    # Nested like OpenAI's, so the SDK raises it rather than hanging or ending silently.
    return WireEvent.of({"type": "error", "error": error.body()["error"]})


async def count_input_tokens(request: Request) -> Response:
    state = _state(request)
    account_id = await authenticate(state, request)
    body = await json_body(request, state.settings.max_body_bytes)
    return JSONResponse(await input_tokens.count(state, account_id, body))


routes = [
    Route("/v1/responses", create, methods=["POST"]),
    Route("/v1/responses/input_tokens", count_input_tokens, methods=["POST"]),
    Route("/v1/responses/{response_id}", retrieve, methods=["GET"]),
    Route("/v1/responses/{response_id}", delete, methods=["DELETE"]),
    Route("/v1/responses/{response_id}/cancel", cancel, methods=["POST"]),
]
