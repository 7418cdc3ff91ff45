"""The connection pool honours its settings: a process's requests never hold more Postgres
connections than RESPONSES_DB_POOL_SIZE + RESPONSES_DB_MAX_OVERFLOW; past that, callers wait
their turn (its held connections have a pool of their own: test_held_connections.py).
A held connection (app/storage/held.py) is kept between statements and replaced once in doubt; so is
one whose driver statement (app/storage/driver.py) found it broken or was interrupted."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any, Literal

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.storage.driver import DriverStatement, autocommit
from app.storage.engine import create_engine
from app.storage.held import HeldConnection
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


Through = Literal["sqlalchemy", "driver"]  # how a statement is sent: both must keep these promises
THROUGH: list[Through] = ["sqlalchemy", "driver"]


@pytest.fixture
async def engine(environment: Environment) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(environment.settings())
    yield engine
    await engine.dispose()


@pytest.fixture
async def held(engine: AsyncEngine) -> AsyncIterator[HeldConnection]:
    held = HeldConnection(engine)
    yield held
    await held.close()


async def run(held: HeldConnection, sql: str, through: Through = "sqlalchemy") -> Any:
    """The statement's first value."""
    async with held.use() as conn:
        if through == "sqlalchemy":
            return await conn.scalar(text(sql))
        return (await DriverStatement(text(sql)).rows(conn, {}))[0][0]


async def backend_pid(held: HeldConnection, through: Through = "sqlalchemy") -> int:
    return int(await run(held, "SELECT pg_backend_pid()", through))


async def test_a_held_connection_is_kept_between_statements_and_holds_one_pool_slot(environment: Environment) -> None:
    settings = environment.settings().model_copy(update={"db_pool_size": 1, "db_max_overflow": 0})
    engine = create_engine(settings)
    held = HeldConnection(engine)
    try:
        first = await backend_pid(held)
        assert await backend_pid(held, "driver") == first  # no checkout per statement
        assert engine.pool.checkedout() == 1  # type: ignore[attr-defined]
        await held.close()
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        await engine.dispose()


async def terminate(engine: AsyncEngine, pids: list[int]) -> None:
    """Ends these backends as a Postgres restart does, and waits until they are gone."""
    async with engine.connect() as admin, asyncio.timeout(5):
        await admin.execution_options(isolation_level="AUTOCOMMIT")
        end = text("SELECT pg_terminate_backend(pid) FROM unnest(CAST(:pids AS int[])) AS pid")
        await admin.execute(end, {"pids": pids})
        alive = text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(CAST(:pids AS int[]))")
        while await admin.scalar(alive, {"pids": pids}):
            await asyncio.sleep(0.01)


async def until_noticed(driver_connections: list[Any]) -> None:
    """Until this process has read the server's goodbye on each (it does while they sit idle)."""
    async with asyncio.timeout(5):
        while not all(driver.is_closed() for driver in driver_connections):
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("through", THROUGH)
async def test_a_held_connection_the_server_closed_while_idle_is_replaced_before_its_next_statement(
    engine: AsyncEngine, held: HeldConnection, through: Through
) -> None:
    dead = await backend_pid(held)
    async with held.use() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
    await terminate(engine, [dead])
    await until_noticed([driver])
    assert await backend_pid(held, through) != dead  # no failed statement on the way


async def test_pooled_connections_the_server_closed_while_idle_are_replaced_when_taken(
    environment: Environment, engine: AsyncEngine
) -> None:
    settings = environment.settings().model_copy(update={"db_pool_size": 2, "db_max_overflow": 0})
    pooled = create_engine(settings)
    try:
        conns = [await pooled.connect().start() for _ in range(2)]
        pids = [await conn.scalar(text("SELECT pg_backend_pid()")) for conn in conns]
        drivers = [(await conn.get_raw_connection()).driver_connection for conn in conns]
        for conn in conns:
            await conn.close()
        await terminate(engine, pids)
        await until_noticed(drivers)
        for conn in [await pooled.connect().start() for _ in range(2)]:
            assert await conn.scalar(text("SELECT pg_backend_pid()")) not in pids
            await conn.close()
    finally:
        await pooled.dispose()


