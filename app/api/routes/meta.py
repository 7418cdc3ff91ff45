"""Liveness, readiness and the model list."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

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
    return JSONResponse({"status": "ok" if healthy else "unavailable", **checks}, status_code=200 if healthy else 503)


async def list_models(request: Request) -> JSONResponse:
    state: AppState = request.app.state.responses
    await authenticate(state, request)
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {"id": model_id, "object": "model", "created": 0, "owned_by": "responses-server"}
                for model_id in sorted(entry.id for entry in state.catalog.entries)
            ],
        }
    )


routes = [
    Route("/health", health, methods=["GET"]),
    Route("/ready", ready, methods=["GET"]),
    Route("/v1/models", list_models, methods=["GET"]),
]
