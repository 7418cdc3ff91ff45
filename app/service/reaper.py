"""Housekeeping that keeps invariants 1 and 4 true when processes die or Redis forgets.

- Reap: a running response whose worker stopped renewing its lease is ended `failed` (with a
  terminal event every follower receives), never silently re-run. It keeps the output its
  followers could already read: rebuilt from its committed events, the unfinished item marked
  incomplete, as a generation that fails midway keeps it.
- Requeue: a queued response that Redis lost (flushed, restarted) is enqueued again from Postgres;
  the job id is the response id, so one that is still queued is not duplicated.

Every worker runs both; every API process reaps too, so a generation whose worker died ends
even while no worker of its model is alive. Compare-and-set and SKIP LOCKED make concurrent
runs harmless. A worker spares the responses it is running itself: a lease it could not renew
in time (a loaded machine) is not a dead worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection

from arq.connections import ArqRedis
from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.catalog import Catalog
from app.events import channel
from app.process.metrics import REAPED, REQUEUED
from app.protocol.accumulate import stopped
from app.protocol.encoding import WireEvent
from app.protocol.lifecycle import terminal_event
from app.queue.jobs import enqueue_generate
from app.storage import events as events_db
from app.storage import responses as responses_db
from app.storage.tables import responses

log = logging.getLogger(__name__)

WORKER_LOST = {
    "code": "server_error",
    "message": "The worker generating this response stopped responding; the response was not finished.",
}


async def reap_expired_leases(
    engine: AsyncEngine, redis: Redis, events_channel: str, spare: Collection[str] = ()
) -> list[str]:
    """Fails every running response whose lease expired, except those in `spare` (its followers
    are told on `events_channel`); returns their ids."""
    published: dict[str, list[WireEvent]] = {}
    async with engine.begin() as conn:
        rows = (
            await conn.execute(
                select(responses)
                .where(
                    responses.c.status == "in_progress",
                    responses.c.lease_expires_at < responses_db.db_now(),
                    responses.c.id.not_in(list(spare)),
                )
                .with_for_update(skip_locked=True)
                .limit(100)
            )
        ).all()
        for row in rows:
            output = stopped(await events_db.output_so_far(conn, row.id))
            outcome = responses_db.Outcome("failed", output, time.time(), error=WORKER_LOST)
            final = outcome.applied_to(responses_db.record_from_row(row, []))
            events = await events_db.end(conn, row.id, [terminal_event(final)], outcome)
            if events:
                published[row.id] = events
    for response_id in published:
        log.warning("response %s: worker lost; failed", response_id)
    REAPED.inc(len(published))
    await channel.publish(redis, events_channel, published)
    return list(published)


async def requeue_lost_jobs(
    engine: AsyncEngine,
    redis: ArqRedis,
    catalog: Catalog,
    base_queue: str,
    older_than_seconds: float,
) -> list[str]:
    """Enqueues again, on its model's queue, every queued response older than
    `older_than_seconds` (arq ignores the ones it still has); returns the ids it handed to arq."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(responses.c.id, responses.c.model)
                .where(
                    responses.c.status == "queued",
                    responses.c.created_at < responses_db.db_now(-older_than_seconds),
                )
                .order_by(responses.c.created_at)
                .limit(1000)
            )
        ).all()
    for response_id, model in rows:
        if await enqueue_generate(redis, response_id, catalog.queue_for(model, base_queue)):
            REQUEUED.inc()  # (not one arq still had)
    return [response_id for response_id, _ in rows]
