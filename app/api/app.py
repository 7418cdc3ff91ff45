"""The ASGI application: `create_app(settings)` builds it; uvicorn serves it (`responses-server api`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app import errors
from app.api import middleware
from app.api.routes import (
    conversations,
    embeddings,
    files,
    input_items,
    meta,
    metrics,
    responses,
    responses_socket,
    vector_stores,
)
from app.console import mount as console
from app.process import gc_tuning
from app.service.state import AppState
from app.settings import Settings


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state = await AppState.open(settings)
        app.state.responses = state
        gc_tuning.tune_after_startup()
        try:
            yield
        finally:
            await state.close()

    console_routes = [console.mount()] if settings.console else []
    app = Starlette(
        routes=[
            *console_routes,
            *responses.routes,
            *responses_socket.routes,
            *input_items.routes,
            *conversations.routes,
            *files.routes,
            *embeddings.routes,
            *vector_stores.routes,
            *meta.routes,
            *metrics.routes,
        ],
        lifespan=lifespan,
        exception_handlers={errors.APIError: _api_error, HTTPException: _http_error},
    )
    middleware.install(app)
    return app


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, errors.APIError)
    return JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.answer_headers())


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error = (
        errors.NotFound(f"Unknown route: {request.method} {request.url.path}")
        if exc.status_code == 404
        else errors.InvalidRequest(f"{exc.detail}: {request.method} {request.url.path}")
    )
    error.status_code = exc.status_code
    return JSONResponse(error.body(), status_code=exc.status_code)
