"""What keeps the console an operator's: the session cookie (HttpOnly, SameSite=Strict, Secure
over HTTPS, scoped to /console), the session it names (app/storage/operators.py), the CSRF token
each of its forms carries, and the headers every console page goes out with (no inline script,
nothing from elsewhere, never framed)."""

from __future__ import annotations

import hmac
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.service.state import AppState
from app.storage import operators as operators_db
from app.storage.operators import Session

COOKIE = "rs_console"
PATH = "/console"

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        b"form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


class NotLoggedIn(Exception):
    """No live session: the page answers with the login form."""


class SecurityHeaders:
    """Every console answer with SECURITY_HEADERS (a page's own headers of the same name replaced)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in SECURITY_HEADERS}
                kept = [(name, value) for name, value in message.get("headers", []) if name.lower() not in names]
                message = {**message, "headers": [*kept, *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def state_of(request: Request) -> AppState:
    state: AppState = request.app.state.responses
    return state


async def session_of(request: Request) -> Session:
    """The operator's live session, or NotLoggedIn."""
    cookie = request.cookies.get(COOKIE)
    if not cookie:
        raise NotLoggedIn
    async with state_of(request).engine.connect() as conn:
        session = await operators_db.session(conn, cookie)
    if session is None:
        raise NotLoggedIn
    return session


async def checked_form(request: Request, session: Session) -> FormData:
    """An action's form, refused unless it carries the session's CSRF token and comes from a
    console page (the browser's Origin, when it sends one, is this server's)."""
    form = await request.form()
    token = form.get("csrf_token")
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        raise Forbidden("This action came from another site.")
    if not isinstance(token, str) or not hmac.compare_digest(token, session.csrf_token):
        raise Forbidden("This form has expired; go back, reload the page and try again.")
    return form


class Forbidden(Exception):
    """An action refused (403), with what the operator is told."""


def login_redirect(request: Request) -> RedirectResponse:
    """To the login form, which comes back here after."""
    back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"{PATH}/login?next={quote(back, safe='')}", status_code=303)


def set_session_cookie(response: RedirectResponse, request: Request, cookie: str, max_age: int) -> None:
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=max_age,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
