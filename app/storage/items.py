"""Items: every input and output item stored once, under the response that introduced it.

A chain is stored as branches (docs/architecture.md, "Chains"): a response's context is, for
each branch it runs through, that branch's items up to a depth: one range of the items index per
branch, in the order (depth, side, position) the model reads them ('input' sorts before
'output'). Nothing is ever copied from one response to the next, and nothing walks the chain.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.protocol.ids import new_id
from app.protocol.shapes import Item
from app.storage import DbRow
from app.storage.driver import DriverStatement
from app.storage.tables import items, responses

Side = Literal["input", "output"]

_ID_PREFIX: dict[str, Any] = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "reasoning": "rs",
    "compaction": "cmp",
    "mcp_call": "mcp",
    "mcp_list_tools": "mcpl",
    "mcp_approval_request": "mcpr",
    "mcp_approval_response": "mcpa",
    "file_search_call": "fs",
    "web_search_call": "ws",
    "shell_call": "sh",
    "shell_call_output": "sho",
    "local_shell_call": "lsh",
    "local_shell_call_output": "lsho",
    "apply_patch_call": "apc",
    "apply_patch_call_output": "apco",
    "tool_search_call": "tsc",
    "tool_search_output": "tso",
    "additional_tools": "adt",
}


def with_new_ids(items: Sequence[Item]) -> list[Item]:
    """Items as they are stored: each with a new id of ours. A replayed `mcp_approval_request`
    comes with its own, which an `mcp_approval_response` beside it may name: that answer then
    names the new one."""
    renamed: dict[str, str] = {}
    stored = []
    for item in items:
        fresh = new_id(_ID_PREFIX.get(item["type"], "msg"))
        if item.get("id") is not None:
            renamed[item["id"]] = fresh
        stored.append({**item, "id": fresh})
    for item in stored:
        if item["type"] == "mcp_approval_response" and item["approval_request_id"] in renamed:
            item["approval_request_id"] = renamed[item["approval_request_id"]]
    return stored


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


# An item's place in every context that holds it.
Key = tuple[int, str, int]  # (depth, side, position)
_BEFORE_ALL: Key = (-1, "", -1)


@dataclass(frozen=True, slots=True)
class Span:
    """A branch's part of a context: its items up to `last` (a depth and side), included."""

    branch_id: int
    last: tuple[int, str]


def spans(branches: Sequence[int], depths: Sequence[int], *, own_output: bool) -> list[Span]:
    """The spans of a response's context, from its path: each branch up to its depth's output,
    and the last one up to the response's own input (or output, with `own_output`)."""
    last = len(branches) - 1
    return [
        Span(branch, (depth, "output" if own_output or n < last else "input"))
        for n, (branch, depth) in enumerate(zip(branches, depths, strict=True))
    ]


@dataclass(frozen=True, slots=True)
class BranchTail:
    """A branch's items after a place, up to a depth and side: decoded, with their places and the
    length of their JSON; `counted`: how many items the branch has up to that place."""

    items: list[Item]
    keys: list[Key]
    size: int
    counted: int = 0

    def upto(self, last: tuple[int, str]) -> list[Item]:
        """Its items up to a depth and side, included."""
        return self.items[: bisect.bisect_right(self.keys, (*last, 2**31))]

    def then(self, tail: BranchTail) -> BranchTail:
        """These items, then the tail's (new lists: these may be in use)."""
        if not tail.items:
            return self
        return BranchTail(self.items + tail.items, self.keys + tail.keys, self.size + tail.size)


# Each branch's items after a place and up to a depth and side, in the index's order (the nested
# loop keeps it: no sort ever touches the items, and sorting 20,000 of them costs more than
# reading them), and, where asked, how many it has up to that place: counted once per branch (a
# materialized CTE; in the select list the planner would count again for every item read).
# Payloads come as text, decoded here (a driver statement).
_BRANCH_TAILS = DriverStatement(
    text("""
    WITH b AS MATERIALIZED (
        SELECT b.*, CASE WHEN b.count THEN (
                   SELECT count(*) FROM items c
                   WHERE c.branch_id = b.branch_id
                     AND (c.depth, c.side, c.position) <= (b.after_depth, b.after_side, b.after_position)
               ) END AS counted
        FROM unnest(CAST(:branches AS bigint[]), CAST(:after_depths AS int[]), CAST(:after_sides AS text[]),
                    CAST(:after_positions AS int[]), CAST(:last_depths AS int[]), CAST(:last_sides AS text[]),
                    CAST(:count AS bool[]))
            WITH ORDINALITY AS b(branch_id, after_depth, after_side, after_position, last_depth, last_side, count, ord)
    )
    SELECT b.ord, b.counted, i.id, i.depth, i.side, i.position, i.payload::text
    FROM b
    LEFT JOIN LATERAL (
        SELECT i.id, i.depth, i.side, i.position, i.payload FROM items i
        WHERE i.branch_id = b.branch_id
          AND (i.depth, i.side, i.position) > (b.after_depth, b.after_side, b.after_position)
          AND (i.depth, i.side) <= (b.last_depth, b.last_side)
        ORDER BY i.depth, i.side, i.position
    ) i ON true
""")
)


