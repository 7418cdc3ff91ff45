"""/v1/conversations: create, retrieve, update, delete; and their items: list, create, retrieve,
delete (OpenAI's Conversations API)."""

from __future__ import annotations

from typing import Literal, cast

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app import errors
from app.api.auth import authenticate
from app.api.http import json_body, query_choice, query_include, query_int
from app.service import conversations
from app.service.idempotency import HEADER, IdempotencyKey
from app.service.state import AppState


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.responses
    return state


def _conversation_id(request: Request) -> str:
    conversation_id: str = request.path_params["conversation_id"]
    if "\x00" in conversation_id:  # no stored id holds one
        raise errors.conversation_not_found(conversation_id)
    return conversation_id


async def create(request: Request) -> JSONResponse:
    state = _state(request)
    caller = await authenticate(state, request)
    body = await json_body(request, state.settings.max_body_bytes)
    key = IdempotencyKey.of(request.headers.get(HEADER), "conversations.create", body.data)
    return JSONResponse(await conversations.create(state, caller.account_id, body.data, key))


async def retrieve(request: Request) -> JSONResponse:
    state = _state(request)
    caller = await authenticate(state, request)
    return JSONResponse(await conversations.retrieve(state, caller.account_id, _conversation_id(request)))


async def update(request: Request) -> JSONResponse:
    state = _state(request)
    caller = await authenticate(state, request)
    body = await json_body(request, state.settings.max_body_bytes)
    return JSONResponse(await conversations.update(state, caller.account_id, _conversation_id(request), body.data))


async def delete(request: Request) -> JSONResponse:
    state = _state(request)
    caller = await authenticate(state, request)
    return JSONResponse(await conversations.delete(state, caller.account_id, _conversation_id(request)))


async def list_items(request: Request) -> JSONResponse:
    state = _state(request)
    caller = await authenticate(state, request)
    order = cast(Literal["asc", "desc"], query_choice(request, "order", ("asc", "desc"), "desc"))
    page = await conversations.list_items(
        state,
        caller.account_id,
        _conversation_id(request),
        order=order,
        limit=query_int(request, "limit", default=20, low=1, high=100) or 20,
        after=request.query_params.get("after") or None,
        include=query_include(request),
    )
    return JSONResponse(page)


async def add_items(request: Request) -> JSONResponse:
    state = _state(request)
    caller = await authenticate(state, request)
    body = await json_body(request, state.settings.max_body_bytes)
    conversation_id = _conversation_id(request)
    route = (
        f"conversations/{conversation_id}/items.create"  # (the same items for another conversation: another request)
    )
    key = IdempotencyKey.of(request.headers.get(HEADER), route, body.data)
    return JSONResponse(
        await conversations.add_items(state, caller.account_id, conversation_id, body.data, query_include(request), key)
    )


async def retrieve_item(request: Request) -> JSONResponse:
    state = _state(request)
    caller = await authenticate(state, request)
    conversation_id, item_id = _conversation_id(request), request.path_params["item_id"]
    return JSONResponse(
        await conversations.retrieve_item(state, caller.account_id, conversation_id, item_id, query_include(request))
    )


async def delete_item(request: Request) -> JSONResponse:
    state = _state(request)
    caller = await authenticate(state, request)
    conversation_id, item_id = _conversation_id(request), request.path_params["item_id"]
    return JSONResponse(await conversations.delete_item(state, caller.account_id, conversation_id, item_id))


routes = [
    Route("/v1/conversations", create, methods=["POST"]),
    Route("/v1/conversations/{conversation_id}", retrieve, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}", update, methods=["POST"]),
    Route("/v1/conversations/{conversation_id}", delete, methods=["DELETE"]),
    Route("/v1/conversations/{conversation_id}/items", list_items, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}/items", add_items, methods=["POST"]),
    Route("/v1/conversations/{conversation_id}/items/{item_id}", retrieve_item, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}/items/{item_id}", delete_item, methods=["DELETE"]),
]
