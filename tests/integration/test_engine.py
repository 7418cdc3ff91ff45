"""The connection pool honours its settings: a process never holds more Postgres connections
than RESPONSES_DB_POOL_SIZE + RESPONSES_DB_MAX_OVERFLOW; past that, callers wait their turn.
A held connection (app/db/held.py) is kept between statements and replaced once in doubt."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

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
