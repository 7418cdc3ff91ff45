"""/v1/files: upload (multipart, streamed), list, retrieve, content, delete (OpenAI's Files API)."""

from __future__ import annotations

from typing import Literal, cast
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.api.auth import authenticate
from app.api.http import query_choice, query_int
from app.api.multipart import boundary_of, form_events
from app.protocol.file_upload import FILE_PURPOSES
from app.service import files
from app.service.state import AppState


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.responses
    return state


async def create(request: Request) -> JSONResponse:
    state = _state(request)
    caller = await authenticate(state, request)
    boundary = boundary_of(request)
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > state.settings.file_max_bytes + 64 * 1024:
        raise files.too_large(state.settings.file_max_bytes)
    form = form_events(request, boundary, state.settings.upload_idle_seconds)
    return JSONResponse(await files.upload(state, caller.account_id, form))


async def list_files(request: Request) -> JSONResponse:
    state = _state(request)
    caller = await authenticate(state, request)
    purpose = request.query_params.get("purpose") or None
    if purpose is not None:
        query_choice(request, "purpose", FILE_PURPOSES, purpose)
    order = cast(Literal["asc", "desc"], query_choice(request, "order", ("asc", "desc"), "desc"))
    page = await files.list_files(
        state,
        caller.account_id,
        purpose=purpose,
        order=order,
        limit=query_int(request, "limit", default=10_000, low=1, high=10_000) or 10_000,
        after=request.query_params.get("after") or None,
    )
    return JSONResponse(page)


async def retrieve(request: Request) -> JSONResponse:
    state = _state(request)
    caller = await authenticate(state, request)
    return JSONResponse(await files.retrieve(state, caller.account_id, request.path_params["file_id"]))


async def content(request: Request) -> Response:
    state = _state(request)
    caller = await authenticate(state, request)
    stored = await files.found(state, caller.account_id, request.path_params["file_id"])
    return StreamingResponse(
        files.content(state, stored),
        media_type=stored.content_type or "application/octet-stream",
        headers={
            "content-length": str(stored.size),
            "content-disposition": f"attachment; filename*=UTF-8''{quote(stored.filename)}",
        },
    )


async def delete(request: Request) -> JSONResponse:
    state = _state(request)
    caller = await authenticate(state, request)
    return JSONResponse(await files.delete(state, caller.account_id, request.path_params["file_id"]))


routes = [
    Route("/v1/files", create, methods=["POST"]),
    Route("/v1/files", list_files, methods=["GET"]),
    Route("/v1/files/{file_id}", retrieve, methods=["GET"]),
    Route("/v1/files/{file_id}", delete, methods=["DELETE"]),
    Route("/v1/files/{file_id}/content", content, methods=["GET"]),
]
