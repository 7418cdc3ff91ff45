"""Creating a response: validate → admit → build → store → enqueue, and what its client follows.

Nothing reaches Postgres or the queue before the whole request is checked (design invariant 6);
a create whose hand-over to the workers fails is withdrawn, so the client's error leaves nothing
behind that could still run later. The service owns every transaction; repository functions
never commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from app import errors
from app.catalog import ModelEntry
from app.events.follow import follow
from app.process import request_log
from app.process.metrics import CREATED, HOSTED_TOOLS_NOT_OFFERED
from app.protocol import encoding
from app.protocol.create_request import ValidatedCreate, echoed_settings, parse_create_request
from app.protocol.encoding import WireEvent
from app.protocol.ids import new_id
from app.protocol.input_items import TOOL_OUTPUT_TYPES
from app.protocol.lifecycle import lifecycle_event
from app.protocol.mcp_tools import Credentials, approvals_asked, check_approvals, seal_credentials
from app.protocol.model_fit import check_fit
from app.protocol.response_object import ResponseRecord
from app.protocol.sealing import open_sealed_items
from app.protocol.shapes import Item
from app.protocol.tools import HOSTED_TOOL_TYPES
from app.protocol.vocabulary import ACTIVE_STATUSES
from app.queue import mcp_credentials
from app.queue.jobs import GenerateJob
from app.queue.redis_link import REDIS_DOWN, REDIS_LINK
from app.queue.transient_runs import TransientJob
from app.service import admission, idempotency, reading
from app.service.idempotency import IdempotencyKey
from app.service.image_fetch import check_images
from app.service.state import AppState
from app.service.stopping import stop
from app.storage import conversations as conversations_db
from app.storage import items as items_db
from app.storage import responses as responses_db
from app.storage.accounts import Caller, Limits
from app.storage.driver import autocommit, foreign_key_violated

log = logging.getLogger(__name__)


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
        """In Postgres: stored responses, and background ones for their polling window even
        with store=false. Only a foreground store=false response is transient: it lives in its
        job and on Redis alone."""
        return self.record.store or self.record.background


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
            state, caller.account_id, body, caller.limits, body_bytes, compaction=compaction, key=key
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
        await enqueue(state, accepted)
    except BaseException as failure:
        if subscription is not None:
            await subscription.close()
        await withdraw(state, accepted, caller.account_id, key)
        if isinstance(failure, errors.APIError):
            failure.add_headers(accepted.headers)
        raise
    request_log.phase("queue")
    if subscription is None:
        return Created(record, None, None, accepted.headers)
    # Before its job runs, a response's log holds what its create stored: nothing, or a background
    # one's first two events.
    events = follow(state.log_source(accepted.durable), subscription, record.id, -1, known_log=accepted.opening)
    on_disconnect = None if record.background else partial(stop, state, record.id, accepted.durable)
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
        events = await reading.replay(state, account_id, response_id)
    except errors.InvalidRequest:
        if record.status in ACTIVE_STATUSES or record.stream:
            raise
        return Created(record, None, None)  # ended, and its log is gone: the stored response
    return Created(record, events, None)  # (a replay's client leaving stops nothing)


async def validated(
    state: AppState, body: dict[str, Any], *, input_optional: bool = False
) -> tuple[ValidatedCreate, ModelEntry]:
    """A create request's body checked in full (a 400 naming what is wrong), with its model;
    sealed reasoning opened and image URLs fetched."""
    create = parse_create_request(
        body, state.settings.hosted_tools, input_optional=input_optional, mcp=state.mcp_policy
    )
    if create.mcp_credentials and state.seal is None:
        raise errors.InvalidRequest(
            "Invalid 'tools': an MCP tool's authorization and headers travel sealed to the worker "
            "that calls its server, and this server has no encryption key (RESPONSES_ENCRYPTION_KEYS).",
            param="tools",
            code="mcp_credentials_unavailable",
        )
    if create.request.context_management and state.seal is None:
        raise errors.InvalidRequest(
            "Invalid 'context_management': compaction needs an encryption key on this server "
            "(RESPONSES_ENCRYPTION_KEYS): the summary is sealed with it.",
            param="context_management",
            code="compaction_unavailable",
        )
    open_sealed_items(create.input_items, state.seal)
    model = state.catalog.resolve(create.request.model)
    check_fit(create, model)
    await check_images(create.input_items, state.images)
    return create, model


async def accept(
    state: AppState,
    account_id: str,
    body: dict[str, Any],
    limits: Limits | None = None,
    body_bytes: int = 0,
    *,
    compaction: bool = False,
    key: IdempotencyKey | None = None,
) -> Accepted:
    """validate → admit → build → store: the response in Postgres (unless transient), not yet
    enqueued. An error after admission carries the rate-limit headers of the request it counted."""
    create, model = await validated(state, body, input_optional=compaction)  # a chain alone is compacted
    request_log.phase("validate")
    record = new_record(create, model, compaction=compaction)
    headers = await admit(state, account_id, record, model, limits, body_bytes, key)
    try:
        new = await build(state, account_id, create, record)
        await store(state, new, create.conversation_id, key)
    except errors.APIError as error:
        error.add_headers(headers)
        raise
    request_log.phase("store")
    return Accepted(record, new.input_items, list(new.opening), create.mcp_credentials, headers)


async def admit(
    state: AppState,
    account_id: str,
    record: ResponseRecord,
    model: ModelEntry,
    limits: Limits | None,
    body_bytes: int,
    key: IdempotencyKey | None,
) -> dict[str, str]:
    """A request sent again with its Idempotency-Key is answered (`idempotency.Replay`) before it
    counts against any limit; any other is refused (429) over its account's limits or its model's
    queue (app/service/admission.py). Returns the rate-limit headers its answer carries."""
    if key is not None:
        async with state.engine.connect() as conn:
            await idempotency.check(conn, account_id, key)
    if limits is None:
        return {}
    counted = record.background or record.store  # (a transient response is counted nowhere)
    if counted and (model.max_queued is not None or limits.max_concurrent is not None):
        async with state.engine.connect() as conn:
            if limits.max_concurrent is not None:
                admission.check_concurrency(await responses_db.count_active(conn, account_id), limits)
            if model.max_queued is not None:
                admission.check_queue(await responses_db.count_queued(conn, model.id), model.max_queued)
    if not limits.any:
        return {}
    requested = record.settings["requested"]["max_output_tokens"]
    output = min(requested or model.max_output_tokens, model.max_output_tokens)
    estimate = admission.estimate_tokens(body_bytes, output)
    admitted = await admission.admit(state.redis, account_id, limits, estimate, state.settings.limit_window_seconds)
    if admitted.tokens_key is not None:  # its worker puts the real count in place of the estimate
        record.settings["admission"] = {"tokens_key": admitted.tokens_key, "estimate": admitted.estimate}
    return admitted.headers


async def build(
    state: AppState, account_id: str, create: ValidatedCreate, record: ResponseRecord
) -> responses_db.NewResponse:
    """What a create stores: its input items with ids of ours, a background response's first
    events, and its place in its chain (a 400 when the previous response cannot be continued)."""
    _log_hosted_tools(create)
    input_items = items_db.with_new_ids(create.input_items)
    opening: list[WireEvent] = []
    if record.background:  # visible (and followable) at once: its first events come with it
        events = [lifecycle_event("response.created", record), lifecycle_event("response.queued", record)]
        opening = encoding.numbered(events, [encoding.encode(event) for event in events], 0)
    previous_id = record.previous_response_id
    if previous_id is None and create.conversation_id is None:  # (else checked with what it continues)
        check_approvals(create.input_items, set())
    link = responses_db.ChainLink(None, 0)
    if previous_id is not None:
        async with autocommit(state.engine) as conn:  # one read
            link = await chain_link(conn, account_id, previous_id, create.input_items)
    return responses_db.NewResponse(record, account_id, link, input_items, opening)


async def store(
    state: AppState, new: responses_db.NewResponse, conversation_id: str | None, key: IdempotencyKey | None
) -> None:
    """Writes a durable response; with an Idempotency-Key or in a conversation, in one transaction
    with the key and the conversation's lock, else with the others stored at the same moment (one
    statement). The previous response may be deleted between its read and this insert: the
    insert's reference to it is then refused, and the request gets what it would have got a
    moment later."""
    durable = new.record.store or new.record.background
    with _previous_deleted_meanwhile(new.record.previous_response_id):
        if key is not None or conversation_id is not None:
            async with state.engine.begin() as conn:  # the key, the conversation and the response at once
                await idempotency.claim(conn, new.account_id, key)
                if conversation_id is not None:
                    await _store_in_conversation(conn, conversation_id, new)
                elif durable:
                    await responses_db.insert_responses(conn, [new])
                await idempotency.record(conn, new.account_id, key, new.record.id)
        elif durable:
            await state.store(new)


async def _store_in_conversation(conn: AsyncConnection, conversation_id: str, new: responses_db.NewResponse) -> None:
    """Stores a response created in a conversation as the one running on it: a second is refused
    until it ends (OpenAI's `conversation_locked`), as is a conversation unknown to the account."""
    if await conversations_db.get(conn, new.account_id, conversation_id, for_update=True) is None:
        raise errors.conversation_not_found(conversation_id, param="conversation")
    if await conversations_db.busy_with(conn, conversation_id) is not None:
        raise errors.conversation_locked()
    asked = set()  # the conversation's approval requests these approvals answer, not answered yet
    for _, request_id in approvals_asked(new.input_items):
        item = await conversations_db.get_item(conn, conversation_id, request_id)
        if item is not None and item["type"] == "mcp_approval_request":
            if not await conversations_db.approval_answered(conn, conversation_id, request_id):
                asked.add(request_id)
    check_approvals(new.input_items, asked)
    await responses_db.insert_responses(conn, [new])
    await conversations_db.set_active(conn, conversation_id, new.record.id)


@contextmanager
def _previous_deleted_meanwhile(previous_id: str | None) -> Iterator[None]:
    try:
        yield
    except DBAPIError as exc:
        if previous_id is not None and foreign_key_violated(exc):
            raise _previous_not_found(previous_id) from exc
        raise


def _previous_not_found(previous_id: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(
        f"Previous response with id '{previous_id}' not found.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


async def enqueue(state: AppState, accepted: Accepted) -> None:
    """Hands the response to the workers (503 when the queue is down)."""
    transient = None if accepted.durable else TransientJob(accepted.record, accepted.input_items)
    queue_name = state.catalog.queue_for(accepted.record.model, state.settings.queue_name)
    try:
        if accepted.mcp_credentials and state.seal is not None:
            ttl = state.settings.job_timeout_seconds
            sealed = seal_credentials(state.seal, accepted.mcp_credentials)
            await mcp_credentials.keep(state.redis, accepted.record.id, sealed, ttl)
        await state.enqueue(GenerateJob.of(accepted.record.id, queue_name, transient))
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


def _log_hosted_tools(create: ValidatedCreate) -> None:
    """Hosted tools kept from the model (RESPONSES_HOSTED_TOOLS=ignore): logged and counted, so it
    is no secret."""
    hosted = [
        tool["type"]
        for tool in create.tools
        if tool["type"] in HOSTED_TOOL_TYPES and not (tool["type"] == "mcp" and create.runs_mcp)
    ]
    if hosted:
        log.info("hosted tools not offered to the model: %s", ", ".join(hosted))
    for kind in hosted:
        HOSTED_TOOLS_NOT_OFFERED.labels(kind).inc()


def new_record(create: ValidatedCreate, model: ModelEntry, *, compaction: bool = False) -> ResponseRecord:
    request = create.request
    settings = echoed_settings(create, request.max_output_tokens, model.sampling)
    if compaction:
        settings["compaction"] = True
    # What the client actually set, for the runtime request (defaults stay the runtime's).
    settings["requested"] = {
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_output_tokens": request.max_output_tokens,
        "sampling": request.sampling(),
        "include": request.include or [],
        "logprobs": create.logprobs,
        "runs_mcp": create.runs_mcp,
    }
    return ResponseRecord(
        id=new_id("resp"),
        model=model.id,
        status="queued",
        created_at=time.time(),
        instructions=request.instructions,
        previous_response_id=request.previous_response_id,
        settings=settings,
        metadata=request.metadata or {},
        store=create.store,
        background=create.background,
        stream=create.stream,
    )


async def chain_link(
    conn: AsyncConnection,
    account_id: str,
    previous_id: str | None,
    input_items: list[Item],
) -> responses_db.ChainLink:
    if previous_id is None:
        return responses_db.ChainLink(None, 0)
    previous = await responses_db.chain_link(conn, account_id, previous_id)
    if previous is None:
        raise _previous_not_found(previous_id)
    if previous.status in ACTIVE_STATUSES:
        raise errors.InvalidRequest(
            f"Previous response with id '{previous_id}' is still {previous.status}; "
            "continue from it once it has finished.",
            param="previous_response_id",
            code="previous_response_not_finished",
        )
    answered = {item["call_id"] for item in input_items if item["type"] in TOOL_OUTPUT_TYPES}
    for call_id in previous.call_ids:
        if call_id not in answered:  # OpenAI's words for it
            raise errors.InvalidRequest(f"No tool output found for function call {call_id}.", param="input")
    check_approvals(input_items, set(previous.approval_ids))
    return responses_db.ChainLink(previous.id, previous.chain_depth + 1)
