"""Liveness, readiness and the model list."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app import errors
from app.api.auth import authenticate
from app.process.readiness import dependency_checks
from app.service.state import AppState


async def health(request: Request) -> JSONResponse:
    """Liveness: the process answers. A process manager restarts it when this fails; an outage of
    Postgres or Redis is not a reason to (see /ready)."""
    return JSONResponse({"status": "ok"})


async def ready(request: Request) -> JSONResponse:
    """Readiness: Postgres and Redis both answer, and this process follows the events channel
    (load balancers route on this; a stream could not start without it)."""
    state: AppState = request.app.state.responses
    checks = await dependency_checks(state.engine, state.redis)
    if checks["redis"] == "ok" and not state.hub.subscribed:
        checks["redis"] = "unavailable: subscribing to the events channel again"
    healthy = all(v == "ok" for v in checks.values())
    # Said, not required: without pgvector everything but vector stores and file_search works.
    vector_stores = "ok" if await state.check_pgvector() else "unavailable: PostgreSQL has no pgvector extension"
    # Said too: what the server does with a web_search tool (the backend is not asked here).
    web_search = (
        "ok: searched through the configured backend"
        if state.settings.web_search_url
        else "off: RESPONSES_WEB_SEARCH_URL is not set, so web_search tools are echoed and not offered to the model"
    )
    return JSONResponse(
        {
            "status": "ok" if healthy else "unavailable",
            **checks,
            "vector_stores": vector_stores,
            "web_search": web_search,
        },
        status_code=200 if healthy else 503,
    )


async def list_models(request: Request) -> JSONResponse:
    state: AppState = request.app.state.responses
    await authenticate(state, request)
    ids = sorted([entry.id for entry in state.catalog.entries] + [e.id for e in state.catalog.embedding_models])
    return JSONResponse({"object": "list", "data": [_model_object(model_id) for model_id in ids]})


async def retrieve_model(request: Request) -> JSONResponse:
    """One model of the catalog, by its id or an alias the catalog gives it (as `model` takes)."""
    state: AppState = request.app.state.responses
    await authenticate(state, request)
    name = request.path_params["model"]
    entry = state.catalog.by_name.get(name) or state.catalog.embeddings_by_name.get(name)
    if entry is None:
        raise errors.NotFound(f"The model '{name}' does not exist", param="model", code="model_not_found")
    return JSONResponse(_model_object(entry.id))


def _model_object(model_id: str) -> dict[str, object]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "responses-server"}


routes = [
    Route("/health", health, methods=["GET"]),
    Route("/ready", ready, methods=["GET"]),
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/v1/models/{model:path}", retrieve_model, methods=["GET"]),
]