async def branch_tails(
    conn: AsyncConnection, known: Mapping[int, Key], wanted: Mapping[int, tuple[int, str]]
) -> dict[int, BranchTail]:
    """For each branch in `wanted`, its items after the place `known` gives for it (else from its
    start) up to the depth and side wanted, and, for those in `known`, how many items it has up
    to that place: all with one statement."""
    branches = list(wanted)
    after = [known.get(b, _BEFORE_ALL) for b in branches]
    parameters = {
        "branches": branches,
        "after_depths": [a[0] for a in after],
        "after_sides": [a[1] for a in after],
        "after_positions": [a[2] for a in after],
        "last_depths": [wanted[b][0] for b in branches],
        "last_sides": [wanted[b][1] for b in branches],
        "count": [b in known for b in branches],
    }
    found: dict[int, tuple[list[Item], list[Key], list[int]]] = {}
    counts: dict[int, int] = {}
    for ord_, counted, item_id, depth, side, position, payload in await _BRANCH_TAILS.rows(conn, parameters):
        branch = branches[ord_ - 1]
        if branch not in found:
            found[branch], counts[branch] = ([], [], []), int(counted or 0)
        if item_id is not None:
            decoded, keys, sizes = found[branch]
            item = orjson.loads(payload)
            item["id"] = item_id  # (its place among the keys means nothing to a context)
            decoded.append(item)
            keys.append((depth, side, position))
            sizes.append(len(payload))
    return {b: BranchTail(i, k, sum(sizes), counts[b]) for b, (i, k, sizes) in found.items()}


def widest(paths: Mapping[str, Sequence[Span]]) -> dict[int, tuple[int, str]]:
    """Each branch the paths run through, up to the deepest place any of them needs of it."""
    wanted: dict[int, tuple[int, str]] = {}
    for path in paths.values():
        for span in path:
            wanted[span.branch_id] = max(wanted.get(span.branch_id, span.last), span.last)
    return wanted


def assembled(paths: Mapping[str, Sequence[Span]], branches: Mapping[int, BranchTail]) -> dict[str, list[Item]]:
    """Each path's items, from the branches' (read at least as far as the path needs)."""
    return {
        response_id: [item for span in path for item in branches[span.branch_id].upto(span.last)]
        for response_id, path in paths.items()
    }


async def read_contexts(conn: AsyncConnection, paths: Mapping[str, Sequence[Span]]) -> dict[str, list[Item]]:
    """Each response's context: the items of the spans of the branches it runs through, in order."""
    wanted = widest(paths)
    return assembled(paths, await branch_tails(conn, {}, wanted) if wanted else {})


async def contexts(conn: AsyncConnection, response_ids: Sequence[str], *, own_output: bool) -> dict[str, list[Item]]:
    """What the model sees for each response: the chain's inputs and outputs, then its own input
    (and its own output too with `own_output`, as the context a new turn continues from)."""
    rows = await conn.execute(
        select(responses.c.id, responses.c.context_branches, responses.c.context_depths).where(
            responses.c.id.in_(list(response_ids))
        )
    )
    paths = {r.id: spans(r.context_branches, r.context_depths, own_output=own_output) for r in rows}
    found = await read_contexts(conn, paths)
    return {response_id: found.get(response_id, []) for response_id in response_ids}


async def context_items(conn: AsyncConnection, response_id: str, *, own_output: bool = False) -> list[Item]:
    return (await contexts(conn, [response_id], own_output=own_output))[response_id]


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


async def held_by(conn: AsyncConnection, account_id: str, item_ids: Sequence[str]) -> dict[str, Item]:
    """The items of these ids that the account holds (its stored responses' input and output
    items, its conversations' own items), as stored: without their ids."""
    rows = await conn.execute(
        text("""
        SELECT i.id, i.payload::text AS payload FROM items i JOIN responses r ON r.id = i.response_id
        WHERE i.id = ANY(:ids) AND r.account_id = :account_id
        UNION ALL
        SELECT ci.item_id, ci.payload::text FROM conversation_items ci JOIN conversations c ON c.id = ci.conversation_id
        WHERE ci.item_id = ANY(:ids) AND ci.payload IS NOT NULL AND c.account_id = :account_id
        """),
        {"ids": list(item_ids), "account_id": account_id},
    )
    return {row.id: orjson.loads(row.payload) for row in rows}
