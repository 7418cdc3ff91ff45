"""An accepted response handed to the workers (`hand_over`), or withdrawn when that fails, so that
the client's error leaves nothing behind that could still run later (`withdraw`).

A stored response that starts afresh (app/service/creation.py `_starts_afresh`: its context is its
input) is not stored before its job is enqueued: its job carries it (`CarriedResponse`), and its
worker asks the runtime at once. A background one is stored while its job is enqueued, and its
worker claims it once it is there; so is one admitted by counting stored responses (a concurrency
or queue limit), which the next create must count. Any other foreground one is stored by its
worker, claimed by the same statement: the API sends only the enqueue. If no worker has stored it
within STORED_BY_WORKER_WAIT_SECONDS (its job waits for one), the API stores it, queued, as any
other, so that it outlives Redis (invariant 1: `stored_as_followed`); whichever stores it second
leaves it as it is (workers/jobs/generate.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from app import errors
from app.process import request_log
from app.protocol.encoding import WireEvent
from app.protocol.mcp_tools import Credentials, seal_credentials
from app.protocol.response_object import ResponseRecord
from app.queue import arq_seam, mcp_credentials, placement
from app.queue.jobs import CarriedResponse, GenerateJob
from app.queue.redis_link import REDIS_DOWN, REDIS_LINK
from app.service import idempotency
from app.service.idempotency import IdempotencyKey
from app.service.state import AppState
from app.service.stopping import stop
from app.storage import responses as responses_db


@dataclass(slots=True)
class Accepted:
    """A response that passed validation and was written to Postgres (unless transient, or
    `unstored`), not yet enqueued."""

    record: ResponseRecord
    input_items: list[dict[str, Any]]
    opening: list[WireEvent] = field(default_factory=list)  # the events stored with it: its whole log
    # Its MCP tools' credentials, by server label: handed to its worker sealed, never stored.
    mcp_credentials: dict[str, Credentials] = field(default_factory=dict, repr=False)
    headers: dict[str, str] = field(default_factory=dict)  # its account's rate limits, as admitted
    # A stored response that starts afresh, until it is stored (by `hand_over` beside its enqueue,
    # or, a foreground one, by its worker or `stored_as_followed`).
    unstored: responses_db.NewResponse | None = None
    # Admitted by counting stored responses (a concurrency or queue limit): stored by its API, at
    # once, so that the next create counts it.
    counted: bool = False

    @property
    def durable(self) -> bool:
        return self.record.durable

    @property
    def stored_by_worker(self) -> bool:
        return self.unstored is not None and not self.record.background and not self.counted


async def hand_over(state: AppState, accepted: Accepted) -> None:
    """Hands the response to the workers (503 when the queue is down), storing it meanwhile if it
    is `unstored` (raising what Postgres refused of it, once its enqueue ended too: `withdraw`
    removes its job)."""
    if accepted.unstored is None:
        await _enqueue(state, accepted, carried=not accepted.durable)
        return
    if accepted.stored_by_worker:
        await _enqueue(state, accepted, carried=True)
        return
    # The insert goes out first (tasks start in order): its worker's claim, a few round trips
    # later, then rarely finds it still uncommitted.
    stored = asyncio.ensure_future(state.store(accepted.unstored))
    enqueued = asyncio.ensure_future(_enqueue(state, accepted, carried=True))
    try:
        await stored
    except BaseException:
        await asyncio.wait({enqueued})
        if not enqueued.cancelled():
            enqueued.exception()  # (the store's error is the one the client gets)
        raise
    accepted.unstored = None
    request_log.phase("store")
    await enqueued


async def _enqueue(state: AppState, accepted: Accepted, carried: bool) -> None:
    """Enqueues the response's job, carrying the response if `carried`."""
    stored_for = accepted.unstored.account_id if accepted.stored_by_worker and accepted.unstored else None
    carries = CarriedResponse(accepted.record, accepted.input_items, stored_for) if carried else None
    queue_name = state.catalog.queue_for(accepted.record.model, state.settings.queue_name)
    try:
        if accepted.mcp_credentials and state.seal is not None:
            ttl = state.settings.job_timeout_seconds
            sealed = seal_credentials(state.seal, accepted.mcp_credentials)
            await mcp_credentials.keep(state.redis, accepted.record.id, sealed, ttl)
        continues = placement.contexts_continued(accepted.record)
        await state.enqueue(GenerateJob(accepted.record.id, queue_name, carries, continues=continues))
    except REDIS_DOWN as error:
        raise errors.ServiceUnavailable("The job queue (Redis) is unavailable; please retry.") from error


# How long a foreground response's API waits for its worker to store it before storing it itself.
STORED_BY_WORKER_WAIT_SECONDS = 1.0

Events = AsyncIterator[list[WireEvent] | None]


async def stored_as_followed(state: AppState, accepted: Accepted, account_id: str, events: Events) -> Events:
    """The events of a response its worker stores (`stored_by_worker`), which store it here if none
    came in STORED_BY_WORKER_WAIT_SECONDS (its job waits for a worker; or in half a follower's idle
    period, when the follower reads the log): its worker commits its first events only once it
    stored it. If that store fails, its job is removed (`withdraw`) and its client gets the error."""
    unstored = accepted.unstored
    assert unstored is not None
    wait = min(STORED_BY_WORKER_WAIT_SECONDS, state.settings.follow_idle_seconds / 2)
    first = asyncio.ensure_future(_first_of(events))
    try:
        if not (await asyncio.wait({first}, timeout=wait))[0]:
            try:
                await state.store(unstored)  # (queued; left as it is if its worker stored it)
            except Exception:
                await withdraw(state, accepted, account_id)
                raise
        batch, ended = await first
        accepted.unstored = None  # (stored by now, by its worker or here)
        if not ended:
            yield batch
            async for batch in events:
                yield batch
    finally:
        first.cancel()
        await asyncio.wait({first})
        await events.aclose()  # type: ignore[attr-defined]


async def _first_of(events: Events) -> tuple[list[WireEvent] | None, bool]:
    """The first batch, and whether there was none (the events ended)."""
    async for batch in events:
        return batch, False
    return None, True


async def stop_once_stored(state: AppState, accepted: Accepted) -> None:
    """Stops a response its worker stores, whose client left: stored first (queued, unless its worker
    stored it), so that a worker that has yet to store it finds it cancelled."""
    if accepted.unstored is not None:
        await state.store(accepted.unstored)
        accepted.unstored = None
    await stop(state, accepted.record.id, durable=True)


async def withdraw(state: AppState, accepted: Accepted, account_id: str, key: IdempotencyKey | None = None) -> None:
    """Undoes an accept whose hand-over failed, so the client's error leaves nothing behind that
    could still run later (nor a key that would answer with it)."""
    if accepted.unstored is not None:  # never written (and no key): its job goes, if it is queued
        # (A worker that took it already finds no row to claim, and gives up.)
        queue_name = state.catalog.queue_for(accepted.record.model, state.settings.queue_name)
        with REDIS_LINK.tolerated("removing a withdrawn response's job"):
            await arq_seam.remove_jobs(state.redis, queue_name, [accepted.record.id])
    else:
        async with state.engine.begin() as conn:
            if accepted.durable:
                await responses_db.delete_response(conn, accepted.record.id, None)
            await idempotency.release(conn, account_id, key)
    if accepted.mcp_credentials:  # (else they expire)
        with REDIS_LINK.tolerated("forgetting a withdrawn response's MCP credentials"):
            await mcp_credentials.forget(state.redis, accepted.record.id)
