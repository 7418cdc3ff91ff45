"""The connection pool honours its settings: a process never holds more Postgres connections
than RESPONSES_DB_POOL_SIZE + RESPONSES_DB_MAX_OVERFLOW; past that, callers wait their turn."""

from __future__ import annotations

import asyncio

from app.db.engine import create_engine
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
