"""The console's pages and actions, under /console: log in and out, the responses (filtered,
newest first, page by page), one response (its settings, chain, items, usage, error, timeline;
live while it runs; cancel), followed as an SSE stream by static/live.js."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp

from app import errors
from app.console import guard
from app.console.guard import Forbidden, NotLoggedIn, checked_form, session_of, state_of
from app.console.item_views import item_view
from app.console.timeline import timeline
from app.events.sse import EventStreamResponse
from app.protocol.encoding import WireEvent
from app.protocol.vocabulary import ACTIVE_STATUSES, STATUSES
from app.service import reading, stopping
from app.storage import console as console_db
from app.storage import operators as operators_db
from app.storage.console import ResponseFilters

TEMPLATES = Jinja2Templates(env=Environment(loader=PackageLoader("app.console", "templates"), autoescape=True))
Handler = Callable[[Request], Awaitable[Response | ASGIApp]]


def page(handler: Handler) -> Handler:
    """A console answer: to the login form without a session, a 403 page for a refused action,
    a 404 page for what is not there."""

    @functools.wraps(handler)
    async def answer(request: Request) -> Response | ASGIApp:
        try:
            return await handler(request)
        except NotLoggedIn:
            return guard.login_redirect(request)
        except Forbidden as refused:
            return TEMPLATES.TemplateResponse(request, "refused.html", {"message": str(refused)}, status_code=403)
        except errors.NotFound as missing:
            return TEMPLATES.TemplateResponse(request, "refused.html", {"message": missing.message}, status_code=404)

    return answer


async def login_form(request: Request) -> Response:
    return TEMPLATES.TemplateResponse(request, "login.html", {"next": _next(request), "failed": False})


async def log_in(request: Request) -> Response:
    form = await request.form()
    key, state = str(form.get("key") or "").strip(), state_of(request)
    lifetime = timedelta(hours=state.settings.console_session_hours)
    async with state.engine.begin() as conn:
        opened = await operators_db.open_session(conn, key, lifetime) if key else None
    if opened is None:
        context = {"next": _next(request), "failed": True}
        return TEMPLATES.TemplateResponse(request, "login.html", context, status_code=401)
    cookie, _ = opened
    answer = RedirectResponse(_next(request, form.get("next")), status_code=303)
    guard.set_session_cookie(answer, request, cookie, int(lifetime.total_seconds()))
    return answer


@page
async def log_out(request: Request) -> Response:
    await checked_form(request, await session_of(request))
    async with state_of(request).engine.begin() as conn:
        await operators_db.close_session(conn, request.cookies[guard.COOKIE])
    answer = RedirectResponse(f"{guard.PATH}/login", status_code=303)
    answer.delete_cookie(guard.COOKIE, path=guard.PATH)
    return answer


@page
async def responses_list(request: Request) -> Response:
    session = await session_of(request)
    filters = _filters(request)
    async with state_of(request).engine.connect() as conn:
        listed, next_cursor = await console_db.list_responses(conn, filters)
    query = {k: v for k, v in request.query_params.items() if k != "before" and v}
    if next_cursor is not None:
        query["before"] = f"{next_cursor[0].isoformat()}|{next_cursor[1]}"
    context = {
        "session": session,
        "responses": listed,
        "filters": request.query_params,
        "statuses": STATUSES,
        "next_query": query if next_cursor is not None else None,
    }
    return TEMPLATES.TemplateResponse(request, "responses.html", context)


@page
async def response_page(request: Request) -> Response:
    session = await session_of(request)
    response_id = request.path_params["response_id"]
    async with state_of(request).engine.connect() as conn:
        detail = await console_db.response_detail(conn, response_id)
        steered = await console_db.steered_at(conn, response_id) if detail is not None else []
    if detail is None:
        raise errors.response_not_found(response_id)
    row = detail.row
    context = {
        "session": session,
        "row": row,
        "account": detail.account,
        "settings": row.settings,
        "input_items": [item_view(item) for item in detail.input_items],
        "output_items": [item_view(item) for item in detail.output_items],
        "continued_by": detail.continued_by,
        "timeline": timeline(row, detail.events, steered, datetime.now(UTC)),
        "active": row.status in ACTIVE_STATUSES,
        "last_event": detail.events[-1].sequence_number if detail.events else -1,
    }
    return TEMPLATES.TemplateResponse(request, "response.html", context)


@page
async def cancel(request: Request) -> Response:
    await checked_form(request, await session_of(request))
    response_id = request.path_params["response_id"]
    await stopping.cancel_any(state_of(request), response_id)
    return RedirectResponse(f"{guard.PATH}/responses/{response_id}", status_code=303)


@page
async def response_events(request: Request) -> Response | ASGIApp:
    """The response's events after `starting_after`, replayed then live, for static/live.js."""
    await session_of(request)
    after = request.query_params.get("starting_after", "-1")
    events = await reading.follow_any(
        state_of(request), request.path_params["response_id"], int(after) if after.lstrip("-").isdigit() else -1
    )
    return EventStreamResponse(events, obfuscate=False, on_error=_error_event)


def _error_event(error: errors.APIError) -> WireEvent:
    return WireEvent.of({"type": "error", "error": error.body()["error"]})


def _filters(request: Request) -> ResponseFilters:
    """The list's filters from its query; a value that does not parse is ignored, as a form field left empty."""
    query = request.query_params
    metadata = None
    if "=" in query.get("metadata", ""):
        key, _, value = query["metadata"].partition("=")
        metadata = (key.strip(), value.strip())
    before = None
    if "|" in query.get("before", ""):
        at, _, last_id = query["before"].partition("|")
        parsed = _time(at)
        before = (parsed, last_id) if parsed is not None else None
    return ResponseFilters(
        account=query.get("account") or None,
        model=query.get("model") or None,
        status=query.get("status") if query.get("status") in STATUSES else None,
        created_from=_time(query.get("from", "")),
        created_to=_time(query.get("to", "")),
        metadata=metadata,
        id_prefix=query.get("id") or None,
        before=before,
    )


def _time(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _next(request: Request, given: Any = None) -> str:
    """Where to go after logging in: a console path only (never another site)."""
    wanted = str(given or request.query_params.get("next") or "")
    if wanted.startswith(guard.PATH + "/") and not wanted.startswith("//") and "\\" not in wanted:
        return wanted
    return f"{guard.PATH}/responses"


async def home(request: Request) -> Response:
    return RedirectResponse(f"{guard.PATH}/responses", status_code=303)


def mount() -> Mount:
    """The console, every answer with the guard's security headers."""
    routes: list[BaseRoute] = [
        Route("/", home),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", log_in, methods=["POST"]),
        Route("/logout", log_out, methods=["POST"]),
        Route("/responses", responses_list),
        Route("/responses/{response_id}", response_page),
        Route("/responses/{response_id}/cancel", cancel, methods=["POST"]),
        Route("/responses/{response_id}/events", response_events),
        Mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="console_static"),
    ]
    return Mount(guard.PATH, routes=routes, middleware=[Middleware(guard.SecurityHeaders)])
