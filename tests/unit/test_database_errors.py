"""Which database errors are an outage (the same statement may succeed once Postgres is back) and
which are the statement's own: a follower waits out the first kind and fails on the second."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.storage.driver import unreachable


@pytest.mark.parametrize(
    "error",
    [
        ConnectionRefusedError(111, "Connect call failed"),
        TimeoutError(),
        PoolTimeout("QueuePool limit reached"),
        OperationalError("SELECT 1", (), asyncpg.exceptions.CannotConnectNowError("the database is starting up")),
        DBAPIError("SELECT 1", (), asyncpg.exceptions.AdminShutdownError("terminating connection")),
        DBAPIError("SELECT 1", (), asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed")),
        InterfaceError("SELECT 1", (), Exception("connection is closed")),
        DBAPIError("SELECT 1", (), asyncpg.exceptions.InternalClientError("in use"), connection_invalidated=True),
    ],
)
def test_an_outage(error: BaseException) -> None:
    assert unreachable(error)


@pytest.mark.parametrize(
    "error",
    [
        DBAPIError("INSERT", (), asyncpg.exceptions.UniqueViolationError("duplicate key")),
        DBAPIError("SELEC 1", (), asyncpg.exceptions.PostgresSyntaxError("syntax error")),
        DBAPIError("SELECT", (), asyncpg.exceptions.QueryCanceledError("canceling statement due to statement timeout")),
        ValueError("not a database error"),
    ],
)
def test_the_statement_s_own(error: BaseException) -> None:
    assert not unreachable(error)
