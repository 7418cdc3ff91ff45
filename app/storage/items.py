"""Items: every input and output item stored once, under the response that introduced it.

A chain is stored as branches (docs/architecture.md, "Chains"): a response's context is, for
each branch it runs through, that branch's items up to a depth: one range of the items index per
branch, in the order (depth, side, position) the model reads them ('input' sorts before
'output'). Nothing is ever copied from one response to the next, and nothing walks the chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.protocol.ids import new_id
from app.storage import DbRow
from app.storage.driver import DriverStatement
from app.storage.tables import items

Item = dict[str, Any]
Side = Literal["input", "output"]

_ID_PREFIX: dict[str, Any] = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "reasoning": "rs",
    "compaction": "cmp",
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


# The contexts of responses: for each, its segments in order (few rows, sorted), and each
# segment's items in the index's order. The nested loop keeps both orders (a subquery with ORDER
# BY is never flattened), so no sort ever touches the items: sorting 20,000 of them costs more
# than reading them. Payloads come as text, decoded here (a driver statement).
CONTEXTS = DriverStatement(
    text("""
    SELECT segment.root, i.id, i.payload::text
    FROM (
        SELECT r.id AS root, s.branch_id, s.depth,
               CASE WHEN s.n = cardinality(r.context_branches) AND :exclude_own_output THEN 'input'
                    ELSE 'output' END AS last_side
        FROM responses r, unnest(r.context_branches, r.context_depths) WITH ORDINALITY AS s(branch_id, depth, n)
        WHERE r.id = ANY(CAST(:response_ids AS text[]))
        ORDER BY r.id, s.n
    ) segment
    CROSS JOIN LATERAL (
        SELECT i.id, i.payload FROM items i
        WHERE i.branch_id = segment.branch_id AND (i.depth, i.side) <= (segment.depth, segment.last_side)
        ORDER BY i.depth, i.side, i.position
    ) i
""")
)


async def contexts(conn: AsyncConnection, response_ids: Sequence[str], *, own_output: bool) -> dict[str, list[Item]]:
    """What the model sees for each response: the chain's inputs and outputs, then its own input
    (and its own output too with `own_output`, as the context a new turn continues from)."""
    found: dict[str, list[Item]] = {response_id: [] for response_id in response_ids}
    parameters = {"response_ids": list(response_ids), "exclude_own_output": not own_output}
    for root, item_id, payload in await CONTEXTS.rows(conn, parameters):
        found[root].append({"id": item_id, **orjson.loads(payload)})
    return found


async def context_items(conn: AsyncConnection, response_id: str, *, own_output: bool = False) -> list[Item]:
    return (await contexts(conn, [response_id], own_output=own_output))[response_id]


# An item's place in every context that holds it.
Key = tuple[int, str, int]  # (depth, side, position)


@dataclass(frozen=True, slots=True)
class Segment:
    """One branch's part of a context: its items deeper than `after_depth`, up to `depth`, and
    at `depth` only its input where that is the response's own turn."""

    branch_id: int
    after_depth: int
    depth: int
    last_side: str

    def holds(self, key: Key) -> bool:
        return self.after_depth < key[0] and key[:2] <= (self.depth, self.last_side)

    def outside(self, low: Key | None, high: Key | None) -> bool:
        """Whether none of its items can lie between the bounds."""
        return (low is not None and self.depth < low[0]) or (high is not None and self.after_depth >= high[0])


def input_segments(response: DbRow) -> list[Segment]:
    """Where the input items of a response (its whole context but its own output) lie."""
    branches: Sequence[int] = response.context_branches
    depths: Sequence[int] = response.context_depths
    last = len(branches) - 1
    return [
        Segment(branch, depths[n - 1] if n else -1, depth, "input" if n == last else "output")
        for n, (branch, depth) in enumerate(zip(branches, depths, strict=True))
    ]


@dataclass(frozen=True, slots=True)
class Page:
    data: list[Item]
    has_more: bool


async def find_input_item(conn: AsyncConnection, response: DbRow, item_id: str) -> Key | None:
    """The key of the item with this id, if it is one of the response's input items."""
    if "\x00" in item_id:  # in no context: Postgres text cannot hold one
        return None
    row = (
        await conn.execute(
            select(items.c.branch_id, items.c.depth, items.c.side, items.c.position).where(
                items.c.id == item_id, items.c.type != "compaction"
            )
        )
    ).one_or_none()
    if row is None:
        return None
    key: Key = (row.depth, row.side, row.position)
    held = any(s.branch_id == row.branch_id and s.holds(key) for s in input_segments(response))
    return key if held else None


async def input_items_page(
    conn: AsyncConnection,
    response: DbRow,
    *,
    order: Literal["asc", "desc"],
    limit: int,
    after: Key | None,
    before: Key | None,
) -> Page:
    """One keyset page of a response's input items: a range read of each branch the page spans,
    from the cursor on (usually one), whatever the chain's length."""
    segments = input_segments(response)
    ascending = order == "asc"
    # The bounds in the context's own order, whichever way the page reads it.
    low, high = (after, before) if ascending else (before, after)
    if not ascending:
        segments.reverse()
    rows: list[DbRow] = []
    for segment in segments:
        if len(rows) > limit:
            break
        if not segment.outside(low, high):
            rows += await _segment_page(conn, segment, ascending, low, high, limit + 1 - len(rows))
    return Page([{"id": r.id, **r.payload} for r in rows[:limit]], has_more=len(rows) > limit)


async def _segment_page(
    conn: AsyncConnection, segment: Segment, ascending: bool, low: Key | None, high: Key | None, limit: int
) -> Sequence[DbRow]:
    # A compaction item is the server's (a sealed summary): input_items never lists one.
    conditions = ["branch_id = :branch_id", "(depth, side) <= (:depth, :last)", "type <> 'compaction'"]
    parameters: dict[str, Any] = {"branch_id": segment.branch_id, "depth": segment.depth, "last": segment.last_side}
    for name, bound, comparison in (("low", low, ">"), ("high", high, "<")):
        if bound is not None:
            conditions.append(f"(depth, side, position) {comparison} (:{name}_depth, :{name}_side, :{name}_position)")
            parameters.update(zip((f"{name}_depth", f"{name}_side", f"{name}_position"), bound, strict=True))
    direction = "ASC" if ascending else "DESC"
    query = (
        f"SELECT id, payload FROM items WHERE {' AND '.join(conditions)} "
        f"ORDER BY depth {direction}, side {direction}, position {direction} LIMIT :limit"
    )
    return (await conn.execute(text(query), {**parameters, "limit": limit})).all()
