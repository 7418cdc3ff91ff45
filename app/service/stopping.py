"""Ending a response early: a stop (its client left, a cancel, a delete) is written to Postgres
first (a queued response is cancelled there and then; a running one is flagged), then its worker
is told through Redis, and reads the flag itself should the message be lost."""

from __future__ import annotations

import time

import anyio

from app import errors
from app.events.ending import Endings, ending_now
from app.events.follow import follow
from app.protocol.lifecycle import terminal_event
from app.protocol.response_object import ResponseRecord
from app.protocol.vocabulary import ACTIVE_STATUSES
from app.queue.jobs import signal_stop
from app.queue.redis_keys import events_channel
from app.service.reading import retrieve
from app.service.state import AppState
from app.storage import events as events_db
from app.storage import responses as responses_db

CANCEL_WAIT_SECONDS = 10.0


async def stop(state: AppState, response_id: str, durable: bool) -> None:
    """Stops an active response (cancel, client gone, delete): a queued one is cancelled here
    with its terminal event; a running one is flagged and its worker told."""
    if durable:
        async with ending_now(state.engine, state.redis, events_channel(state.settings.queue_name)) as endings:
            await _stop_in(endings, response_id)
        if endings.published:
            state.webhooks.nudge()  # a queued response cancelled: its deliveries were written with its end
    await signal_stop(state.redis, response_id, durable)


async def _stop_in(endings: Endings, response_id: str) -> None:
    row = await responses_db.get_row(endings.conn, response_id, for_update=True)
    if row is None or row.status not in ACTIVE_STATUSES:
        return
    if row.status == "in_progress":
        await responses_db.request_stop(endings.conn, response_id)
        return
    outcome = responses_db.Outcome("cancelled", [], time.time())
    await endings.end(response_id, [terminal_event(outcome.applied_to(responses_db.record_from_row(row, [])))], outcome)


async def cancel(state: AppState, account_id: str, response_id: str) -> ResponseRecord:
    """Cancels a background response and answers it as it then is: ended, unless its worker took
    longer than CANCEL_WAIT_SECONDS to stop."""
    record = await retrieve(state, account_id, response_id)
    if not record.background:
        raise errors.InvalidRequest(
            "Only responses created with background=true can be cancelled.",
            param="response_id",
            code="invalid_request_error",
        )
    if record.status in ACTIVE_STATUSES:
        await _cancel_and_wait(state, record.id, CANCEL_WAIT_SECONDS)
        record = await retrieve(state, account_id, response_id)
    return record


async def cancel_any(state: AppState, response_id: str) -> None:
    """An operator's cancel (the console): any account's stored response still queued or running,
    whatever its mode (a stuck foreground one too), waited for as a client's cancel is."""
    await _cancel_and_wait(state, response_id, CANCEL_WAIT_SECONDS)


async def _cancel_and_wait(state: AppState, response_id: str, timeout: float) -> None:
    """Stops a background response and waits (up to `timeout`) for its worker to end it."""
    async with state.engine.connect() as conn:
        ends = await events_db.log_ends(conn, [response_id])
    if response_id not in ends:
        return
    subscription = await state.hub.subscribe(response_id, durable=True)
    events = follow(state.log_source(True), subscription, response_id, ends[response_id][1])
    try:
        await stop(state, response_id, durable=True)
        with anyio.move_on_after(timeout):
            async for _ in events:
                pass
    finally:
        await events.aclose()  # type: ignore[attr-defined]


async def delete(state: AppState, account_id: str, response_id: str) -> None:
    async with state.engine.begin() as conn:
        status = await responses_db.delete_response(conn, response_id, account_id)
    if status is None:
        raise errors.response_not_found(response_id)
    if status == "in_progress":
        await signal_stop(state.redis, response_id, durable=True)
