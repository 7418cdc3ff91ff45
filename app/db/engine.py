"""The one async engine of a process."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.settings import Settings


def create_engine(settings: Settings) -> AsyncEngine:
    # pool_pre_ping: a Postgres restart must cost one failed request, not a pool of dead sockets.
    return create_async_engine(settings.database_url, pool_size=20, max_overflow=20, pool_pre_ping=True)
