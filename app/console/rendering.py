"""What every console page shares: its templates (autoescaped: model and user text is text) and
the answers to a missing session, a refused action and a missing thing."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from jinja2 import Environment, PackageLoader
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp

from app import errors
from app.console import guard
from app.console.guard import Forbidden, NotLoggedIn

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


def path_id(request: Request, name: str) -> str:
    """An id from the path; one no Postgres text can hold (a NUL) names nothing: a 404."""
    value = str(request.path_params[name])
    if "\x00" in value:
        raise errors.NotFound(f"No such {name.removesuffix('_id')}.")
    return value
