"""/v1/embeddings (OpenAI's Embeddings API), from the catalog's embedding models."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.api.auth import authenticate
from app.api.http import json_body
from app.service import embeddings
from app.service.state import AppState


async def create(request: Request) -> JSONResponse:
    state: AppState = request.app.state.responses
    await authenticate(state, request)
    body = await json_body(request, state.settings.max_body_bytes)
    return JSONResponse(await embeddings.create(state, body.data))


routes = [Route("/v1/embeddings", create, methods=["POST"])]
