"""A socket's steers against its responses' ends (app/service/steering.py), on the real database:
a steer that is being stored when its response ends is taken by the end, never lost between them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from sqlalchemy import text

from app.protocol.socket_frames import ClientEvent
from app.service.state import AppState
from app.service.steering import SocketSteering
from tests.conftest import within
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
