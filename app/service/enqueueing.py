"""An accepted response handed to the workers (`enqueue`), or withdrawn when that fails, so that
the client's error leaves nothing behind that could still run later (`withdraw`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app import errors
from app.protocol.encoding import WireEvent
from app.protocol.mcp_tools import Credentials, seal_credentials
from app.protocol.response_object import ResponseRecord
from app.queue import mcp_credentials, placement
from app.queue.jobs import GenerateJob
from app.queue.redis_link import REDIS_DOWN, REDIS_LINK
from app.queue.transient_runs import TransientJob
from app.service import idempotency
from app.service.idempotency import IdempotencyKey
from app.service.state import AppState
from app.storage import responses as responses_db


@dataclass(frozen=True, slots=True)
class Accepted:
    """A response that passed validation and was written to Postgres (unless transient), not yet enqueued."""

    record: ResponseRecord
    input_items: list[dict[str, Any]]
    opening: list[WireEvent] = field(default_factory=list)  # the events stored with it: its whole log
    # Its MCP tools' credentials, by server label: handed to its worker sealed, never stored.
    mcp_credentials: dict[str, Credentials] = field(default_factory=dict, repr=False)
    headers: dict[str, str] = field(default_factory=dict)  # its account's rate limits, as admitted

    @property
    def durable(self) -> bool:
        return self.record.durable


async def enqueue(state: AppState, accepted: Accepted) -> None:
    """Hands the response to the workers (503 when the queue is down)."""
    transient = None if accepted.durable else TransientJob(accepted.record, accepted.input_items)
    queue_name = state.catalog.queue_for(accepted.record.model, state.settings.queue_name)
    try:
        if accepted.mcp_credentials and state.seal is not None:
            ttl = state.settings.job_timeout_seconds
            sealed = seal_credentials(state.seal, accepted.mcp_credentials)
            await mcp_credentials.keep(state.redis, accepted.record.id, sealed, ttl)
        continues = placement.contexts_continued(accepted.record)
        await state.enqueue(GenerateJob.of(accepted.record.id, queue_name, transient, continues))
    except REDIS_DOWN as error:
        raise errors.ServiceUnavailable("The job queue (Redis) is unavailable; please retry.") from error


async def withdraw(state: AppState, accepted: Accepted, account_id: str, key: IdempotencyKey | None = None) -> None:
    """Undoes an accept whose hand-over failed, so the client's error leaves nothing behind that
    could still run later (nor a key that would answer with it)."""
    async with state.engine.begin() as conn:
        if accepted.durable:
            await responses_db.delete_response(conn, accepted.record.id, None)
        await idempotency.release(conn, account_id, key)
    if accepted.mcp_credentials:  # (else they expire)
        with REDIS_LINK.tolerated("forgetting a withdrawn response's MCP credentials"):
            await mcp_credentials.forget(state.redis, accepted.record.id)
