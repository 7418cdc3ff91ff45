"""The API's pub/sub fan-out, against real Redis: followers get their response's events from
each published commit, nothing of other responses or other deployments, and are told when
nothing came for the idle period (so they re-check Postgres and keep the connection alive),
never while events keep coming."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from app import wire
from app.errors import ServiceUnavailable
from app.state import AppState
from app.streaming.hub import EventHub
from app.wire import WireEvent

IDLE = 0.4


CHANNEL = f"responses:events:test-hub-{secrets.token_hex(3)}"


@pytest.fixture
async def hub(state: AppState) -> AsyncIterator[EventHub]:
    hub = EventHub(state.redis, CHANNEL, IDLE)
    await hub.start()
    yield hub
    await hub.close()


def delta(number: int) -> WireEvent:
    return WireEvent(number, "response.output_text.delta", f'{{"sequence_number":{number}}}')


async def test_a_quiet_follower_is_told_once_per_idle_period(hub: EventHub) -> None:
    subscription = await hub.subscribe(f"resp_quiet_{secrets.token_hex(3)}")
    started = time.monotonic()
    assert await asyncio.wait_for(subscription.next_batch(), 2 * IDLE) is None
    assert IDLE * 0.9 <= time.monotonic() - started < IDLE * 3
    assert await asyncio.wait_for(subscription.next_batch(), 2 * IDLE) is None
    await subscription.close()


async def test_followers_of_a_busy_response_get_every_batch_and_no_idle_signal(hub: EventHub, state: AppState) -> None:
    response_id = f"resp_busy_{secrets.token_hex(3)}"
    first, second = await hub.subscribe(response_id), await hub.subscribe(response_id)
    batches = 8
    for number in range(batches):  # a batch every quarter of the idle period, for twice its length
        await wire.publish(state.redis, CHANNEL, {response_id: [delta(number)]})
        await asyncio.sleep(IDLE / 4)
    for subscription in (first, second):
        received = [await asyncio.wait_for(subscription.next_batch(), IDLE) for _ in range(batches)]
        assert received == [[delta(number)] for number in range(batches)]
        await subscription.close()


async def test_one_commit_reaches_each_follower_with_its_own_events_only(hub: EventHub, state: AppState) -> None:
    followed, other = f"resp_one_{secrets.token_hex(3)}", f"resp_two_{secrets.token_hex(3)}"
    first, second = await hub.subscribe(followed), await hub.subscribe(other)
    await wire.publish(
        state.redis, CHANNEL, {followed: [delta(0), delta(1)], other: [delta(7)], "resp_nobody": [delta(3)]}
    )
    assert await asyncio.wait_for(first.next_batch(), IDLE) == [delta(0), delta(1)]
    assert await asyncio.wait_for(second.next_batch(), IDLE) == [delta(7)]
    # Another deployment's commits (another events channel) reach nobody here.
    await wire.publish(state.redis, CHANNEL + "-elsewhere", {followed: [delta(2)]})
    await wire.publish(state.redis, CHANNEL, {followed: [delta(3)]})
    assert await asyncio.wait_for(first.next_batch(), IDLE) == [delta(3)]
    for subscription in (first, second):
        await subscription.close()
    assert not hub._followers  # nothing is kept for responses nobody follows any more


async def test_following_waits_for_the_channel_and_fails_fast_without_redis() -> None:
    unreachable = Redis(port=1, socket_connect_timeout=0.2)
    hub = EventHub(unreachable, CHANNEL, IDLE)
    await hub.start()
    with pytest.raises(ServiceUnavailable):
        await hub.subscribe("resp_x")
    assert not hub._followers
    await hub.close()


async def test_a_malformed_message_on_the_channel_is_skipped_and_following_goes_on(
    hub: EventHub, state: AppState
) -> None:
    response_id = f"resp_after_junk_{secrets.token_hex(3)}"
    subscription = await hub.subscribe(response_id)
    for junk in (b"no header line", b"resp_x notanumber\n1 a {}", b"resp_y 99\nshort", b"\xff\xfe 3\nabc"):
        await state.redis.publish(CHANNEL, junk)
    await wire.publish(state.redis, CHANNEL, {response_id: [delta(0)]})
    assert await asyncio.wait_for(subscription.next_batch(), IDLE) == [delta(0)]
    later = await asyncio.wait_for(hub.subscribe(f"resp_later_{secrets.token_hex(3)}"), 1)  # still live
    for each in (subscription, later):
        await each.close()
