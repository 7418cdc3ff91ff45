"""Logging in and out of the console (app/console/guard.py keeps the session)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from app.console import guard
from app.console.guard import checked_form, session_of, state_of
from app.console.rendering import TEMPLATES, page
from app.storage import operators as operators_db


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


def _next(request: Request, given: Any = None) -> str:
    """Where to go after logging in: a console path only (never another site)."""
    wanted = str(given or request.query_params.get("next") or "")
    if wanted.startswith(guard.PATH + "/") and not wanted.startswith("//") and "\\" not in wanted:
        return wanted
    return f"{guard.PATH}/responses"


async def home(request: Request) -> Response:
    return RedirectResponse(f"{guard.PATH}/responses", status_code=303)
