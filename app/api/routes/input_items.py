"""/v1/responses/{id}/input_items: the context a response was generated from, page by page."""

from __future__ import annotations

from typing import Literal, cast

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.api.auth import authenticate
from app.api.http import query_choice, query_include, query_int, response_id_in_path
from app.service import reading
from app.service.state import AppState


async def list_input_items(request: Request) -> JSONResponse:
    state: AppState = request.app.state.responses
    caller = await authenticate(state, request)
    order = cast(Literal["asc", "desc"], query_choice(request, "order", ("asc", "desc"), "desc"))
    limit = query_int(request, "limit", default=20, low=1, high=100) or 20
    page = await reading.input_items(
        state,
        caller.account_id,
        response_id_in_path(request),
        order=order,
        limit=limit,
        after=request.query_params.get("after") or None,
        before=request.query_params.get("before") or None,
        include=query_include(request),
    )
    return JSONResponse(page)


routes = [Route("/v1/responses/{response_id}/input_items", list_input_items, methods=["GET"])]
