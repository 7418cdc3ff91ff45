"""Conversations (OpenAI's Conversations API): their rows and their ordered items.

A conversation's items are rows of `conversation_items` in (batch, place) order: for an item a
response holds, a reference to its row in `items` (never a copy); for an item created in the
conversation itself, the item. A page is one range of the primary key, whatever the
conversation's length; the context a response sees is that whole range, read in index order.
A response's input and output join its conversation when it ends (app/storage/events.py, in the
statement that ends it); one response at a time runs on a conversation (`active_response_id`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from sqlalchemy import delete, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.protocol.ids import new_id
from app.storage.driver import DriverStatement
from app.storage.items import Item, Page, stored_payload
from app.storage.tables import conversation_item_batches, conversation_items, conversations


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    created_at: float
    metadata: dict[str, str]

    def render(self) -> dict[str, Any]:
        return {"id": self.id, "object": "conversation", "created_at": int(self.created_at), "metadata": self.metadata}


def _conversation(row: Any) -> Conversation:
    return Conversation(row.id, row.created_at.timestamp(), row.metadata)


async def create(
    conn: AsyncConnection, account_id: str, metadata: dict[str, str], items: Sequence[Item]
) -> Conversation:
    """A new conversation holding `items` (which carry their ids already)."""
    row = (
        await conn.execute(
            insert(conversations)
            .values(id=new_id("conv"), account_id=account_id, metadata=metadata)
            .returning(conversations.c.id, conversations.c.created_at, conversations.c.metadata)
        )
    ).one()
    await add_items(conn, row.id, items)
    return _conversation(row)


async def get(
    conn: AsyncConnection, account_id: str, conversation_id: str, *, for_update: bool = False
) -> Conversation | None:
    """The account's conversation (another account's answers as an unknown one: None)."""
    if "\x00" in conversation_id:  # (Postgres text cannot hold one: no such id)
        return None
    query = select(conversations.c.id, conversations.c.created_at, conversations.c.metadata).where(
        conversations.c.id == conversation_id, conversations.c.account_id == account_id
    )
    row = (await conn.execute(query.with_for_update() if for_update else query)).one_or_none()
    return None if row is None else _conversation(row)


async def set_metadata(
    conn: AsyncConnection, account_id: str, conversation_id: str, metadata: dict[str, str]
) -> Conversation | None:
    row = (
        await conn.execute(
            update(conversations)
            .where(conversations.c.id == conversation_id, conversations.c.account_id == account_id)
            .values(metadata=metadata)
            .returning(conversations.c.id, conversations.c.created_at, conversations.c.metadata)
        )
    ).one_or_none()
    return None if row is None else _conversation(row)


async def delete_conversation(conn: AsyncConnection, account_id: str, conversation_id: str) -> bool:
    """Deletes it and the items it holds itself; its responses stay (no longer in it)."""
    deleted = await conn.execute(
        delete(conversations).where(conversations.c.id == conversation_id, conversations.c.account_id == account_id)
    )
    return deleted.rowcount == 1


# Whether a response runs on the conversation now: the one it names may have ended by a path
# that did not clear it (a queued response cancelled), so its status decides.
_BUSY = text("""
    SELECT c.active_response_id FROM conversations c
    JOIN responses r ON r.id = c.active_response_id AND r.status IN ('queued', 'in_progress')
    WHERE c.id = :conversation_id
