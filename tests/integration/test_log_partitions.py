"""The event log's partitions: a running response's log is live, its end moves it folded into
the day it ended, and a day is dropped whole once every response of it has had its log purged
(app/housekeeping/log_partitions.py, live_log.py)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.housekeeping import live_log, log_partitions, retention
from app.service.state import AppState
from app.storage import events as events_db
from app.storage import responses as responses_db
from app.storage.engine import create_engine
from tests.deltas import text_delta
from tests.integration.conftest import accept
from tests.integration.test_token_path_plans import log_partitions_read

Read = TypeVar("Read")
POLICY = retention.RetentionPolicy(
    stored=timedelta(days=30), unstored_background=timedelta(minutes=10), stream_log=timedelta(hours=24)
)


async def query(state: AppState, sql: str, **params: object) -> list[tuple[object, ...]]:
    async with state.engine.begin() as conn:
        result = await conn.execute(text(sql), params)
        return [tuple(row) for row in result] if result.returns_rows else []


async def today(state: AppState) -> int:
    [(day,)] = await query(state, "SELECT floor(extract(epoch FROM now()) / 86400)::bigint")
    return int(str(day))


async def partitions(state: AppState) -> set[str]:
    rows = await query(
        state,
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'event_log'::regclass",
    )
    return {str(name) for (name,) in rows}


async def response_on_day(state: AppState, account_id: str, day: int) -> str:
    """A response as if it ended on `day`: its folded log under a key of that day."""
    response_id = await accept(state, account_id, input="hi", background=True, stream=True)
    await end(state, response_id)
    key = (day << 32) | secrets.randbelow(2**32)
    for table in ("event_log", "event_templates"):
        await query(
            state,
            f"UPDATE {table} SET log_key = :key WHERE log_key = (SELECT log_key FROM responses WHERE id = :id)",
            key=key,
            id=response_id,
        )
    # (ended just now: retention leaves its log until `purge` dates its end back)
    await query(
        state, "UPDATE responses SET log_key = :key, completed_at = now() WHERE id = :id", key=key, id=response_id
    )
    return response_id


async def where_its_events_are(state: AppState, response_id: str) -> set[str]:
    rows = await query(
        state,
        "SELECT DISTINCT e.tableoid::regclass::text FROM event_log e JOIN responses r ON r.log_key = e.log_key "
        "WHERE r.id = :id",
        id=response_id,
    )
    return {str(name) for (name,) in rows}


async def purge(state: AppState, response_id: str) -> None:
    """Ends the response and has retention purge its log, as it does when its window has passed."""
    await query(
        state,
        "UPDATE responses SET status = 'completed', completed_at = now() - interval '2 days' WHERE id = :id",
        id=response_id,
    )
    while sum([await retention.run_step(state.engine, POLICY, s) for s in retention.STEPS if s.purge_log]):
        pass


async def readable(state: AppState, response_id: str) -> int:
    async with state.engine.connect() as conn:
        return len(await events_db.events_after(conn, response_id, -1, None))


async def end(state: AppState, response_id: str) -> list[str]:
    """Streams a few deltas and ends the response as a worker does; every event it streamed."""
    async with state.engine.begin() as conn:
        await conn.execute(text("UPDATE responses SET status = 'in_progress' WHERE id = :id"), {"id": response_id})
        streamed = [await events_db.append(conn, response_id, [text_delta(w)]) for w in ("a", "b", "c")]
        closing = [text_delta("d"), {"type": "response.completed"}]
        ended = await events_db.end(conn, response_id, closing, responses_db.Outcome("completed", [], 0.0))
    return [e.json for events in [*streamed, ended] for e in events]


async def all_events(state: AppState, response_id: str) -> list[str]:
    async with state.engine.connect() as conn:
        return [e.json for e in await events_db.events_after(conn, response_id, -1, None)]


async def test_a_running_responses_log_is_live_and_its_end_moves_it_folded_into_the_day_it_ended(
    state: AppState, account_id: str
) -> None:
    day = await today(state)
    await log_partitions.maintain(state.engine)
    ahead = {log_partitions.partition_name(day + n) for n in range(log_partitions.DAYS_AHEAD + 1)}
    assert ahead <= await partitions(state)
    response_id = await accept(state, account_id, input="hi", background=True, stream=True)
    assert await where_its_events_are(state, response_id) == {live_log.PARTITION}
    opening = await all_events(state, response_id)

    streamed = await end(state, response_id)
    assert await where_its_events_are(state, response_id) == {log_partitions.partition_name(day)}
    assert await all_events(state, response_id) == opening + streamed  # as it streamed, from its new place
    [(left,)] = await query(
        state,
        "SELECT count(*) FROM event_log_live l JOIN responses r ON r.id = :id AND l.log_key = r.log_key",
        id=response_id,
    )
    assert left == 0
    assert live_log.PARTITION not in {name for (_, name, *_) in await query(state, "SELECT * FROM event_log_days")}


async def test_the_live_partitions_space_is_used_again_once_vacuumed(state: AppState, account_id: str) -> None:
    """What a day's partition never does: the streamed rows that ended responses left behind are
    space for the next ones, so the live partition holds what streams between two vacuums."""

    async def stream_and_end(count: int) -> int:
        for _ in range(count):
            await end(state, await accept(state, account_id, input="hi", background=True, stream=True))
        await live_log.vacuum(state.engine)
        [(size,)] = await query(state, "SELECT pg_relation_size('event_log_live')")
        return int(str(size))

    first = await stream_and_end(40)
    assert await stream_and_end(40) == first
    assert await stream_and_end(40) == first


async def test_a_day_is_dropped_whole_once_every_log_of_it_is_purged(state: AppState, account_id: str) -> None:
    past = await today(state) - 400  # a day of its own in this shared database
    async with state.engine.begin() as conn:
        await log_partitions.create(conn, past)
    name = log_partitions.partition_name(past)
    first = await response_on_day(state, account_id, past)
    second = await response_on_day(state, account_id, past)
    assert await where_its_events_are(state, first) == {name}

    await purge(state, first)
    assert await readable(state, first) == 0  # gone for readers the moment it is purged
    assert await readable(state, second) > 0
    dropped = await log_partitions.maintain(state.engine)
    assert name not in dropped.dropped and name in await partitions(state)  # the second still needs it
    assert await readable(state, second) > 0

    await purge(state, second)
    dropped = await log_partitions.maintain(state.engine)
    assert name in dropped.dropped and name not in await partitions(state)
    assert await query(state, "SELECT count(*) FROM event_log WHERE log_key >> 32 = :day", day=past) == [(0,)]
    assert await query(state, "SELECT count(*) FROM event_templates WHERE log_key >> 32 = :day", day=past) == [(0,)]
    assert log_partitions.partition_name(await today(state)) in await partitions(state)  # today's is kept


async def test_a_day_without_a_partition_logs_into_the_default_one_whose_rows_its_purge_deletes(
    state: AppState, account_id: str
) -> None:
    unmade = await today(state) - 800
    response_id = await response_on_day(state, account_id, unmade)
    assert await where_its_events_are(state, response_id) == {"event_log_default"}
    assert await readable(state, response_id) > 0
    await purge(state, response_id)
    assert await query(state, "SELECT count(*) FROM event_log WHERE log_key >> 32 = :day", day=unmade) == [(0,)]


async def test_a_deleted_responses_log_does_not_keep_its_day(state: AppState, account_id: str) -> None:
    past = await today(state) - 401
    async with state.engine.begin() as conn:
        await log_partitions.create(conn, past)
    response_id = await response_on_day(state, account_id, past)
    await query(state, "DELETE FROM responses WHERE id = :id", id=response_id)
    assert await query(state, "SELECT count(*) FROM event_log WHERE log_key >> 32 = :day", day=past) == [(0,)]
    assert log_partitions.partition_name(past) in (await log_partitions.maintain(state.engine)).dropped


async def test_a_log_is_read_in_its_own_partition_alone(state: AppState, account_id: str) -> None:
    """A read of a running log and of an ended one (a resume's, a follower's), and of the number
    of its last event (a cancel's, an idle follower's), sets up a scan of the partition of its key
    alone, not of every day's, each of which would cost it about 7 µs (bench/log_partitions.py)."""
    past = await today(state) - 401  # a day of its own in this shared database
    async with state.engine.begin() as conn:
        await log_partitions.create(conn, past)
    ended = await response_on_day(state, account_id, past)
    running = await accept(state, account_id, input="hi", background=True, stream=True)
    for response_id in (ended, running):
        where = await where_its_events_are(state, response_id)
        resume = partial(events_db.events_after, response_id=response_id, after=-1, limit=None)
        read, scanned = await partitions_scanned(state, resume)
        assert read and scanned == where  # (read back whole: test_compact_log.py)
        ends, scanned = await partitions_scanned(state, partial(events_db.log_ends, response_ids=[response_id]))
        assert ends[response_id][1] == read[-1].sequence_number and scanned == where


async def partitions_scanned(
    state: AppState, reading: Callable[[AsyncConnection], Awaitable[Read]]
) -> tuple[Read, set[str]]:
    """What `reading` reads, and the event log's partitions of every plan Postgres ran for it,
    nested ones included, as `auto_explain` tells them (notices), on a connection of its own."""
    plans: list[dict[str, Any]] = []

    def told(_: object, notice: Any) -> None:  # "duration: … ms  plan:\n" and the plan
        plans.append(json.loads(notice.message.split("\n", 1)[1]))

    explaining = create_engine(state.settings, pool_size=1, max_overflow=0)  # (its settings go with it)
    try:
        async with explaining.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            driver.add_log_listener(told)
            for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_format = json"):
                await conn.exec_driver_sql(f"SET auto_explain.{setting}")
            await conn.exec_driver_sql("LOAD 'auto_explain'")
            await conn.exec_driver_sql("SET auto_explain.log_level = notice")
            read = await reading(conn)
    finally:
        await explaining.dispose()
    return read, set().union(*(log_partitions_read(plan["Plan"]) for plan in plans))
