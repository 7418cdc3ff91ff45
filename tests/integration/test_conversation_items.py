"""A worker's copies of conversations: a turn reads only the items that joined since, any removal
makes the copy read whole again, and the copies stay within their bound."""

from __future__ import annotations

from typing import Any

from app.process.metrics import REGISTRY
from app.service import conversations
from app.service.state import AppState
from workers.caches.conversation_items import ConversationItems


def said(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def read_from(source: str) -> float:
    return REGISTRY.get_sample_value("responses_worker_conversation_items_total", {"source": source}) or 0.0


async def new_conversation(state: AppState, account_id: str, *texts: str) -> str:
    return str((await conversations.create(state, account_id, {"items": [said(t) for t in texts]}))["id"])


async def add(state: AppState, account_id: str, conversation_id: str, *texts: str) -> None:
    await conversations.add_items(state, account_id, conversation_id, {"items": [said(t) for t in texts]}, [])


async def read(state: AppState, copies: ConversationItems, *conversation_ids: str) -> dict[str, list[str]]:
    async with state.engine.connect() as conn:
        found = await copies.read(conn, conversation_ids)
    return {c: [item["content"][0]["text"] for item in items] for c, items in found.items()}


async def test_a_second_read_takes_only_the_new_items_from_postgres(state: AppState, account_id: str) -> None:
    copies = ConversationItems(limit_bytes=1_000_000)
    conversation = await new_conversation(state, account_id, "a", "b")
    assert await read(state, copies, conversation) == {conversation: ["a", "b"]}
    await add(state, account_id, conversation, "c")
    cached, fetched = read_from("cache"), read_from("postgres")
    assert await read(state, copies, conversation) == {conversation: ["a", "b", "c"]}
    assert (read_from("cache") - cached, read_from("postgres") - fetched) == (2, 1)


async def test_a_removed_item_makes_the_copy_read_whole_again(state: AppState, account_id: str) -> None:
    copies = ConversationItems(limit_bytes=1_000_000)
    conversation = await new_conversation(state, account_id, "a", "b", "c")
    await read(state, copies, conversation)
    listed = await conversations.list_items(
        state, account_id, conversation, order="asc", limit=20, after=None, include=[]
    )
    await conversations.delete_item(state, account_id, conversation, listed["data"][1]["id"])
    await add(state, account_id, conversation, "d")
    fetched = read_from("postgres")
    assert await read(state, copies, conversation) == {conversation: ["a", "c", "d"]}
    assert read_from("postgres") - fetched == 3


async def test_a_deleted_conversation_reads_as_empty(state: AppState, account_id: str) -> None:
    copies = ConversationItems(limit_bytes=1_000_000)
    conversation = await new_conversation(state, account_id, "a")
    await read(state, copies, conversation)
    await conversations.delete(state, account_id, conversation)
    assert await read(state, copies, conversation) == {conversation: []}


async def test_copies_stay_within_their_bound_least_recently_used_out(state: AppState, account_id: str) -> None:
    first, second, third = [await new_conversation(state, account_id, "a") for _ in range(3)]
    measure = ConversationItems(limit_bytes=1_000_000)
    await read(state, measure, first)
    copies = ConversationItems(limit_bytes=2 * measure.bytes_kept)  # room for two of them
    await read(state, copies, first, second)
    await read(state, copies, first)  # now the most recently used
    await read(state, copies, third)  # the second goes
    assert copies.bytes_kept == 2 * measure.bytes_kept
    cached = read_from("cache")
    await read(state, copies, first)
    assert read_from("cache") - cached == 1
    await read(state, copies, second)
    assert read_from("cache") - cached == 1


async def test_without_room_nothing_is_kept(state: AppState, account_id: str) -> None:
    copies = ConversationItems(limit_bytes=0)
    conversation = await new_conversation(state, account_id, "a", "b")
    await read(state, copies, conversation)
    cached = read_from("cache")
    assert await read(state, copies, conversation) == {conversation: ["a", "b"]}
    assert read_from("cache") == cached
