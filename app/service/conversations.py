"""The Conversations API: create, retrieve, update and delete conversations, and list, add,
retrieve and delete their items. A conversation is the account's alone: another account's answers
exactly as an unknown one (404). Items added here are checked as a create's input is (images
fetched and checked, sealed reasoning opened) and get the server's ids."""

from __future__ import annotations

from typing import Any, Literal

from app import errors
from app.protocol import conversation_request
from app.protocol.create_request import check_include
from app.protocol.item_views import as_shown
from app.protocol.pages import listed
from app.protocol.sealing import open_sealed_items
from app.protocol.shapes import Item
from app.service import idempotency
from app.service.file_inputs import read_input_files
from app.service.idempotency import IdempotencyKey
from app.service.image_fetch import check_images
from app.service.references import resolve_references
from app.service.state import AppState
from app.storage import conversations as conversations_db
from app.storage import items as items_db


async def _checked(state: AppState, account_id: str, items: list[Item]) -> list[Item]:
    await resolve_references(state, account_id, items, "items")
    open_sealed_items(items, state.seal)
    await check_images(items, state.urls)
    await read_input_files(state, account_id, items, "items")
    return items_db.with_new_ids(items)


async def create(
    state: AppState, account_id: str, body: dict[str, Any], key: IdempotencyKey | None = None
) -> dict[str, Any]:
    """With `key` (Idempotency-Key), the same request sent again answers with the conversation
    the first created."""
    metadata, items = conversation_request.parse_create(body)
    items = await _checked(state, account_id, items)
    try:
        async with state.engine.begin() as conn:
            await idempotency.claim(conn, account_id, key)
            conversation = await conversations_db.create(conn, account_id, metadata, items)
            await idempotency.record(conn, account_id, key, conversation.id)
    except idempotency.Replay as replay:
        return await retrieve(state, account_id, replay.resource_id)
    return conversation.render()


async def retrieve(state: AppState, account_id: str, conversation_id: str) -> dict[str, Any]:
    async with state.engine.connect() as conn:
        conversation = await conversations_db.get(conn, account_id, conversation_id)
    if conversation is None:
        raise errors.conversation_not_found(conversation_id)
    return conversation.render()


async def update(state: AppState, account_id: str, conversation_id: str, body: dict[str, Any]) -> dict[str, Any]:
    metadata = conversation_request.parse_update(body)
    async with state.engine.begin() as conn:
        conversation = await conversations_db.set_metadata(conn, account_id, conversation_id, metadata)
    if conversation is None:
        raise errors.conversation_not_found(conversation_id)
    return conversation.render()


async def delete(state: AppState, account_id: str, conversation_id: str) -> dict[str, Any]:
    async with state.engine.begin() as conn:
        deleted = await conversations_db.delete_conversation(conn, account_id, conversation_id)
    if not deleted:
        raise errors.conversation_not_found(conversation_id)
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


async def list_items(
    state: AppState,
    account_id: str,
    conversation_id: str,
    *,
    order: Literal["asc", "desc"],
    limit: int,
    after: str | None,
    include: list[str],
) -> dict[str, Any]:
    check_include(include)
    async with state.engine.connect() as conn:
        if await conversations_db.get(conn, account_id, conversation_id) is None:
            raise errors.conversation_not_found(conversation_id)
        cursor = None
        if after is not None:
            cursor = await conversations_db.item_place(conn, conversation_id, after)
            if cursor is None:
                raise errors.InvalidRequest(
                    f"Invalid 'after': no item with id '{after}' in conversation '{conversation_id}'.",
                    param="after",
                    code="invalid_value",
                )
        page = await conversations_db.items_page(conn, conversation_id, order=order, limit=limit, after=cursor)
    return _listed(page.data, page.has_more, include)


def _listed(data: list[Item], has_more: bool, include: list[str]) -> dict[str, Any]:
    return listed([as_shown(item, include) for item in data], has_more)


async def add_items(
    state: AppState,
    account_id: str,
    conversation_id: str,
    body: dict[str, Any],
    include: list[str],
    key: IdempotencyKey | None = None,
) -> dict[str, Any]:
    """With `key` (Idempotency-Key), the same request sent again answers with the items the
    first added (those still there), adding none."""
    check_include(include)
    items = await _checked(state, account_id, conversation_request.parse_added_items(body))
    try:
        async with state.engine.begin() as conn:
            if await conversations_db.get(conn, account_id, conversation_id, for_update=True) is None:
                raise errors.conversation_not_found(conversation_id)
            await idempotency.claim(conn, account_id, key)
            if await conversations_db.busy_with(conn, conversation_id) is not None:
                raise errors.conversation_locked()  # its response's items join first, when it ends
            await conversations_db.add_items(conn, conversation_id, items)
            await idempotency.record(conn, account_id, key, conversation_id, [item["id"] for item in items])
    except idempotency.Replay as replay:
        async with state.engine.connect() as conn:
            added = [await conversations_db.get_item(conn, replay.resource_id, item_id) for item_id in replay.item_ids]
        return _listed([item for item in added if item is not None], False, include)
    return _listed(items, False, include)


async def retrieve_item(
    state: AppState, account_id: str, conversation_id: str, item_id: str, include: list[str]
) -> Item:
    check_include(include)
    async with state.engine.connect() as conn:
        if await conversations_db.get(conn, account_id, conversation_id) is None:
            raise errors.conversation_not_found(conversation_id)
        item = await conversations_db.get_item(conn, conversation_id, item_id)
    if item is None:
        raise errors.NotFound(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.")
    return as_shown(item, include)


async def delete_item(state: AppState, account_id: str, conversation_id: str, item_id: str) -> dict[str, Any]:
    """Takes the item out of the conversation (the model is not sent it again); answers with the
    conversation, as OpenAI's does."""
    async with state.engine.begin() as conn:
        conversation = await conversations_db.get(conn, account_id, conversation_id)
        if conversation is None:
            raise errors.conversation_not_found(conversation_id)
        if not await conversations_db.remove_item(conn, conversation_id, item_id):
            raise errors.NotFound(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.")
    return conversation.render()
