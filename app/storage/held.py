"""A pooled connection kept by one caller that runs its statements one after another.

The event writer and the batched statements (authentication, claims) run one statement at a
time, hundreds of times a second. Checking a connection out of the pool and back in for each
cost more CPU than the statement's own client side; these callers keep theirs, from a pool apart
from the requests' (HELD_CONNECTIONS in app/service/state.py, workers/state.py). A connection
whose statement found it broken or was interrupted is invalidated (by SQLAlchemy, or by
app/storage/driver.py for the statements sent through the driver); so is one the server closed
while it was idle (app/storage/engine.py). The next use then takes a fresh one from the pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.storage.driver import driver_connection_at_hand
from app.storage.engine import driver_closed


class HeldConnection:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._conn: AsyncConnection | None = None
        self._lock = asyncio.Lock()  # one statement at a time, even if a caller forgets

    @asynccontextmanager
    async def use(self) -> AsyncIterator[AsyncConnection]:
        """The connection, in autocommit: each statement is its own transaction."""
        async with self._lock:
            if self._conn is not None and not self._conn.invalidated and _closed_by_server(self._conn):
                await self._conn.invalidate()
            if self._conn is None or self._conn.invalidated:
                await self._release()
                conn = await self._engine.connect()
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                self._conn = conn
            yield self._conn

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    async def close(self) -> None:
        async with self._lock:
            await self._release()

    async def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


class HeldConnections:
    """Held connections for a caller that runs up to `count` statements at once (a Batched with
    lanes): each statement takes a free one. Each is opened when first needed."""

    def __init__(self, engine: AsyncEngine, count: int) -> None:
        self._held = [HeldConnection(engine) for _ in range(count)]

    @asynccontextmanager
    async def use(self) -> AsyncIterator[AsyncConnection]:
        free = next((held for held in self._held if not held.busy), self._held[0])
        async with free.use() as conn:
            yield conn

    async def close(self) -> None:
        for held in self._held:
            await held.close()


def _closed_by_server(conn: AsyncConnection) -> bool:
    return driver_closed(driver_connection_at_hand(conn))
