"""Creating a response, step by step: validate (validating.py) → admit (admission.py) → build and
store (storing.py) → enqueue (enqueueing.py), and what its client follows.

Nothing reaches Postgres or the queue before the whole request is checked (design invariant 6);
a create whose hand-over to the workers fails is withdrawn, so the client's error leaves nothing
behind that could still run later. The service owns every transaction; repository functions
never commit.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from app import errors
from app.events.follow import follow
from app.process import request_log
from app.process.metrics import CREATED
from app.protocol.encoding import WireEvent
from app.protocol.hosted_calls import runs_tools
from app.protocol.response_object import ResponseRecord
from app.protocol.search_results import events_shown
from app.protocol.vocabulary import ACTIVE_STATUSES
from app.service import admission, enqueueing, idempotency, reading, storing, validating
from app.service.enqueueing import Accepted
from app.service.idempotency import IdempotencyKey
from app.service.state import AppState
from app.service.stopping import stop
from app.storage import responses as responses_db
from app.storage.accounts import Caller, Limits

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Created:
    """A response accepted and handed to the workers, with what its client follows."""

    record: ResponseRecord
    # Its events from the first, for a stream or a JSON answer that waits for the end; None for a
    # background response created without stream, which is answered at once.
    events: AsyncIterator[list[WireEvent] | None] | None
    # Stops the generation when its client leaves; None for a background one, which outlives it.
    on_disconnect: Callable[[], Awaitable[None]] | None
    headers: dict[str, str] = field(default_factory=dict)  # what its answer carries: the rate limits


async def create(
    state: AppState,
    caller: Caller,
    body: dict[str, Any],
    body_bytes: int,
    *,
    compaction: bool = False,
    key: IdempotencyKey | None = None,
) -> Created:
    """`compaction`: the response compacts its context (app/service/compaction.py). With `key`
    (Idempotency-Key), the same request sent again answers with the response the first created."""
    try:
        accepted = await accept(
            state,
            caller.account_id,
            body,
            caller.limits,
            body_bytes,
            compaction=compaction,
            key=key,
            store_afresh_later=True,
        )
    except idempotency.Replay as replay:
        return await _replayed(state, caller.account_id, replay.resource_id)
    record = accepted.record
    request_log.note(model=record.model, response_id=record.id)
    CREATED.labels(record.model, "background" if record.background else "stream" if record.stream else "json").inc()
    subscription = None
    try:
        if record.stream or not record.background:  # before enqueueing: a transient response's events exist only live
            subscription = await state.hub.subscribe(record.id, accepted.durable)
        await enqueueing.hand_over(state, accepted)
    except BaseException as failure:
        if subscription is not None:
            await subscription.close()
        await enqueueing.withdraw(state, accepted, caller.account_id, key)
        if isinstance(failure, errors.APIError):
            failure.add_headers(accepted.headers)
        raise
    request_log.phase("queue")
    if subscription is None:
        return Created(record, None, None, accepted.headers)
    # Before its job runs, a response's log holds what its create stored: nothing, or a background
    # one's first two events.
    events = events_shown(
        follow(state.log_source(accepted.durable), subscription, record.id, -1, known_log=accepted.opening),
        record.include,
    )
    on_disconnect = None if record.background else partial(stop, state, record.id, accepted.durable)
    if accepted.stored_by_worker:  # (stored by its worker, or by these if it is slow to)
        events = enqueueing.stored_as_followed(state, accepted, caller.account_id, events)
        on_disconnect = partial(enqueueing.stop_once_stored, state, accepted)
    return Created(record, events, on_disconnect, accepted.headers)


async def _replayed(state: AppState, account_id: str, response_id: str) -> Created:
    """The answer to a create sent again with its Idempotency-Key: the response the first one
    created, as its mode answers it (a background one at once, as it is now; a stream, or a JSON
    answer that waits, from its log's start, as a resume would), and nothing generated again."""
    try:
        record = await reading.retrieve(state, account_id, response_id)
    except errors.NotFound:
        raise errors.Conflict(
            f"The request with this {idempotency.HEADER} created a response that is not stored (store=false) "
            "or no longer exists; it cannot be answered again. Use a new key for a new request.",
            param=idempotency.HEADER,
            code="idempotency_key_unreplayable",
        ) from None
    request_log.note(model=record.model, response_id=record.id)
    if record.background and not record.stream:
        return Created(record, None, None)
    try:
        events = events_shown(await reading.replay(state, account_id, response_id), record.include)
    except errors.InvalidRequest:
        if record.status in ACTIVE_STATUSES or record.stream:
            raise
        return Created(record, None, None)  # ended, and its log is gone: the stored response
    return Created(record, events, None)  # (a replay's client leaving stops nothing)


async def accept(
    state: AppState,
    account_id: str,
    body: dict[str, Any],
    limits: Limits | None = None,
    body_bytes: int = 0,
    *,
    compaction: bool = False,
    key: IdempotencyKey | None = None,
    store_afresh_later: bool = False,
) -> Accepted:
    """validate → admit → build → store: the response in Postgres (unless transient), not yet
    enqueued. With `store_afresh_later`, a response that starts afresh is left `unstored`, for
    `enqueueing.hand_over` to store beside its enqueue. An error after admission carries the
    rate-limit headers of the request it counted."""
    create, model = await validating.validated(
        state, account_id, body, input_optional=compaction
    )  # a chain alone is compacted
    request_log.phase("validate")
    record = validating.new_record(create, model, compaction=compaction, account_id=account_id)
    if key is not None:  # a request sent again is answered before it is counted against any limit
        async with state.engine.connect() as conn:
            await idempotency.check(conn, account_id, key)
    headers = await admission.admit(state, account_id, record, model, limits, body_bytes)
    validating.log_hosted_tools(create)
    try:
        new = await storing.build(state, account_id, create, record)
        if store_afresh_later and _starts_afresh(new, create.conversation_id, key, body_bytes):
            counted = admission.counts_stored(record, model, limits)
            opening = list(new.opening)
            return Accepted(record, new.input_items, opening, create.mcp_credentials, headers, new, counted)
        await storing.store(state, new, create.conversation_id, key)
    except errors.APIError as error:
        error.add_headers(headers)
        raise
    request_log.phase("store")
    return Accepted(record, new.input_items, list(new.opening), create.mcp_credentials, headers)


# The largest request whose response its job carries (app/service/enqueueing.py): Redis holds it
# twice over a moment, and the worker's decoding of it is on the way to the first token.
CARRIED_MOST_BYTES = 64 * 1024


def _starts_afresh(
    new: responses_db.NewResponse, conversation_id: str | None, key: IdempotencyKey | None, body_bytes: int
) -> bool:
    """Whether the response is stored beside its enqueue (app/service/enqueueing.py): stored,
    continuing nothing (its context is its input), with no key or conversation to write with it,
    and no tool the server runs (no call may be made for it before it is claimed)."""
    record = new.record
    return (
        record.durable
        and not runs_tools(record.settings)
        and record.previous_response_id is None
        and conversation_id is None
        and key is None
        and not record.settings.get("compaction")
        and body_bytes <= CARRIED_MOST_BYTES
    )
