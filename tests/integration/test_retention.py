"""Retention deletes what expired, from Postgres, and nothing else."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select, update

from app.db import responses as responses_db
from app.db.tables import response_events, responses
from app.state import AppState
from tests.conftest import FakeRuntime
from tests.integration.conftest import OpenWorker, accept, run_job
from workers import retention

POLICY = retention.RetentionPolicy(
    stored=timedelta(days=30), unstored_background=timedelta(minutes=10), stream_log=timedelta(hours=24)
)


async def age(state: AppState, response_id: str, **columns: timedelta) -> None:
    async with state.engine.begin() as conn:
        await conn.execute(
            update(responses)
            .where(responses.c.id == response_id)
            .values({name: func.now() - ago for name, ago in columns.items()})
        )


async def exists(state: AppState, response_id: str) -> bool:
    async with state.engine.connect() as conn:
        return await responses_db.get_row(conn, response_id) is not None


async def event_count(state: AppState, response_id: str) -> int:
    async with state.engine.connect() as conn:
        return int(
            (await conn.execute(select(func.count()).where(response_events.c.response_id == response_id))).scalar_one()
        )


async def test_expired_responses_are_deleted_and_chains_skip_them(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    worker = await open_worker()
    old = await accept(state, account_id, input="old")
    await run_job(worker, old)
    child = await accept(state, account_id, input="child", previous_response_id=old)
    await run_job(worker, child)
    unstored = await accept(state, account_id, input="polled", background=True, store=False)
    await run_job(worker, unstored)
    fresh_unstored = await accept(state, account_id, input="still polled", background=True, store=False)
    await run_job(worker, fresh_unstored)
    await age(state, old, created_at=timedelta(days=31))
    await age(state, unstored, completed_at=timedelta(minutes=11))
    while await retention.expire_responses(state.engine, POLICY):
        pass
    assert not await exists(state, old) and not await exists(state, unstored)
    assert await exists(state, child) and await exists(state, fresh_unstored)
    async with state.engine.connect() as conn:
        row = await responses_db.get_row(conn, child)
    assert row is not None and row.context_parent_id is None  # its context now starts with itself


async def test_event_logs_go_after_their_window(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    worker = await open_worker()
    foreground = await accept(state, account_id, input="fg")
    old_stream = await accept(state, account_id, input="old stream", background=True, stream=True)
    new_stream = await accept(state, account_id, input="new stream", background=True, stream=True)
    for response_id in (foreground, old_stream, new_stream):
        await run_job(worker, response_id)
    await age(state, foreground, completed_at=timedelta(minutes=2))
    await age(state, old_stream, completed_at=timedelta(hours=25))
    while await retention.purge_event_logs(state.engine, POLICY):
        pass
    assert await event_count(state, foreground) == 0
    assert await event_count(state, old_stream) == 0
    assert await event_count(state, new_stream) > 0
    async with state.engine.connect() as conn:
        record = await responses_db.get_record(conn, old_stream)
    assert record is not None and record.events_purged and record.status == "completed"
    assert record.output  # the response itself stays, output and all
