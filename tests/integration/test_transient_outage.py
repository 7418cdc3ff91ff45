"""A store=false response's events across a Redis outage, against real Redis: what its worker
could not publish is held, in order, and published through overflow keys once Redis is back; a
follower that missed a message finds the events there, and one whose events are nowhere ends
with an error naming Redis."""

from __future__ import annotations

import secrets

import pytest

from app.events import channel
from app.events.follow import follow
from app.events.hub import EventHub
from app.events.log_sources import FollowLost
from app.events.transient_backlog import TransientBacklog
from app.service.state import AppState
from tests.conftest import within
from tests.integration.conftest import wire_delta


async def test_held_events_go_out_in_order_through_overflow_keys(hub_channel: str, state: AppState) -> None:
    response_id = f"resp_held_{secrets.token_hex(3)}"
    backlog = TransientBacklog()
    backlog.hold({response_id: [wire_delta(0), wire_delta(1)]})
    assert response_id in backlog and backlog.waiting.is_set()
    to_publish = {response_id: [wire_delta(2)], "resp_other": [wire_delta(7)]}
    backlog.hold_behind(to_publish)  # a later event waits behind the held ones
    assert to_publish == {"resp_other": [wire_delta(7)]}
    assert await backlog.publish(state.redis, hub_channel)
    assert response_id not in backlog and not backlog.waiting.is_set()
    assert await channel.read_overflow(state.redis, response_id, -1) == [wire_delta(0), wire_delta(1), wire_delta(2)]
    assert await channel.read_overflow(state.redis, response_id, -1) == []  # read once


async def test_overflow_keys_are_read_as_far_as_they_run_on_without_a_gap(hub_channel: str, state: AppState) -> None:
    response_id = f"resp_chain_{secrets.token_hex(3)}"
    for events in ([wire_delta(3), wire_delta(4)], [wire_delta(5)], [wire_delta(9)]):
        await channel.publish(
            state.redis, hub_channel, {response_id: events}, transient={response_id}, spill={response_id}
        )
    assert await channel.read_overflow(state.redis, response_id, 2) == [wire_delta(3), wire_delta(4), wire_delta(5)]


async def test_a_follower_that_missed_a_message_finds_its_events_in_the_overflow_keys(
    hub_channel: str, state: AppState, hub: EventHub
) -> None:
    response_id = f"resp_gap_{secrets.token_hex(3)}"
    events = follow(state.log_source(False), await hub.subscribe(response_id, durable=False), response_id, -1)
    try:
        await channel.publish(state.redis, hub_channel, {response_id: [wire_delta(0)]})
        assert await within(anext(events), 2) == [wire_delta(0)]
        # Published while this API process was not subscribed: the notice is lost, the key stays.
        spilled = {response_id: [wire_delta(1), wire_delta(2)]}
        await channel.publish(
            state.redis, hub_channel + "-missed", spilled, transient={response_id}, spill={response_id}
        )
        await channel.publish(state.redis, hub_channel, {response_id: [wire_delta(3)]})
        assert await within(anext(events), 2) == [wire_delta(1), wire_delta(2), wire_delta(3)]
    finally:
        await events.aclose()  # type: ignore[attr-defined]


async def test_a_follower_whose_missed_events_are_nowhere_ends_naming_redis(
    hub_channel: str, state: AppState, hub: EventHub
) -> None:
    response_id = f"resp_lost_{secrets.token_hex(3)}"
    events = follow(state.log_source(False), await hub.subscribe(response_id, durable=False), response_id, -1)
    try:
        await channel.publish(state.redis, hub_channel, {response_id: [wire_delta(0)]})
        assert await within(anext(events), 2) == [wire_delta(0)]
        await channel.publish(state.redis, hub_channel, {response_id: [wire_delta(3)]})  # 1 and 2 never came
        with pytest.raises(FollowLost, match="Redis"):
            await within(anext(events), 2)
    finally:
        await events.aclose()  # type: ignore[attr-defined]
