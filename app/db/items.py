"""Items: every input and output item stored once, under the response that introduced it.

A chain's context is rebuilt by one recursive query over `context_parent_id`, ordered by
(chain_depth, side, position); 'input' sorts before 'output', so each turn's input comes before
its output. Nothing is ever copied from one response to the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import items
from app.ids import new_id

Item = dict[str, Any]
Side = Literal["input", "output"]

_ID_PREFIX: dict[str, Any] = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "reasoning": "rs",
}


def with_new_id(item: Item) -> Item:
    return {"id": new_id(_ID_PREFIX.get(item["type"], "msg")), **item}


def stored_payload(item: Item) -> Item:
    """An item as its row's payload keeps it: its id has a column of its own."""
    return {k: v for k, v in item.items() if k != "id"}


async def output_items(conn: AsyncConnection, response_id: str) -> list[Item]:
    rows = await conn.execute(
        select(items.c.id, items.c.payload)
        .where(items.c.response_id == response_id, items.c.side == "output")
        .order_by(items.c.position)
    )
    return [{"id": r.id, **r.payload} for r in rows]


# The context of each response in :response_ids (its `root`): its chain's items, walked from it
# to the chain's start in one recursive query, however long the chain.
CONTEXT_CTE = """
WITH RECURSIVE chain AS (
    SELECT id AS root, id, context_parent_id, chain_depth FROM responses WHERE id = ANY(CAST(:response_ids AS text[]))
    UNION ALL
    SELECT c.root, r.id, r.context_parent_id, r.chain_depth
    FROM responses r JOIN chain c ON r.id = c.context_parent_id
),
context AS (
    SELECT c.root, i.id, i.payload, c.chain_depth AS depth, i.side, i.position
    FROM chain c JOIN items i ON i.response_id = c.id
    WHERE NOT (i.response_id = c.root AND i.side = 'output' AND :exclude_own_output)
)
"""


def context_as_json(root: str) -> str:
    """The context of the response `root` (an SQL expression) as one JSON array of items, in the
    order the model sees them."""
    return f"""
    SELECT coalesce(json_agg(jsonb_build_object('id', id) || payload ORDER BY depth, side, position), '[]')
    FROM context WHERE context.root = {root}
"""


async def context_items(
    conn: AsyncConnection,
    response_id: str,
    *,
    own_output: bool = False,
) -> list[Item]:
    """What the model sees for this response: the chain's inputs and outputs, then its own input
    (and its own output too with `own_output`, as the context a new turn continues from)."""
    context: list[Item] = await conn.scalar(
        text(CONTEXT_CTE + context_as_json(":response_id")),
        {"response_ids": [response_id], "response_id": response_id, "exclude_own_output": not own_output},
    )
    return context


@dataclass(frozen=True, slots=True)
class Page:
    data: list[Item]
    has_more: bool


async def input_items_page(
    conn: AsyncConnection,
    response_id: str,
    *,
    order: Literal["asc", "desc"],
    limit: int,
    after: str | None,
    before: str | None,
) -> Page:
    """One keyset page of a response's input items (its whole chain context)."""
    forward, backward = (">", "<") if order == "asc" else ("<", ">")
    direction = "ASC" if order == "asc" else "DESC"
    conditions = ["TRUE"]
    if after is not None:
        conditions.append(
            f"(depth, side, position) {forward} (SELECT depth, side, position FROM context WHERE id = :after)"
        )
    if before is not None:
        conditions.append(
            f"(depth, side, position) {backward} (SELECT depth, side, position FROM context WHERE id = :before)"
        )
    query = (
        CONTEXT_CTE + f"SELECT id, payload FROM context WHERE {' AND '.join(conditions)} "
        f"ORDER BY depth {direction}, side {direction}, position {direction} LIMIT :limit"
    )
    rows = (
        await conn.execute(
            text(query),
            {
                "response_ids": [response_id],
                "after": after,
                "before": before,
                "limit": limit + 1,
                "exclude_own_output": True,
            },
        )
    ).all()
    return Page([{"id": r.id, **r.payload} for r in rows[:limit]], has_more=len(rows) > limit)


async def in_context(conn: AsyncConnection, response_id: str, item_id: str) -> bool:
    row = await conn.execute(
        text(CONTEXT_CTE + "SELECT 1 FROM context WHERE id = :item_id"),
        {"response_ids": [response_id], "item_id": item_id, "exclude_own_output": True},
    )
    return row.first() is not None
