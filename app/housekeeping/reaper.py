"""Housekeeping that keeps invariants 1 and 4 true when processes die or Redis forgets.

- Reap: a running response whose worker stopped renewing its lease (killed, its node lost, stalled)
  is continued by another worker from its last committed event where it can be (its model's
  server continues answers, it stopped before any output or inside its answer's text, it was
  continued fewer than RESPONSES_MAX_CONTINUATIONS times): it is left without a worker and a
  continuation job is enqueued; with no worker of its model alive it waits for one, as a queued
  response does. Otherwise it is ended `failed` (with a terminal event every follower receives),
  never re-run from scratch, keeping the output its followers could already read: rebuilt from its
  committed events, the unfinished item marked incomplete.
- Remove: the `store: false` jobs of a worker that died, which no one can continue (their request
  lives only in the job), so that the queue lists only work that waits.
- Requeue: a queued response that Redis lost (flushed, restarted) is enqueued again from Postgres,
  and so is a continuation; the job id is the response id (and continuation), so a job that is
  still queued is not duplicated.

Every worker runs both; every API process reaps too, so a generation whose worker died ends
even while no worker of its model is alive. Compare-and-set and SKIP LOCKED make concurrent
runs harmless. A worker spares the responses it is running itself: a lease it could not renew
in time (a loaded machine) is not a dead worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.catalog import Catalog
from app.events.ending import ending_now
from app.process.metrics import CONTINUED, REAPED, REQUEUED
from app.protocol.accumulate import continuable, stopped
from app.protocol.lifecycle import terminal_event
from app.protocol.shapes import Item
from app.queue import arq_seam, transient_runs
from app.queue.jobs import GenerateJob, QueueRedis, enqueue_generate
from app.queue.redis_link import REDIS_LINK
from app.storage import events as events_db
from app.storage import responses as responses_db
from app.storage.tables import responses

log = logging.getLogger(__name__)

WORKER_LOST = {
    "code": "server_error",
    "message": "The worker generating this response stopped responding; the response was not finished.",
}


@dataclass(frozen=True, slots=True)
class Continuations:
    """What deciding whether a lost generation is continued takes: the catalog (does its model's
    server continue answers, and on which queue), and how many times one may be."""

    catalog: Catalog
    base_queue: str
    most: int

    def allow(self, model: str, output: list[Item], settings: dict[str, Any]) -> bool:
        entry = self.catalog.by_name.get(model)
        return entry is not None and entry.continuation != "none" and continuable(output, settings)


async def reap_expired_leases(
    engine: AsyncEngine,
    redis: QueueRedis,
    events_channel: str,
    continuations: Continuations,
    spare: Collection[str] = (),
) -> list[str]:
    """Takes up every running response whose lease expired, except those in `spare`: continued
    where it can be, else failed (its followers are told on `events_channel`); returns the ids
    of those failed."""
    continued: list[tuple[str, str, int]] = []
    dead_jobs: list[GenerateJob] = []  # the jobs the dead workers ran, whose arq keys are removed
    async with ending_now(engine, redis, events_channel) as endings:
        conn = endings.conn
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
            queue_name = continuations.catalog.queue_for(row.model, continuations.base_queue)
            dead_jobs.append(GenerateJob(row.id, queue_name, continuation=row.continuations))
            output = await events_db.output_so_far(conn, row.id)
            if continuations.allow(row.model, output, row.settings):
                number = await responses_db.release_for_continuation(conn, row.id, continuations.most)
                if number is not None:
                    continued.append((row.id, queue_name, number))
                    continue
            outcome = responses_db.Outcome("failed", stopped(output), time.time(), error=WORKER_LOST)
            final = outcome.applied_to(responses_db.record_from_row(row, []))
            await endings.end(row.id, [terminal_event(final)], outcome)
    for response_id in endings.published:
        log.warning("response %s: worker lost; failed", response_id)
    REAPED.inc(len(endings.published))
    for response_id, queue_name, number in continued:
        log.warning("response %s: worker lost; continued (%d)", response_id, number)
        CONTINUED.inc()
        with REDIS_LINK.tolerated("enqueueing a continuation"):  # (else requeue_lost_jobs does, later)
            await enqueue_generate(redis, response_id, queue_name, continuation=number)
    with REDIS_LINK.tolerated("removing a lost worker's jobs"):  # (else arq takes them again, in vain)
        for queue_name in {job.queue_name for job in dead_jobs}:
            ids = [job.job_id for job in dead_jobs if job.queue_name == queue_name]
            await arq_seam.remove_jobs(redis, queue_name, ids)
    return list(endings.published)


async def remove_dead_workers_transient_jobs(
    redis: QueueRedis, catalog: Catalog, base_queue: str, workers: Collection[str]
) -> list[str]:
    """Removes from every queue the store=false jobs of workers that died (their heartbeats
    expired): no other worker may continue them (their request lives only in the job), and left,
    each would stay listed, and be taken again to no end, until its job timeout. Returns their
    response ids."""
    response_ids = await transient_runs.abandoned_by(redis, workers)
    queues = {catalog.queue_for(entry.id, base_queue) for entry in catalog.entries} | {base_queue}
    for queue_name in queues:
        await arq_seam.remove_jobs(redis, queue_name, response_ids)  # (a store=false job's id is its response's)
    for response_id in response_ids:
        log.warning("response %s (store=false): its worker died; its job is removed", response_id)
    return response_ids


async def requeue_lost_jobs(
    engine: AsyncEngine,
    redis: QueueRedis,
    catalog: Catalog,
    base_queue: str,
    older_than_seconds: float,
) -> list[str]:
    """Enqueues again, on its model's queue, every queued response older than
    `older_than_seconds`, and every running one waiting for its continuation (arq ignores the
    jobs it still has); returns the ids it handed to arq."""
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
        awaiting = await responses_db.awaiting_continuation(conn)
    for response_id, model in rows:
        if await enqueue_generate(redis, response_id, catalog.queue_for(model, base_queue)):
            REQUEUED.inc()  # (not one arq still had)
    for response_id, model, number in awaiting:
        if await enqueue_generate(redis, response_id, catalog.queue_for(model, base_queue), continuation=number):
            REQUEUED.inc()
    return [response_id for response_id, _ in rows] + [response_id for response_id, _, _ in awaiting]
