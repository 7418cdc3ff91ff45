"""The connection pool honours its settings: a process never holds more Postgres connections
than RESPONSES_DB_POOL_SIZE + RESPONSES_DB_MAX_OVERFLOW; past that, callers wait their turn.
A held connection (app/db/held.py) is kept between statements and replaced once in doubt; so is
one whose driver statement (app/db/driver.py) found it broken or was interrupted."""

from __future__ import annotations

import asyncio
import secrets

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError

from app.db.driver import DriverStatement
from app.db.engine import create_engine
from app.db.held import HeldConnection
from tests.conftest import Environment


async def test_callers_past_the_pool_and_its_overflow_wait_for_a_connection(environment: Environment) -> None:
    settings = environment.settings().model_copy(update={"db_pool_size": 1, "db_max_overflow": 1})
    engine = create_engine(settings)
    try:
        first, second = await engine.connect().start(), await engine.connect().start()
        third = asyncio.create_task(engine.connect().start())
        await asyncio.sleep(0.3)
        assert not third.done()
        await first.close()
        async with asyncio.timeout(5):
            await (await third).close()
        await second.close()
    finally:
        await engine.dispose()


async def backend_pid(held: HeldConnection) -> int:
    async with held.use() as conn:
        return int(await conn.scalar(text("SELECT pg_backend_pid()")))


async def test_a_held_connection_is_kept_between_statements_and_holds_one_pool_slot(environment: Environment) -> None:
    settings = environment.settings().model_copy(update={"db_pool_size": 1, "db_max_overflow": 0})
    engine = create_engine(settings)
    held = HeldConnection(engine)
    try:
        first = await backend_pid(held)
        assert await backend_pid(held) == first  # no checkout per statement
        assert engine.pool.checkedout() == 1  # type: ignore[attr-defined]
        await held.close()
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        await engine.dispose()


async def test_a_held_connection_whose_backend_died_is_replaced_after_its_failed_statement(
    environment: Environment,
) -> None:
    engine = create_engine(environment.settings())
    held = HeldConnection(engine)
    try:
        dead = await backend_pid(held)
        async with engine.connect() as admin:
            await admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dead})
        with pytest.raises(DBAPIError):
            await backend_pid(held)
        assert await backend_pid(held) != dead
    finally:
        await held.close()
        await engine.dispose()


async def test_a_statement_interrupted_midway_leaves_no_half_used_connection_behind(environment: Environment) -> None:
    engine = create_engine(environment.settings())
    held = HeldConnection(engine)
    try:
        interrupted = await backend_pid(held)

        async def slow() -> None:
            async with held.use() as conn:
                await conn.execute(text("SELECT pg_sleep(5)"))

        task = asyncio.create_task(slow())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with asyncio.timeout(3):  # not stuck behind the interrupted statement
            assert await backend_pid(held) != interrupted
    finally:
        await held.close()
        await engine.dispose()


PID = DriverStatement(text("SELECT pg_backend_pid()"))


async def driver_pid(held: HeldConnection) -> int:
    async with held.use() as conn:
        return int((await PID.rows(conn, {}))[0][0])


async def test_a_driver_statement_inside_a_transaction_block_is_part_of_it(environment: Environment) -> None:
    engine = create_engine(environment.settings())
    note = DriverStatement(text("INSERT INTO accounts (id, name) VALUES (:id, :id)"))
    account = f"acct_rolled_back_{secrets.token_hex(4)}"
    try:
        with pytest.raises(RuntimeError):
            async with engine.begin() as conn:
                await note.rows(conn, {"id": account})
                raise RuntimeError("the block fails after the statement")
        async with engine.connect() as conn:
            assert await conn.scalar(text("SELECT count(*) FROM accounts WHERE id = :id"), {"id": account}) == 0
    finally:
        await engine.dispose()


async def test_a_failed_driver_statement_raises_sqlalchemys_error_and_keeps_its_connection(
    environment: Environment,
) -> None:
    engine = create_engine(environment.settings())
    held = HeldConnection(engine)
    failing = DriverStatement(text("SELECT 1 / 0"))
    try:
        before = await driver_pid(held)
        with pytest.raises(DBAPIError):
            async with held.use() as conn:
                await failing.rows(conn, {})
        assert await driver_pid(held) == before
    finally:
        await held.close()
        await engine.dispose()


async def test_a_driver_connection_that_died_or_was_interrupted_is_replaced(environment: Environment) -> None:
    engine = create_engine(environment.settings())
    held = HeldConnection(engine)
    sleep = DriverStatement(text("SELECT pg_sleep(5)"))
    try:
        dead = await driver_pid(held)
        async with engine.connect() as admin:
            await admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dead})
        with pytest.raises(OperationalError):  # what the API answers 503 for, and the writer retries
            await driver_pid(held)
        interrupted = await driver_pid(held)
        assert interrupted != dead

        async def slow() -> None:
            async with held.use() as conn:
                await sleep.rows(conn, {})

        task = asyncio.create_task(slow())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with asyncio.timeout(3):
            assert await driver_pid(held) != interrupted
    finally:
        await held.close()
        await engine.dispose()
