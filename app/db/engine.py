"""The one async engine of a process."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.settings import Settings


def create_engine(settings: Settings) -> AsyncEngine:
    # No pre-ping (a round trip per checkout): a connection broken by a Postgres restart fails
    # its one request (503) and the pool discards it.
    return create_async_engine(
        settings.database_url, pool_size=settings.db_pool_size, max_overflow=settings.db_max_overflow
    )
