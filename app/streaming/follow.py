"""Following a response's event log: read what is there after N, then take live events as they
are committed, until the terminal event. Live streaming and resuming are this one code path
(design invariant 2); events keep their sequence numbers, without gap or duplicate.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import events as events_db
from app.db import responses as responses_db
from app.db.events import TERMINAL_EVENT_TYPES, Event
from app.redis_keys import ALIVE_PREFIX, ARQ_IN_PROGRESS_PREFIX, ARQ_JOB_PREFIX
from app.streaming.hub import Subscription


class FollowLost(Exception):
    """The response can no longer be followed: it was deleted, or its store=false worker died."""


@dataclass(frozen=True)
class LogSource:
    """Where a response's events can be re-read: Postgres for persisted responses; nowhere (live
    only) for foreground store=false ones, whose liveness Redis tells."""

    engine: AsyncEngine
    redis: Redis
    persisted: bool


async def follow(
    source: LogSource,
    subscription: Subscription,
    response_id: str,
    after: int,
    idle_seconds: float,
    *,
    log_is_empty: bool = False,
) -> AsyncIterator[Event | None]:
    """Yields events after `after` in order, and None after each idle period (a keep-alive
    moment); ends after the terminal event. Closes the subscription when done.

    `log_is_empty`: the caller subscribed before the response could have any event (it created
    it and has not enqueued it yet), so the first read of the log can be skipped."""
    last = after
    try:
        if source.persisted and not log_is_empty:
            for event in await _read_log(source, response_id, last):
                yield event
                last = event["sequence_number"]
                if event["type"] in TERMINAL_EVENT_TYPES:
                    return
        while True:
            batch = await subscription.next_batch(idle_seconds)
            if batch is None:
                batch = await _on_idle(source, response_id, last)
                yield None
            elif batch and batch[0]["sequence_number"] > last + 1:
                batch = await _read_log(source, response_id, last)  # we missed a message
            for event in batch:
                if event["sequence_number"] != last + 1:
                    continue
                yield event
                last = event["sequence_number"]
                if event["type"] in TERMINAL_EVENT_TYPES:
                    return
    finally:
        await subscription.close()


async def _read_log(source: LogSource, response_id: str, after: int) -> list[Event]:
    if not source.persisted:
        raise FollowLost("events of a store=false response were lost in transit")
    events: list[Event] = []
    async with source.engine.connect() as conn:
        while True:
            page = await events_db.events_after(conn, response_id, after)
            events += page
            if len(page) < 1000:
                return events
            after = page[-1]["sequence_number"]


async def _on_idle(source: LogSource, response_id: str, last: int) -> list[Event]:
    """Nothing arrived for a while: re-read Postgres (heals a lost Redis message), or for a
    store=false response check that a worker still has it or it is still queued."""
    if source.persisted:
        events = await _read_log(source, response_id, last)
        if not events:
            async with source.engine.connect() as conn:
                if await responses_db.get_row(conn, response_id) is None:
                    raise FollowLost(f"Response with id '{response_id}' was deleted.")
        return events
    alive = await source.redis.exists(ALIVE_PREFIX + response_id)
    queued = await source.redis.exists(ARQ_JOB_PREFIX + response_id) and not await source.redis.exists(
        ARQ_IN_PROGRESS_PREFIX + response_id
    )
    if not alive and not queued:
        raise FollowLost("the worker generating this store=false response was lost")
    return []
