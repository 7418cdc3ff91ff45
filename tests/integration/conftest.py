"""In-process fixtures: the API's state and workers' deps against the test database and Redis,
so a test can drive the job function and the repository directly."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from arq.connections import ArqRedis, RedisSettings, create_pool

from app import service
from app.catalog import Catalog
from app.db import accounts as accounts_db
from app.queue import job_deserializer, job_serializer
from app.state import AppState
from tests.conftest import Environment
from workers.deps import WorkerDeps
from workers.generate import generate


@pytest.fixture(scope="session")
async def state(environment: Environment) -> AsyncIterator[AppState]:
    # Tests here run the reaper themselves, on leases they expire on purpose: none in the background.
    state = await AppState.open(environment.settings().model_copy(update={"housekeeping_seconds": 3600.0}))
    yield state
    await state.close()


@pytest.fixture(scope="session")
async def account_id(state: AppState) -> str:
    async with state.engine.begin() as conn:
        return await accounts_db.ensure_account(conn, f"integration-{secrets.token_hex(3)}")


OpenWorker = Callable[[], Awaitable[WorkerDeps]]


@pytest.fixture
async def open_worker(environment: Environment) -> AsyncIterator[OpenWorker]:
    """Opens as many independent workers (as if separate processes) as a test asks for."""
    opened: list[tuple[WorkerDeps, ArqRedis]] = []

    async def open_one() -> WorkerDeps:
        redis = await create_pool(
            RedisSettings.from_dsn(environment.redis_url),
            job_serializer=job_serializer,
            job_deserializer=job_deserializer,
        )
        settings = environment.settings()
        deps = WorkerDeps.open(settings, redis, Catalog.load(settings.models_path))
        deps.start()
        opened.append((deps, redis))
        return deps

    yield open_one
    for deps, redis in opened:
        await deps.close()
        await redis.aclose()


async def run_job(deps: WorkerDeps, response_id: str) -> None:
    await generate({"deps": deps}, response_id)


async def accept(state: AppState, account_id: str, **body: object) -> str:
    accepted = await service.accept(state, account_id, {"model": "fake", **body})
    return accepted.record.id