""")


async def busy_with(conn: AsyncConnection, conversation_id: str) -> str | None:
    """The response running on the conversation, if any (call with the conversation's row locked)."""
    found = await conn.scalar(_BUSY, {"conversation_id": conversation_id})
    return None if found is None else str(found)


async def set_active(conn: AsyncConnection, conversation_id: str, response_id: str) -> None:
    await conn.execute(
        update(conversations).where(conversations.c.id == conversation_id).values(active_response_id=response_id)
    )


async def add_items(conn: AsyncConnection, conversation_id: str, items: Sequence[Item]) -> None:
    """Items created in the conversation itself (they carry their ids), after those it holds."""
    if not items:
        return
    batch = await conn.scalar(conversation_item_batches.next_value().select())
    await conn.execute(
        insert(conversation_items),
        [
            {
                "conversation_id": conversation_id,
                "batch": batch,
                "place": place,
                "item_id": item["id"],
                "type": item["type"],
                "payload": stored_payload(item),
            }
            for place, item in enumerate(items)
        ],
    )


# Each item with its payload, whether the conversation or a response holds it; the keyset page
# is one range of the primary key, read in its order (or its reverse).
def _page_statement(order: Literal["asc", "desc"], after: bool) -> DriverStatement:
    comparison, direction = (">", "ASC") if order == "asc" else ("<", "DESC")
    bound = f"AND (ci.batch, ci.place) {comparison} (:batch, :place)" if after else ""
    return DriverStatement(
        text(f"""
        SELECT ci.item_id, coalesce(ci.payload::text, i.payload::text)
        FROM conversation_items ci LEFT JOIN items i ON i.id = ci.item_ref
        WHERE ci.conversation_id = :conversation_id {bound}
        ORDER BY ci.batch {direction}, ci.place {direction}
        LIMIT :limit
    """)
    )


_PAGES = {(order, after): _page_statement(order, after) for order in ("asc", "desc") for after in (False, True)}


async def items_page(
    conn: AsyncConnection,
    conversation_id: str,
    *,
    order: Literal["asc", "desc"],
    limit: int,
    after: tuple[int, int] | None,
) -> Page:
    parameters: dict[str, Any] = {"conversation_id": conversation_id, "limit": limit + 1}
    if after is not None:
        parameters |= {"batch": after[0], "place": after[1]}
    rows = await _PAGES[order, after is not None].rows(conn, parameters)
    data = [{"id": item_id, **orjson.loads(payload)} for item_id, payload in rows[:limit]]
    return Page(data, has_more=len(rows) > limit)


async def all_items(conn: AsyncConnection, conversation_id: str) -> list[Item]:
    """Every item of the conversation, in order (what a response created in it sees first)."""
    rows = await _PAGES["asc", False].rows(conn, {"conversation_id": conversation_id, "limit": None})
    return [{"id": item_id, **orjson.loads(payload)} for item_id, payload in rows]


async def item_place(conn: AsyncConnection, conversation_id: str, item_id: str) -> tuple[int, int] | None:
    """Where the item lies in the conversation (a page cursor), if it is one of its items."""
    if "\x00" in item_id:
        return None
    row = (
        await conn.execute(
            select(conversation_items.c.batch, conversation_items.c.place).where(
                conversation_items.c.conversation_id == conversation_id, conversation_items.c.item_id == item_id
            )
        )
    ).one_or_none()
    return None if row is None else (row.batch, row.place)


_ITEM = text("""
    SELECT coalesce(ci.payload::text, i.payload::text)
    FROM conversation_items ci LEFT JOIN items i ON i.id = ci.item_ref
    WHERE ci.conversation_id = :conversation_id AND ci.item_id = :item_id
""")


async def get_item(conn: AsyncConnection, conversation_id: str, item_id: str) -> Item | None:
    if "\x00" in item_id:
        return None
    payload = await conn.scalar(_ITEM, {"conversation_id": conversation_id, "item_id": item_id})
    return None if payload is None else {"id": item_id, **orjson.loads(payload)}


async def remove_item(conn: AsyncConnection, conversation_id: str, item_id: str) -> bool:
    """Takes the item out of the conversation (what its responses send next): one it holds itself
    is gone; one a response holds stays that response's."""
    if "\x00" in item_id:
        return False
    removed = await conn.execute(
        delete(conversation_items).where(
            conversation_items.c.conversation_id == conversation_id, conversation_items.c.item_id == item_id
        )
    )
    return removed.rowcount == 1


# The items of the conversations of many responses, each conversation's in order: what each
# response's model sees before its own input.
_CONTEXTS = DriverStatement(
    text("""
    SELECT r.id, i.item_id, i.payload
    FROM responses r
    CROSS JOIN LATERAL (
        SELECT ci.item_id, coalesce(ci.payload::text, held.payload::text) AS payload
        FROM conversation_items ci LEFT JOIN items held ON held.id = ci.item_ref
        WHERE ci.conversation_id = r.conversation_id
        ORDER BY ci.batch, ci.place
    ) i
    WHERE r.id = ANY(CAST(:response_ids AS text[])) AND r.conversation_id IS NOT NULL
""")
)


async def contexts(conn: AsyncConnection, response_ids: Sequence[str]) -> Mapping[str, list[Item]]:
    """For each response created in a conversation, the conversation's items as they are now."""
    found: dict[str, list[Item]] = {}
    for response_id, item_id, payload in await _CONTEXTS.rows(conn, {"response_ids": list(response_ids)}):
        found.setdefault(response_id, []).append({"id": item_id, **orjson.loads(payload)})
    return found
