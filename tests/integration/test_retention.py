"""Retention deletes what expired, from Postgres, and nothing else."""

from __future__ import annotations

import secrets
from datetime import timedelta

import pytest
from sqlalchemy import func, insert, select, text, update

from app.housekeeping import retention
from app.service import conversations
from app.service.state import AppState
from app.storage import responses as responses_db
from app.storage.tables import event_log, event_templates, output_snapshots, response_events, responses
from tests.conftest import FakeRuntime, within
from tests.integration.conftest import OpenWorker, accept, run_job

POLICY = retention.RetentionPolicy(
    stored=timedelta(days=30), unstored_background=timedelta(minutes=10), stream_log=timedelta(hours=24)
)


async def expire(state: AppState) -> int:
    """One batch of each step that deletes responses: how many it deleted."""
    return sum([await retention.run_step(state.engine, POLICY, s) for s in retention.STEPS if not s.purge_log])


async def purge(state: AppState) -> int:
    """One batch of each step that removes event logs: how many it removed."""
    return sum([await retention.run_step(state.engine, POLICY, s) for s in retention.STEPS if s.purge_log])


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


async def log_key(state: AppState, response_id: str) -> int:
    async with state.engine.connect() as conn:
        return int((await conn.execute(select(responses.c.log_key).where(responses.c.id == response_id))).scalar_one())


async def log_rows(state: AppState, key: int) -> int:
    """Rows of a response's event log as stored (its events and their templates)."""
    async with state.engine.connect() as conn:
        events = select(func.count()).where(event_log.c.log_key == key).scalar_subquery()
        templates = select(func.count()).where(event_templates.c.log_key == key).scalar_subquery()
        return int((await conn.execute(select(events + templates))).scalar_one())


async def event_count(state: AppState, response_id: str) -> int:
    """Its events as readers see them (a purged log's rows go later, with their day: test_log_partitions)."""
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
    logs = [await log_key(state, old), await log_key(state, unstored)]
    assert all([await log_rows(state, key) for key in logs])
    while await expire(state):
        pass
    assert not await exists(state, old) and not await exists(state, unstored)
    assert [await log_rows(state, key) for key in logs] == [0, 0]  # their event logs went with them
    assert await exists(state, child) and await exists(state, fresh_unstored)
    async with state.engine.connect() as conn:
        row = await responses_db.get_row(conn, child)
    assert row is not None and row.context_parent_id is None  # its context now starts with itself


async def test_a_response_in_a_conversation_is_kept_as_long_as_the_conversation(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    worker = await open_worker()
    conversation = await conversations.create(state, account_id, {})
    turn = await accept(state, account_id, input="remember this", conversation=conversation["id"])
    await run_job(worker, turn)
    await age(state, turn, created_at=timedelta(days=365))
    while await expire(state):
        pass
    assert await exists(state, turn)
    listed = await conversations.list_items(
        state, account_id, conversation["id"], order="asc", limit=20, after=None, include=[]
    )
    assert [item["type"] for item in listed["data"]] == ["message", "message"]


async def test_event_logs_go_after_their_window(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    worker = await open_worker()
    foreground = await accept(state, account_id, input="fg")
    old_stream = await accept(state, account_id, input="old stream", background=True, stream=True)
    new_stream = await accept(state, account_id, input="new stream", background=True, stream=True)
    ids = [foreground, old_stream, new_stream]
    for response_id in ids:
        await run_job(worker, response_id)
    await age(state, foreground, completed_at=timedelta(minutes=2))
    await age(state, old_stream, completed_at=timedelta(hours=25))
    async with state.engine.begin() as conn:  # as a poll while they ran left them
        await conn.execute(
            insert(output_snapshots), [{"response_id": r, "sequence_number": 3, "output": []} for r in ids]
        )
    while await purge(state):
        pass
    assert await event_count(state, foreground) == 0
    assert await event_count(state, old_stream) == 0
    assert await event_count(state, new_stream) > 0
    async with state.engine.connect() as conn:
        snapshots = await conn.scalars(
            select(output_snapshots.c.response_id).where(output_snapshots.c.response_id.in_(ids))
        )
        assert list(snapshots) == [new_stream]  # the snapshot goes with the log
    async with state.engine.connect() as conn:
        record = await responses_db.get_record(conn, old_stream)
    assert record is not None and record.events_purged and record.status == "completed"
    assert record.output  # the response itself stays, output and all


async def stored_responses(state: AppState, account_id: str, count: int, days_old: float) -> list[str]:
    """`count` finished stored responses, as old as asked, inserted at once."""
    ids = [f"resp_retention_{secrets.token_hex(8)}" for _ in range(count)]
    async with state.engine.begin() as conn:
        await conn.execute(
            text("""
            INSERT INTO responses (id, account_id, model, status, background, stream, settings, context_branches,
                                   context_depths, created_at, completed_at)
            SELECT id, :account, 'fake', 'completed', false, false, '{}', ARRAY[nextval('branch_ids')], ARRAY[0],
                   now() - make_interval(days => :days), now() - make_interval(days => :days)
            FROM unnest(CAST(:ids AS text[])) AS id
            """),
            {"ids": ids, "account": account_id, "days": days_old},
        )
    return ids


async def test_a_backlog_larger_than_a_batch_goes_in_one_pass_and_how_far_behind_is_reported(
    state: AppState, account_id: str
) -> None:
    expired = await stored_responses(state, account_id, 2 * retention.BATCH + 50, days_old=32)
    kept = await stored_responses(state, account_id, 3, days_old=29)
    lag = await retention.behind(state.engine, POLICY)
    assert 2 * 86400 - 60 < lag["stored"] < 2 * 86400 + 60  # due two days ago
    report = await retention.apply(state.engine, POLICY, report_every=0.0)
    assert report.removed["stored"] >= len(expired)
    assert "stored" not in report.behind_seconds and "stored" not in await retention.behind(state.engine, POLICY)
    assert not any([await exists(state, r) for r in expired]) and all([await exists(state, r) for r in kept])


async def test_retention_never_waits_for_a_row_a_request_holds(state: AppState, account_id: str) -> None:
    held, free = await stored_responses(state, account_id, 2, days_old=31)
    async with state.engine.connect() as request:  # say, a continuation of it being inserted
        await request.execute(select(responses.c.id).where(responses.c.id == held).with_for_update())
        while await within(expire(state), 5):
            pass
        assert await exists(state, held) and not await exists(state, free)
        await request.rollback()
    while await expire(state):  # the next pass takes it
        pass
    assert not await exists(state, held)


@pytest.mark.parametrize("step", retention.STEPS, ids=lambda s: s.name)
async def test_each_step_finds_its_rows_through_its_own_index(state: AppState, step: retention.Step) -> None:
    async with state.engine.begin() as conn:
        await conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = await conn.execute(text("EXPLAIN " + step.batch_statement()), {"age": timedelta(days=1), "batch": 1})
        assert step.index in "\n".join(row[0] for row in plan)
        await conn.rollback()
