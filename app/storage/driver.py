"""The statements of the token path, sent straight through the driver (asyncpg).

SQLAlchemy's execute costs about 200 µs of client CPU per statement on the development machine
(cache keys, result metadata, the greenlet hop): more than the round trip it wraps. The few
statements that run hundreds of times a second (an event commit, authentication, a response's
insert, a job's claim) are compiled once to the driver's SQL and sent on the pooled connection's
own driver connection, reached without SQLAlchemy's greenlet hop. Only in autocommit, though:
SQLAlchemy opens the driver's transaction lazily, at its own first statement, so on a
connection inside a transaction block they go through SQLAlchemy like any other statement.
Either way rows unpack as tuples (or come as mappings), and JSON columns must be selected as
text: SQLAlchemy decodes JSON, the driver connection does not.

Errors come out as SQLAlchemy's, as from any other statement; a driver connection that broke, or
whose statement was interrupted, is invalidated so that its pool (or its holder) replaces it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import asyncpg
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import TextClause

T = TypeVar("T")

Rows = Sequence[Sequence[Any]]


class DriverStatement:
    def __init__(self, statement: TextClause) -> None:
        self.statement = statement
        compiled = statement.compile(dialect=asyncpg_dialect())  # type: ignore[no-untyped-call]
        self._sql = compiled.string
        self._names = list(compiled.positiontup or [])

    async def rows(self, conn: AsyncConnection, params: Mapping[str, Any]) -> Rows:
        if not _in_autocommit(conn):
            result = await conn.execute(self.statement, params)
            return result.all() if result.returns_rows else []
        return await self._fetch(conn, params)

    async def mappings(self, conn: AsyncConnection, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The rows as column name → value."""
        if not _in_autocommit(conn):
            return [dict(row) for row in (await conn.execute(self.statement, params)).mappings()]
        return [dict(record.items()) for record in await self._fetch(conn, params)]

    async def _fetch(self, conn: AsyncConnection, params: Mapping[str, Any]) -> list[asyncpg.Record]:
        driver: asyncpg.Connection = (
            driver_connection_at_hand(conn) or (await conn.get_raw_connection()).driver_connection
        )
        args = [params[name] for name in self._names]
        try:
            records: list[asyncpg.Record] = await driver.fetch(self._sql, *args)
            return records
        except asyncpg.PostgresError as exc:  # the statement failed
            if not driver.is_closed():
                raise DBAPIError(self._sql, args, exc) from exc
            await conn.invalidate()  # the server ended the connection
            raise OperationalError(self._sql, args, exc, connection_invalidated=True) from exc
        except BaseException as exc:  # the connection broke, or the statement was interrupted midway
            await asyncio.shield(conn.invalidate())
            if isinstance(exc, Exception):
                raise OperationalError(self._sql, args, exc, connection_invalidated=True) from exc
            raise


def as_columns(rows: Iterable[T], **columns: Callable[[T], Any]) -> dict[str, list[Any]]:
    """Rows as the parallel arrays a statement `unnest`s, one list per column, each made in one
    pass over the rows: the arrays cannot fall out of step."""
    listed = list(rows)
    return {name: [value(row) for row in listed] for name, value in columns.items()}


@asynccontextmanager
async def autocommit(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A pooled connection in autocommit, for statements that stand alone: no BEGIN and COMMIT
    (or ROLLBACK) round trips around them, and DriverStatements go straight to the driver."""
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        yield conn


def refused_data(exc: BaseException) -> bool:
    """Postgres refused the statement for what it carried (SQLSTATE classes 22, data exception,
    and 23, integrity constraint violation), on a connection still good: the same statement
    would be refused again, and a batch's other rows may well be accepted alone."""
    if not isinstance(exc, DBAPIError) or exc.connection_invalidated:
        return False
    return str(getattr(exc.orig, "sqlstate", "")).startswith(("22", "23"))


def unreachable(exc: BaseException) -> bool:
    """Postgres could not be asked: no connection could be made (refused, timed out, the server
    starting or shutting down: SQLSTATE classes 08 and 57P), one broke midway, or none was free in
    the pool in time. The same statement may well succeed once it is back."""
    if isinstance(exc, PoolTimeout | OSError):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    sqlstate = str(getattr(exc.orig, "sqlstate", "") or "")
    if sqlstate:  # Postgres answered: with a refusal to connect, or with a statement's failure
        return sqlstate.startswith(("08", "57P"))
    return isinstance(exc, OperationalError | InterfaceError)  # the driver's own: the link failed


def numbered_twice(exc: BaseException) -> bool:
    """Postgres refused an event whose number another writer of its response took first (the
    event log's key, SQLSTATE 23505): that response is no longer the writer's to write."""
    if not isinstance(exc, DBAPIError) or str(getattr(exc.orig, "sqlstate", "")) != "23505":
        return False
    return str(getattr(exc.orig, "constraint_name", "") or "").startswith("event_log")


def foreign_key_violated(exc: BaseException) -> bool:
    """Postgres refused a row whose reference names a row that is gone (SQLSTATE 23503)."""
    return isinstance(exc, DBAPIError) and str(getattr(exc.orig, "sqlstate", "")) == "23503"


def driver_connection_at_hand(conn: AsyncConnection) -> asyncpg.Connection | None:
    """The driver connection of a connection that holds one, reached without I/O and so without
    `get_raw_connection`'s greenlet hop; None for one closed, or invalidated (which
    `get_raw_connection` gives a new one)."""
    sync = conn.sync_connection
    if sync is None or sync.closed or sync.invalidated:
        return None
    driver: asyncpg.Connection = sync.connection.driver_connection
    return driver


def _in_autocommit(conn: AsyncConnection) -> bool:
    sync = conn.sync_connection
    return sync is not None and sync.get_execution_options().get("isolation_level") == "AUTOCOMMIT"
