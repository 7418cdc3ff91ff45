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
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from sqlalchemy import delete, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.protocol.ids import new_id
from app.protocol.shapes import Item
from app.storage.driver import DriverStatement
from app.storage.items import Page, stored_payload
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


_ANSWERED = text("""
    SELECT EXISTS (
        SELECT 1 FROM conversation_items ci LEFT JOIN items i ON i.id = ci.item_ref
        WHERE ci.conversation_id = :conversation_id
          AND coalesce(ci.type, i.type) IN ('mcp_approval_response', 'mcp_call')
          AND coalesce(ci.payload, i.payload) ->> 'approval_request_id' = :request_id)
""")


async def approval_answered(conn: AsyncConnection, conversation_id: str, request_id: str) -> bool:
    """Whether the conversation holds an answer to this MCP approval request, or the call it
    approved. (It reads the conversation's items: approvals are rare, and this is their check.)"""
    return bool(await conn.scalar(_ANSWERED, {"conversation_id": conversation_id, "request_id": request_id}))


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
    if removed.rowcount != 1:
        return False
    await count_removal(conn, conversation_id)
    return True


FROM_START = (0, 0)  # before every item: batches start at 1

# Each conversation's items after a place, in order, with its count of removals: a worker's copy
# of a conversation is read once, then only what joined it since (workers/caches/conversation_items.py).
_ITEMS_AFTER = DriverStatement(
    text("""
    SELECT c.id, c.items_removed, i.batch, i.place, i.item_id, i.payload
    FROM unnest(CAST(:conversation_ids AS text[]), CAST(:batches AS bigint[]), CAST(:places AS int[]))
         AS k(id, batch, place)
    JOIN conversations c ON c.id = k.id
    LEFT JOIN LATERAL (
        SELECT ci.batch, ci.place, ci.item_id, coalesce(ci.payload::text, held.payload::text) AS payload
        FROM conversation_items ci LEFT JOIN items held ON held.id = ci.item_ref
        WHERE ci.conversation_id = c.id AND (ci.batch, ci.place) > (k.batch, k.place)
        ORDER BY ci.batch, ci.place
        OFFSET 0  -- (kept a subquery: its range is then read from the index, not filtered after)
    ) i ON true
    ORDER BY c.id, i.batch, i.place
""")
)


@dataclass(slots=True)
class Tail:
    """A conversation's items after a place: `last` is the last one's place (None: none since),
    `size` their JSON's length."""

    items_removed: int
    items: list[Item] = field(default_factory=list)
    last: tuple[int, int] | None = None
    size: int = 0


async def items_after(conn: AsyncConnection, after: Mapping[str, tuple[int, int]]) -> dict[str, Tail]:
    """For each conversation, its items after the place given (FROM_START: all of them). A
    conversation deleted is missing. Items join a conversation under its row's lock (a response's
    end, an items create), so one that joins later lies after every item read now."""
    ids = list(after)
    parameters = {"conversation_ids": ids, "batches": [after[i][0] for i in ids], "places": [after[i][1] for i in ids]}
    tails: dict[str, Tail] = {}
    for conversation_id, items_removed, batch, place, item_id, payload in await _ITEMS_AFTER.rows(conn, parameters):
        tail = tails.setdefault(conversation_id, Tail(items_removed))
        if item_id is not None:
            tail.items.append({"id": item_id, **orjson.loads(payload)})
            tail.last = (batch, place)
            tail.size += len(payload)
    return tails


async def count_removal(conn: AsyncConnection, conversation_id: str) -> None:
    """An item left the conversation: workers' copies of its items are stale."""
    await conn.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id)
        .values(items_removed=conversations.c.items_removed + 1)
    )