@pytest.mark.parametrize("through", THROUGH)
async def test_a_held_connection_that_broke_during_a_statement_fails_it_and_is_replaced(
    engine: AsyncEngine, held: HeldConnection, through: Through
) -> None:
    dead = await backend_pid(held)
    statement = asyncio.create_task(run(held, "SELECT pg_sleep(5)", through))
    async with engine.connect() as admin, asyncio.timeout(5):
        await admin.execution_options(isolation_level="AUTOCOMMIT")
        running = text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid AND query LIKE '%pg_sleep%'")
        while not await admin.scalar(running, {"pid": dead}):
            await asyncio.sleep(0.01)
    await terminate(engine, [dead])
    with pytest.raises(DBAPIError):  # what the API answers 503 for, and the event writer retries
        await statement
    assert await backend_pid(held, through) != dead


@pytest.mark.parametrize("through", THROUGH)
async def test_a_statement_interrupted_midway_leaves_no_half_used_connection_behind(
    engine: AsyncEngine, held: HeldConnection, through: Through
) -> None:
    interrupted = await backend_pid(held)
    task = asyncio.create_task(run(held, "SELECT pg_sleep(5)", through))
    async with engine.connect() as admin, asyncio.timeout(5):  # until Postgres is running it
        await admin.execution_options(isolation_level="AUTOCOMMIT")  # each check a fresh look
        running = text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid AND query LIKE '%pg_sleep%'")
        while not await admin.scalar(running, {"pid": interrupted}):
            await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(3):  # not stuck behind the interrupted statement
        assert await backend_pid(held, through) != interrupted


async def test_a_failed_driver_statement_raises_sqlalchemys_error_and_keeps_its_connection(
    held: HeldConnection,
) -> None:
    before = await backend_pid(held)
    with pytest.raises(DBAPIError):
        await run(held, "SELECT 1 / 0", "driver")
    assert await backend_pid(held) == before


async def test_a_driver_statement_inside_a_transaction_block_is_part_of_it(engine: AsyncEngine) -> None:
    note = DriverStatement(text("INSERT INTO accounts (id, name) VALUES (:id, :id)"))
    account = f"acct_rolled_back_{secrets.token_hex(4)}"
    with pytest.raises(RuntimeError):
        async with engine.begin() as conn:
            await note.rows(conn, {"id": account})
            raise RuntimeError("the block fails after the statement")
    async with engine.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM accounts WHERE id = :id"), {"id": account}) == 0


async def test_a_driver_statement_on_a_connection_invalidated_before_it_runs_on_a_new_one(engine: AsyncEngine) -> None:
    pid = DriverStatement(text("SELECT pg_backend_pid()"))
    async with autocommit(engine) as conn:
        invalidated = (await pid.rows(conn, {}))[0][0]
        await conn.invalidate()  # (what a statement that found its connection broken leaves)
        assert (await pid.rows(conn, {}))[0][0] != invalidated


# A statement estimated at a hundred million rows: far past Postgres's `jit_above_cost`.
COSTLY = "EXPLAIN (FORMAT JSON) SELECT sum(g) FROM generate_series(1, 100000000) g"


async def _compiles(engine: AsyncEngine) -> bool:
    async with engine.connect() as conn:
        [plan] = (await conn.exec_driver_sql(COSTLY)).scalar_one()
    return "JIT" in (json.loads(plan) if isinstance(plan, str) else plan)


@pytest.mark.parametrize("generic_plans", [False, True], ids=["a request's connection", "a held connection"])
async def test_no_connection_of_the_service_compiles_a_statement(environment: Environment, generic_plans: bool) -> None:
    """Postgres compiles (JIT) a statement whose cost estimate passes `jit_above_cost`, at every run;
    the estimate of a read of the event log grows with its day partitions (app/storage/engine.py)."""
    settings = environment.settings()
    plain = create_async_engine(settings.database_url)  # a connection as Postgres sets it up
    service = create_engine(settings, generic_plans=generic_plans)
    try:
        assert await _compiles(plain)
        assert not await _compiles(service)
    finally:
        await plain.dispose()
        await service.dispose()
