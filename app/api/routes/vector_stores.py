"""/v1/vector_stores: stores, their files, file batches and search (OpenAI's Vector Stores API).
Answers that a poller reads (a file, a batch) carry `openai-poll-after-ms`."""

from __future__ import annotations

from typing import Any, Literal, cast

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.api.auth import authenticate
from app.api.http import json_body, query_choice, query_int
from app.service import vector_store_files, vector_stores
from app.service.state import AppState
from app.storage.tables import VECTOR_STORE_FILE_STATUSES

_POLLED = {"openai-poll-after-ms": vector_stores.POLL_AFTER_MS}


async def _caller(request: Request) -> tuple[AppState, str]:
    state: AppState = request.app.state.responses
    caller = await authenticate(state, request)
    return state, caller.account_id


async def _body(request: Request, state: AppState) -> dict[str, Any]:
    return (await json_body(request, state.settings.max_body_bytes)).data


def _page(request: Request) -> dict[str, Any]:
    return {
        "order": cast(Literal["asc", "desc"], query_choice(request, "order", ("asc", "desc"), "desc")),
        "limit": query_int(request, "limit", default=20, low=1, high=100) or 20,
        "after": request.query_params.get("after") or None,
        "before": request.query_params.get("before") or None,
    }


def _status(request: Request) -> str | None:
    if not request.query_params.get("filter"):
        return None
    return query_choice(request, "filter", VECTOR_STORE_FILE_STATUSES, "")


def _store(request: Request) -> str:
    store_id: str = request.path_params["store_id"]
    return store_id


def _file(request: Request) -> str:
    file_id: str = request.path_params["file_id"]
    return file_id


def _batch(request: Request) -> str:
    batch_id: str = request.path_params["batch_id"]
    return batch_id


async def create(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    return JSONResponse(await vector_stores.create(state, account, await _body(request, state)))


async def list_stores(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    return JSONResponse(await vector_stores.list_stores(state, account, **_page(request)))


async def retrieve(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    return JSONResponse(await vector_stores.retrieve(state, account, _store(request)), headers=_POLLED)


async def modify(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    body = await _body(request, state)
    return JSONResponse(await vector_stores.modify(state, account, _store(request), body))


async def delete(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    return JSONResponse(await vector_stores.delete(state, account, _store(request)))


async def search(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    body = await _body(request, state)
    return JSONResponse(await vector_stores.search(state, account, _store(request), body))


async def attach(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    body = await _body(request, state)
    answer = await vector_store_files.attach(state, account, _store(request), body)
    return JSONResponse(answer, headers=_POLLED)


async def list_files(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    page = await vector_store_files.list_files(
        state, account, _store(request), status=_status(request), **_page(request)
    )
    return JSONResponse(page)


async def retrieve_file(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    answer = await vector_store_files.retrieve(state, account, _store(request), _file(request))
    return JSONResponse(answer, headers=_POLLED)


async def update_file(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    body = await _body(request, state)
    return JSONResponse(await vector_store_files.update(state, account, _store(request), _file(request), body))


async def detach(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    return JSONResponse(await vector_store_files.detach(state, account, _store(request), _file(request)))


async def file_content(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    return JSONResponse(await vector_store_files.content(state, account, _store(request), _file(request)))


async def create_batch(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    body = await _body(request, state)
    answer = await vector_store_files.create_batch(state, account, _store(request), body)
    return JSONResponse(answer, headers=_POLLED)


async def retrieve_batch(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    answer = await vector_store_files.retrieve_batch(state, account, _store(request), _batch(request))
    return JSONResponse(answer, headers=_POLLED)


async def cancel_batch(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    return JSONResponse(await vector_store_files.cancel_batch(state, account, _store(request), _batch(request)))


async def batch_files(request: Request) -> JSONResponse:
    state, account = await _caller(request)
    store_id, batch_id = _store(request), _batch(request)
    page = await vector_store_files.list_files(
        state, account, store_id, status=_status(request), batch_id=batch_id, **_page(request)
    )
    return JSONResponse(page)


_STORE = "/v1/vector_stores/{store_id}"
routes = [
    Route("/v1/vector_stores", create, methods=["POST"]),
    Route("/v1/vector_stores", list_stores, methods=["GET"]),
    Route(_STORE, retrieve, methods=["GET"]),
    Route(_STORE, modify, methods=["POST"]),
    Route(_STORE, delete, methods=["DELETE"]),
    Route(f"{_STORE}/search", search, methods=["POST"]),
    Route(f"{_STORE}/files", attach, methods=["POST"]),
    Route(f"{_STORE}/files", list_files, methods=["GET"]),
    Route(f"{_STORE}/files/{{file_id}}", retrieve_file, methods=["GET"]),
    Route(f"{_STORE}/files/{{file_id}}", update_file, methods=["POST"]),
    Route(f"{_STORE}/files/{{file_id}}", detach, methods=["DELETE"]),
    Route(f"{_STORE}/files/{{file_id}}/content", file_content, methods=["GET"]),
    Route(f"{_STORE}/file_batches", create_batch, methods=["POST"]),
    Route(f"{_STORE}/file_batches/{{batch_id}}", retrieve_batch, methods=["GET"]),
    Route(f"{_STORE}/file_batches/{{batch_id}}/cancel", cancel_batch, methods=["POST"]),
    Route(f"{_STORE}/file_batches/{{batch_id}}/files", batch_files, methods=["GET"]),
]
