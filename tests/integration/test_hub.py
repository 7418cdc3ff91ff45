"""The API's pub/sub fan-out, against real Redis: followers get their response's events from
each published commit, nothing of other responses or other deployments, and are told when
nothing came for the idle period (so they re-check Postgres and keep the connection alive),
never while events keep coming."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

import pytest
from redis.asyncio import Redis
from sqlalchemy import event
from sqlalchemy.ext.asyncio import create_async_engine

from app.errors import ServiceUnavailable
from app.events import channel
from app.events.follow import follow
from app.events.hub import EventHub, Idle, LogState
from app.events.log_reader import LogReader
from app.events.log_sources import StoredLog
from app.service.state import AppState
from app.storage import events as events_db
from tests.conftest import eventually, free_port, within
from tests.integration.conftest import HUB_IDLE, in_progress, wire_delta


async def test_a_quiet_follower_is_told_once_per_idle_period(hub: EventHub) -> None:
    subscription = await hub.subscribe(f"resp_quiet_{secrets.token_hex(3)}", durable=False)
    started = time.monotonic()
    assert await within(subscription.next_batch(), 2 * HUB_IDLE) == Idle()
    assert HUB_IDLE * 0.9 <= time.monotonic() - started < HUB_IDLE * 3
    assert await within(subscription.next_batch(), 2 * HUB_IDLE) == Idle()
    await subscription.close()


async def test_followers_of_a_busy_response_get_every_batch_and_no_idle_signal(
    hub_channel: str, hub: EventHub, state: AppState
) -> None:
    response_id = f"resp_busy_{secrets.token_hex(3)}"
    first, second = await hub.subscribe(response_id, durable=False), await hub.subscribe(response_id, durable=False)
    batches = 8
    for number in range(batches):  # a batch every quarter of the idle period, for twice its length
        await channel.publish(state.redis, hub_channel, {response_id: [wire_delta(number)]})
        await asyncio.sleep(HUB_IDLE / 4)
    for subscription in (first, second):
        # What waited for the follower comes as one batch: every event, in order, and no Idle.
        assert await within(subscription.next_batch(), HUB_IDLE) == [wire_delta(number) for number in range(batches)]
        await subscription.close()


async def test_a_follower_behind_gets_what_waits_as_one_batch_up_to_a_gap(
    hub_channel: str, hub: EventHub, state: AppState
) -> None:
    response_id = f"resp_behind_{secrets.token_hex(3)}"
    subscription = await hub.subscribe(response_id, durable=False)
    for numbers in ([0], [1, 2], [3], [5], [6]):  # (4 never came)
        await channel.publish(state.redis, hub_channel, {response_id: [wire_delta(n) for n in numbers]})
    await eventually(lambda: len(subscription.waiting) == 5)
    assert await subscription.next_batch() == [wire_delta(0), wire_delta(1), wire_delta(2), wire_delta(3)]
    assert await subscription.next_batch() == [wire_delta(5), wire_delta(6)]  # a gap is seen on its own, then healed
    await subscription.close()


async def test_one_commit_reaches_each_follower_with_its_own_events_only(
    hub_channel: str, hub: EventHub, state: AppState
) -> None:
    followed, other = f"resp_one_{secrets.token_hex(3)}", f"resp_two_{secrets.token_hex(3)}"
    first, second = await hub.subscribe(followed, durable=False), await hub.subscribe(other, durable=False)
    await channel.publish(
        state.redis,
        hub_channel,
        {followed: [wire_delta(0), wire_delta(1)], other: [wire_delta(7)], "resp_nobody": [wire_delta(3)]},
    )
    assert await within(first.next_batch(), HUB_IDLE) == [wire_delta(0), wire_delta(1)]
    assert await within(second.next_batch(), HUB_IDLE) == [wire_delta(7)]
    # Another deployment's commits (another events channel) reach nobody here.
    await channel.publish(state.redis, hub_channel + "-elsewhere", {followed: [wire_delta(2)]})
    await channel.publish(state.redis, hub_channel, {followed: [wire_delta(3)]})
    assert await within(first.next_batch(), HUB_IDLE) == [wire_delta(3)]
    for subscription in (first, second):
        await subscription.close()
    assert not hub._followers  # nothing is kept for responses nobody follows any more


async def test_following_waits_for_the_channel_and_fails_fast_without_redis(hub_channel: str) -> None:
    unreachable = Redis(port=1, socket_connect_timeout=0.2)
    hub = EventHub(unreachable, hub_channel, HUB_IDLE)
    await hub.start()
    with pytest.raises(ServiceUnavailable):
        await hub.subscribe("resp_x", durable=False)
    assert not hub._followers
    await hub.close()


async def test_a_malformed_message_on_the_channel_is_skipped_and_following_goes_on(
    hub_channel: str, hub: EventHub, state: AppState
) -> None:
    response_id = f"resp_after_junk_{secrets.token_hex(3)}"
    subscription = await hub.subscribe(response_id, durable=False)
    for junk in (b"no header line", b"resp_x notanumber\n1 a {}", b"resp_y 99\nshort", b"\xff\xfe 3\nabc"):
        await state.redis.publish(hub_channel, junk)
    await channel.publish(state.redis, hub_channel, {response_id: [wire_delta(0)]})
    assert await within(subscription.next_batch(), HUB_IDLE) == [wire_delta(0)]
    later = await within(hub.subscribe(f"resp_later_{secrets.token_hex(3)}", durable=False), 1)  # still live
    for each in (subscription, later):
        await each.close()


async def test_idle_followers_of_many_responses_are_checked_by_one_query_per_tick(
    hub_channel: str, state: AppState, account_id: str
) -> None:
    running = await in_progress(state, account_id, 3)
    async with state.engine.begin() as conn:
        for response_id in running:  # their logs end at 3
            await events_db.append(conn, response_id, [{"type": "response.in_progress"}] * 4)
    engine = create_async_engine(state.settings.database_url)
    statements: list[str] = []
    event.listen(engine.sync_engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    hub = EventHub(state.redis, hub_channel, HUB_IDLE, engine)
    await hub.start()
    try:
        followers = [await hub.subscribe(running[n % 3], durable=True) for n in range(300)]
        gone = await hub.subscribe("resp_gone", durable=True)  # not in Postgres: it checks for itself
        transient = await hub.subscribe(running[0], durable=False)  # not in Postgres by nature
        told = [await within(f.next_batch(), 3 * HUB_IDLE) for f in followers]
        assert told == [Idle(LogState(ended=False, last_sequence_number=3))] * 300
        assert await gone.next_batch() == Idle() and await transient.next_batch() == Idle()
        assert len(statements) == 1  # for all 302 durable followers of 4 responses
        for subscription in [*followers, gone, transient]:
            await subscription.close()
    finally:
        await hub.close()
        await engine.dispose()


async def test_a_follower_that_missed_a_message_gets_the_events_from_the_log_on_its_idle_tick(
    hub_channel: str, state: AppState, account_id: str
) -> None:
    (response_id,) = await in_progress(state, account_id, 1)
    hub = EventHub(state.redis, hub_channel, HUB_IDLE, state.engine)
    await hub.start()
    events = follow(state.log_source(True), await hub.subscribe(response_id, durable=True), response_id, -1)
    try:
        async with state.engine.begin() as conn:  # committed, and its message lost
            await events_db.append_many(conn, {response_id: [{"type": "response.output_text.delta", "delta": "a"}]})
        received = await within(anext(events), 3 * HUB_IDLE)
        assert received is not None and [e.type for e in received] == ["response.output_text.delta"]
        assert await within(anext(events), 3 * HUB_IDLE) is None  # then idle: a keep-alive moment
    finally:
        await events.aclose()  # type: ignore[attr-defined]
        await hub.close()


async def test_a_follower_that_finds_every_connection_taken_is_kept_alive_and_then_catches_up(
    hub_channel: str, state: AppState, account_id: str
) -> None:
    (response_id,) = await in_progress(state, account_id, 1)
    engine = create_async_engine(state.settings.database_url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    hub = EventHub(state.redis, hub_channel, HUB_IDLE)  # no check of its own: the follower reads for itself
    await hub.start()
    reader = LogReader(engine)  # its connections come from that pool
    source = StoredLog(reader)
    events = follow(source, await hub.subscribe(response_id, durable=True), response_id, -1, known_log=[])
    held = await engine.connect()  # every connection of its pool
    try:
        await held.exec_driver_sql("SELECT 1")
        async with state.engine.begin() as conn:  # committed, and its message lost
            await events_db.append_many(conn, {response_id: [{"type": "response.output_text.delta", "delta": "a"}]})
        assert await within(anext(events), 3 * HUB_IDLE) is None  # no connection: a keep-alive, no error
        assert await within(anext(events), 3 * HUB_IDLE) is None
        await held.close()
        received = None
        while received is None:
            received = await within(anext(events), 3 * HUB_IDLE)
        assert [e.sequence_number for e in received] == [0]
    finally:
        await held.close()
        await events.aclose()  # type: ignore[attr-defined]
        await hub.close()
        await reader.close()
        await engine.dispose()


async def test_a_database_away_is_one_warning_however_many_idle_checks_fail(
    hub_channel: str, state: AppState, caplog: pytest.LogCaptureFixture
) -> None:
    # A Postgres that refuses connections: every idle tick's check fails (a traceback a second, before).
    away = create_async_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/nothing")
    hub = EventHub(state.redis, hub_channel, HUB_IDLE, away)
    caplog.set_level(logging.INFO, logger="app.events.hub")
    await hub.start()
    try:
        follower = await hub.subscribe("resp_during_an_outage", durable=True)
        for _ in range(4):  # four idle periods, each checked (and failed) once
            async with asyncio.timeout(3 * HUB_IDLE):
                assert await follower.next_batch() == Idle()  # each follower checks for itself
        await follower.close()
    finally:
        await hub.close()
        await away.dispose()
    warnings = [r for r in caplog.records if r.name == "app.events.hub" and r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "the event hub's check of its idle followers' responses failed; retrying, and saying when it succeeds again"
    ]
