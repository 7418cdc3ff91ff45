"""/v1/responses: create, retrieve (JSON or replayed stream), cancel, delete, count input tokens, compact.

Each handler reads the request (the caller, its body, its parameters), hands them to the service,
and renders what comes back: JSON, an SSE stream, or a JSON answer that waits for the end."""

from __future__ import annotations

from functools import partial

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from app import errors
from app.api.auth import authenticate
from app.api.http import json_body, query_bool, query_include, query_int, response_id_in_path
from app.events.final_response import FinalResponse
from app.events.sse import EventStreamResponse
from app.protocol.create_request import check_include
from app.protocol.encoding import WireEvent
from app.protocol.response_object import render
from app.service import compaction, creation, input_tokens, reading, stopping
from app.service.idempotency import HEADER, IdempotencyKey
from app.service.state import AppState


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.responses
    return state


async def create(request: Request) -> Response | ASGIApp:
    state = _state(request)
    caller = await authenticate(state, request)
    body = await json_body(request, state.settings.max_body_bytes)
    key = IdempotencyKey.of(request.headers.get(HEADER), "responses.create", body.data)
    created = await creation.create(state, caller, body.data, body.size, key=key)
    if created.events is None:
        return JSONResponse(render(created.record), headers=created.headers)
    if created.record.stream:
        options = body.data.get("stream_options") or {}
        return EventStreamResponse(
            created.events,
            obfuscate=options.get("include_obfuscation") is not False,
            on_disconnect=created.on_disconnect,
            on_error=_error_event,
            headers=created.headers,
        )
    return FinalResponse(created.events, created.on_disconnect, headers=created.headers)


async def compact(request: Request) -> Response | ASGIApp:
    state = _state(request)
    caller = await authenticate(state, request)
    body = await json_body(request, state.settings.max_body_bytes)
    key = IdempotencyKey.of(request.headers.get(HEADER), "responses.compact", body.data)
    created = await compaction.compact(state, caller, body.data, body.size, key)
    if created.events is None:  # sent again with its Idempotency-Key, ended, its log no longer kept
        return JSONResponse(await compaction.answer(state, render(created.record)), headers=created.headers)
    return FinalResponse(
        created.events, created.on_disconnect, render=partial(compaction.answer, state), headers=created.headers
    )


async def retrieve(request: Request) -> Response | ASGIApp:
    state = _state(request)
    caller = await authenticate(state, request)
    response_id = response_id_in_path(request)
    if not query_bool(request, "stream"):
        include = query_include(request)
        check_include(include)
        return JSONResponse(render(await reading.retrieve(state, caller.account_id, response_id), include))
    after = query_int(request, "starting_after", default=-1, low=-1)
    events = await reading.resume(state, caller.account_id, response_id, -1 if after is None else after)
    return EventStreamResponse(
        events, obfuscate=query_bool(request, "include_obfuscation", True), on_error=_error_event
    )


async def cancel(request: Request) -> Response:
    state = _state(request)
    caller = await authenticate(state, request)
    return JSONResponse(render(await stopping.cancel(state, caller.account_id, response_id_in_path(request))))


async def delete(request: Request) -> Response:
    state = _state(request)
    caller = await authenticate(state, request)
    response_id = response_id_in_path(request)
    await stopping.delete(state, caller.account_id, response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


def _error_event(error: errors.APIError) -> WireEvent:
    # Nested like OpenAI's, so the SDK raises it rather than hanging or ending silently.
    return WireEvent.of({"type": "error", "error": error.body()["error"]})


async def count_input_tokens(request: Request) -> Response:
    state = _state(request)
    caller = await authenticate(state, request)
    body = await json_body(request, state.settings.max_body_bytes)
    return JSONResponse(await input_tokens.count(state, caller.account_id, body.data))


routes = [
    Route("/v1/responses", create, methods=["POST"]),
    Route("/v1/responses/input_tokens", count_input_tokens, methods=["POST"]),
    Route("/v1/responses/compact", compact, methods=["POST"]),
    Route("/v1/responses/{response_id}", retrieve, methods=["GET"]),
    Route("/v1/responses/{response_id}", delete, methods=["DELETE"]),
    Route("/v1/responses/{response_id}/cancel", cancel, methods=["POST"]),
]
