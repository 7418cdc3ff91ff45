"""Deprecated: the ASGI application moved to `app.api.app` (`uvicorn app.api.app:create_app
--factory`). This name keeps working, with a warning, for one release."""

from __future__ import annotations

import logging

from starlette.applications import Starlette

from app.api.app import create_app as _create_app


def create_app() -> Starlette:
    logging.getLogger(__name__).warning(
        "app.main:create_app is deprecated and goes in the next release: use app.api.app:create_app"
    )
    return _create_app()
