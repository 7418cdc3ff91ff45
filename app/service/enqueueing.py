"""An accepted response handed to the workers (`hand_over`), or withdrawn when that fails, so that
the client's error leaves nothing behind that could still run later (`withdraw`).

A stored response that starts afresh (app/service/creation.py `_starts_afresh`: its context is its
input) is stored while its job is enqueued, not before: its job carries it (`CarriedResponse`),
and its worker asks the runtime while the row is written, claiming it once it is there
(workers/jobs/generate.py). Its insert and its claim leave the way to its first token."""

from __future__ import annotations

import asyncio
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
    # A stored response that starts afresh, until `hand_over` has written it beside its enqueue.
    unstored: responses_db.NewResponse | None = None

    @property
    def durable(self) -> bool:
        return self.record.durable


async def hand_over(state: AppState, accepted: Accepted) -> None:
    """Hands the response to the workers (503 when the queue is down), storing it meanwhile if it
    is `unstored` (raising what Postgres refused of it, once its enqueue ended too: `withdraw`
    removes its job)."""
    if accepted.unstored is None:
        await _enqueue(state, accepted, carried=not accepted.durable)
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
    carries = CarriedResponse(accepted.record, accepted.input_items) if carried else None
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
