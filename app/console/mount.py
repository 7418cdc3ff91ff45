"""The console's routes, under /console, every answer with the guard's security headers."""

from __future__ import annotations

from pathlib import Path

from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from app.console import accounts_pages, guard, responses_pages, sessions, system_page


def mount() -> Mount:
    routes: list[BaseRoute] = [
        Route("/", sessions.home),
        Route("/login", sessions.login_form, methods=["GET"]),
        Route("/login", sessions.log_in, methods=["POST"]),
        Route("/logout", sessions.log_out, methods=["POST"]),
        Route("/responses", responses_pages.responses_list),
        Route("/responses/{response_id}", responses_pages.response_page),
        Route("/responses/{response_id}/cancel", responses_pages.cancel, methods=["POST"]),
        Route("/responses/{response_id}/events", responses_pages.response_events),
        Route("/conversations/{conversation_id}", responses_pages.conversation_page),
        Route("/accounts", accounts_pages.accounts_list),
        Route("/accounts/{account_id}", accounts_pages.account_page),
        Route("/accounts/{account_id}/keys/{key_id}/revoke", accounts_pages.revoke_key, methods=["POST"]),
        Route("/system", system_page.system),
        Mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="console_static"),
    ]
    return Mount(guard.PATH, routes=routes, middleware=[Middleware(guard.SecurityHeaders)])
