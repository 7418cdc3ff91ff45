"""Polling a running response reads a bounded amount whatever its length: the output so far is
its last snapshot with the events after it folded on."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update

from app.service import reading, stopping
from app.service.state import AppState
from app.storage import events as events_db
from app.storage.tables import event_log, output_snapshots, responses
from tests.integration.conftest import in_progress
from workers.translation.translate import StreamTranslator


def text_chunk(text: str) -> dict[str, Any]:
    return {"choices": [{"delta": {"content": text}, "finish_reason": None}]}


async def append(state: AppState, response_id: str, events: list[dict[str, Any]]) -> None:
    async with state.engine.begin() as conn:
        assert await events_db.append(conn, response_id, events)


async def snapshot_at(state: AppState, response_id: str) -> int | None:
    async with state.engine.connect() as conn:
        number = await conn.scalar(
            select(output_snapshots.c.sequence_number).where(output_snapshots.c.response_id == response_id)
        )
    return None if number is None else int(number)


async def test_a_poll_folds_only_the_events_after_the_last_snapshot(state: AppState, account_id: str) -> None:
    [response_id] = await in_progress(state, account_id, 1)
    translator = StreamTranslator()
    words = [f" w{n}" for n in range(260 + events_db.SNAPSHOT_AFTER_EVENTS)]
    await append(state, response_id, [e for w in words[:250] for e in translator.on_chunk(text_chunk(w))])

    polled = await reading.retrieve(state, account_id, response_id)
    assert polled.output[0]["content"][0]["text"] == "".join(words[:250])
    saved = await snapshot_at(state, response_id)
    assert saved is not None
    # What the snapshot covers is never read again: with those deltas garbled the output is whole.
    async with state.engine.begin() as conn:
        key = select(responses.c.log_key).where(responses.c.id == response_id).scalar_subquery()
        covered = (event_log.c.log_key == key) & (event_log.c.sequence_number <= saved)
        await conn.execute(update(event_log).where(covered, event_log.c.template.is_not(None)).values(payload='"?"'))
    await append(state, response_id, [e for w in words[250:260] for e in translator.on_chunk(text_chunk(w))])
    polled = await reading.retrieve(state, account_id, response_id)
    assert polled.output[0]["content"][0]["text"] == "".join(words[:260])
    assert await snapshot_at(state, response_id) == saved  # ten events: not worth a new snapshot

    await append(state, response_id, [e for w in words[260:] for e in translator.on_chunk(text_chunk(w))])
    polled = await reading.retrieve(state, account_id, response_id)
    assert polled.output[0]["content"][0]["text"] == "".join(words)
    assert (await snapshot_at(state, response_id) or 0) > saved


async def test_snapshots_go_with_their_response(state: AppState, account_id: str) -> None:
    [response_id] = await in_progress(state, account_id, 1)
    translator = StreamTranslator()
    chunks = [text_chunk(f" w{n}") for n in range(events_db.SNAPSHOT_AFTER_EVENTS)]
    await append(state, response_id, [e for c in chunks for e in translator.on_chunk(c)])
    await reading.retrieve(state, account_id, response_id)
    assert await snapshot_at(state, response_id) is not None
    await stopping.delete(state, account_id, response_id)
    assert await snapshot_at(state, response_id) is None
