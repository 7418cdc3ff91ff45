"""The one async engine of a process.

A connection the server ended while it sat idle (a Postgres restart, a failover, an idle
timeout) is replaced when it is next taken, so no request fails for it. The driver notices the
server closing the socket, so the check is a flag, not a round trip (SQLAlchemy's pre-ping would
cost one per checkout).
"""

from __future__ import annotations

from typing import Any

import asyncpg
from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from app.settings import Settings


def create_engine(settings: Settings, pool_size: int | None = None, max_overflow: int | None = None) -> AsyncEngine:
    """The process's engine; a component that must never wait for the process's pool asks for a
    small one of its own (`pool_size`, `max_overflow`)."""
    engine = create_async_engine(
        settings.database_url,
        pool_size=settings.db_pool_size if pool_size is None else pool_size,
        max_overflow=settings.db_max_overflow if max_overflow is None else max_overflow,
        pool_timeout=settings.db_pool_timeout,
    )
    event.listen(engine.sync_engine, "checkout", _refuse_closed)
    return engine


def driver_closed(driver_connection: asyncpg.Connection | None) -> bool:
    return driver_connection is None or driver_connection.is_closed()


def _refuse_closed(dbapi_connection: Any, record: ConnectionPoolEntry, proxy: Any) -> None:
    # The pool answers DisconnectionError by connecting this entry afresh.
    if driver_closed(record.driver_connection):
        raise DisconnectionError("the server closed this connection while it was idle")
