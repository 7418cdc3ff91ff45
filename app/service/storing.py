"""What a create stores (`build`: its input items with ids of ours, a background response's first
events, its place in its chain) and the one transaction that stores it (`store`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from app import errors
from app.protocol import encoding
from app.protocol.create_request import ValidatedCreate
from app.protocol.encoding import WireEvent
from app.protocol.input_items import CLIENT_CALL_TYPES, CLIENT_OUTPUT_TYPES
from app.protocol.lifecycle import lifecycle_event
from app.protocol.mcp_tools import approvals_asked, check_approvals
from app.protocol.response_object import ResponseRecord
from app.protocol.shapes import Item
from app.protocol.vocabulary import ACTIVE_STATUSES
from app.service import idempotency
from app.service.idempotency import IdempotencyKey
from app.service.state import AppState
from app.storage import conversations as conversations_db
from app.storage import items as items_db
from app.storage import responses as responses_db
from app.storage.driver import autocommit, foreign_key_violated


async def build(
    state: AppState, account_id: str, create: ValidatedCreate, record: ResponseRecord
) -> responses_db.NewResponse:
    """What a create stores: its input items with ids of ours, a background response's first
    events, and its place in its chain (a 400 when the previous response cannot be continued)."""
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
    with _previous_deleted_meanwhile(new.record.previous_response_id):
        if key is not None or conversation_id is not None:
            async with state.engine.begin() as conn:  # the key, the conversation and the response at once
                await idempotency.claim(conn, new.account_id, key)
                if conversation_id is not None:
                    await _store_in_conversation(conn, conversation_id, new)
                elif new.record.durable:
                    await responses_db.insert_responses(conn, [new])
                await idempotency.record(conn, new.account_id, key, new.record.id)
        elif new.record.durable:
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


def _check_outputs_answer_calls(input_items: list[Item], waiting: set[str]) -> None:
    """Each tool output answers a call the previous response waits on, or one sent beside it: an
    output of any other call_id (a typo, a call answered already) is a 400 naming it."""
    called = waiting | {
        item["call_id"] for item in input_items if item["type"] in CLIENT_CALL_TYPES and item.get("call_id")
    }
    for index, item in enumerate(input_items):
        call_id = item.get("call_id") if item["type"] in CLIENT_OUTPUT_TYPES else None
        if call_id and call_id not in called:  # (OpenAI's words for it, after the parameter)
            where = f"input[{index}].call_id"
            raise errors.InvalidRequest(
                f"Invalid '{where}': no tool call found for {item['type']} with call_id {call_id}.",
                param=where,
                code="invalid_value",
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
    answered = {item["call_id"] for item in input_items if item["type"] in CLIENT_OUTPUT_TYPES}
    for call_id in previous.call_ids:
        if call_id not in answered:  # OpenAI's words for it
            raise errors.InvalidRequest(f"No tool output found for function call {call_id}.", param="input")
    _check_outputs_answer_calls(input_items, set(previous.call_ids))
    check_approvals(input_items, set(previous.approval_ids))
    return responses_db.ChainLink(previous.id, previous.chain_depth + 1)
