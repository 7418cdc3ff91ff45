"""A process's held connections (app/storage/held.py) come from a pool of their own. A burst of
slow statements (a table lock) opens every lane and the lanes keep their connections: requests
and jobs still find the pool's. And with every pool connection taken by requests, the held
statements (authentication, inserts, log reads, claims, event writes) still run."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

from arq.connections import RedisSettings, create_pool
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.catalog import Catalog
from app.queue.jobs import job_deserializer, job_serializer
from app.service.state import AppState
from app.settings import Settings
from app.storage.held import HeldConnection, HeldConnections
from tests.conftest import Environment
from workers.state import WorkerState

Holder = HeldConnection | HeldConnections


def one_connection_pool(environment: Environment) -> Settings:
    return environment.settings().model_copy(
        update={"db_pool_size": 1, "db_max_overflow": 0, "db_pool_timeout": 0.5, "housekeeping_seconds": 3600.0}
    )


async def every_lane_open(stack: AsyncExitStack, holders: list[Holder]) -> None:
    for holder in holders:
        lanes = len(holder._held) if isinstance(holder, HeldConnections) else 1
        for _ in range(lanes):  # each use takes a lane no other statement is using
            conn = await stack.enter_async_context(holder.use())
            assert await conn.scalar(text("SELECT 1")) == 1


async def both_pools_serve_their_own(engine: AsyncEngine, holders: list[Holder]) -> None:
    async with AsyncExitStack() as stack:
        await every_lane_open(stack, holders)
        request = await engine.connect().start()
        await request.close()
    async with engine.connect():  # the whole pool a request's
        async with AsyncExitStack() as stack:
            await every_lane_open(stack, holders)


async def test_an_api_process_answers_from_its_pool_with_every_held_lane_open_and_the_other_way_round(
    environment: Environment,
) -> None:
    state = await AppState.open(one_connection_pool(environment))
    try:
        holders: list[Any] = [state.auth_connection, state.insert_connections, state.log_reader._connections]
        await both_pools_serve_their_own(state.engine, holders)
    finally:
        await state.close()


async def test_a_worker_finds_a_connection_for_its_jobs_with_every_held_lane_open_and_the_other_way_round(
    environment: Environment,
) -> None:
    settings = one_connection_pool(environment)
    redis = await create_pool(
        RedisSettings.from_dsn(environment.redis_url), job_serializer=job_serializer, job_deserializer=job_deserializer
    )
    state = WorkerState.open(settings, redis, Catalog.load(settings.models_path))
    try:
        await both_pools_serve_their_own(state.engine, [state.claim_connection, state.writer._connection])
    finally:
        await state.close()
        await redis.aclose()
