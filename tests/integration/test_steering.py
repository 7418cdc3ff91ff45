"""A socket's steers against its responses' ends (app/service/steering.py), on the real database:
a steer that is being stored when its response ends is taken by the end, never lost between them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app.protocol.socket_frames import ClientEvent
from app.service.state import AppState
from app.service.steering import SocketSteering
from tests.conftest import free_port, within
from tests.integration.conftest import in_progress


def steer_event(response_id: str, words: str) -> ClientEvent:
    return ClientEvent("response.steer", {"previous_response_id": response_id, "input": words}, None, 0)


async def test_a_steer_being_stored_as_its_response_ends_is_taken_by_the_end(state: AppState, account_id: str) -> None:
    (response_id,) = await in_progress(state, account_id, 1)
    sent: list[dict[str, Any]] = []

    async def send(frame: str) -> None:
        sent.append(json.loads(frame))

    steering = SocketSteering(state, send, "socket-test")
    running = steering.opened(response_id, None, {"model": "fake", "input": "x"}, durable=True)
    async with state.engine.connect() as blocker:
        # Its row locked: the steer's insert (a foreign key to it) waits while the steer holds
        # its response's lock.
        await blocker.execute(text("SELECT 1 FROM responses WHERE id = :id FOR UPDATE"), {"id": response_id})
        steered = asyncio.create_task(steering.steer(steer_event(response_id, "shorter")))
        await asyncio.sleep(0.3)
        assert sent == []  # (still storing)
        running.ended = "completed"  # its terminal event goes out now
        closing = asyncio.create_task(steering.closed(running))
        await asyncio.sleep(0.1)
        assert not closing.done()  # the end waits for the steer being stored
        await blocker.rollback()
    await within(steered, 10)
    taken = await within(closing, 10)
    [accepted] = sent
    assert accepted["type"] == "response.steer.accepted"
    assert [steer.id for steer in taken] == [accepted["steer"]["id"]]
    # After the end, a steer is refused as too late.
    await steering.steer(steer_event(response_id, "too late"))
    assert sent[-1]["type"] == "response.steer.failed"
    assert sent[-1]["error"]["code"] == "response_already_completed"


async def test_a_successor_created_as_postgres_goes_away_streams_with_its_steers_unmarked(
    state: AppState, account_id: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The steers are marked as taken after their successor's create committed: Postgres gone at
    that moment must not fail the socket's create (whose successor runs all the same)."""
    steered_id, successor_id = await in_progress(state, account_id, 2)
    sent: list[dict[str, Any]] = []

    async def send(frame: str) -> None:
        sent.append(json.loads(frame))

    steering = SocketSteering(state, send, "socket-test")
    running = steering.opened(steered_id, None, {"model": "fake", "input": "x"}, durable=True)
    await steering.steer(steer_event(steered_id, "shorter"))
    running.ended = "completed"
    steers = await steering.closed(running)
    assert [steer.id for steer in steers] == [sent[0]["steer"]["id"]]
    nowhere = create_async_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/gone")
    with monkeypatch.context() as outage:
        outage.setattr(state, "engine", nowhere)
        await within(steering.taken(steers, successor_id, stored=True), 10)  # no error
    await nowhere.dispose()
    assert f"not marked as taken by {successor_id}" in caplog.text

    async def marked() -> str | None:
        async with state.engine.connect() as conn:
            query = text("SELECT successor_id FROM response_steers WHERE id = :id")
            return await conn.scalar(query, {"id": steers[0].id})  # type: ignore[no-any-return]

    assert await marked() is None
    await steering.taken(steers, successor_id, stored=True)  # with Postgres back, as it is done
    assert await marked() == successor_id
