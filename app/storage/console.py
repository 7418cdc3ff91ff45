"""What the operator's console reads (app/console/): every account's responses, filtered and paged
newest first by keyset (`(created_at, id)`, as fast on the millionth row as on the first), and one
response whole: its row, its items, the responses continuing it, and its log's whole events with
when each was committed (its timeline)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select, text, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from app.storage import DbRow
from app.storage.tables import accounts, items, response_steers, responses

PAGE_SIZE = 50


@dataclass(frozen=True, slots=True)
class ResponseFilters:
    account: str | None = None  # an account's name or id
    model: str | None = None
    status: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    metadata: tuple[str, str] | None = None  # a key and its value
    id_prefix: str | None = None
    before: tuple[datetime, str] | None = None  # the cursor: the last row of the page before


@dataclass(frozen=True, slots=True)
class ListedResponse:
    id: str
    account: str
    model: str
    status: str
    created_at: datetime
    completed_at: datetime | None
    usage: dict[str, Any] | None
    metadata: dict[str, str]
    background: bool


@dataclass(frozen=True, slots=True)
class TimedEvent:
    sequence_number: int
    type: str
    committed_at: datetime
    item: dict[str, Any] | None = None  # an output item's, as it was opened or closed


@dataclass(frozen=True, slots=True)
class ResponseDetail:
    row: DbRow
    account: str
    input_items: list[dict[str, Any]]
    output_items: list[dict[str, Any]]
    continued_by: list[str]
    events: list[TimedEvent] = field(default_factory=list)


async def list_responses(
    conn: AsyncConnection, filters: ResponseFilters, limit: int = PAGE_SIZE
) -> tuple[list[ListedResponse], tuple[datetime, str] | None]:
    """A page, newest first, and the cursor of the next (None: no more)."""
    query = (
        select(
            responses.c.id,
            accounts.c.name.label("account"),
            responses.c.model,
            responses.c.status,
            responses.c.created_at,
            responses.c.completed_at,
            responses.c.usage,
            responses.c.metadata,
            responses.c.background,
        )
        .join(accounts, accounts.c.id == responses.c.account_id)
        .where(*_conditions(filters))
        .order_by(responses.c.created_at.desc(), responses.c.id.desc())
        .limit(limit + 1)
    )
    rows = (await conn.execute(query)).all()
    listed = [ListedResponse(**row._mapping) for row in rows[:limit]]
    more = len(rows) > limit
    return listed, (listed[-1].created_at, listed[-1].id) if more else None


def _conditions(filters: ResponseFilters) -> list[Any]:
    conditions: list[Any] = []
    if filters.account:
        conditions.append((accounts.c.name == filters.account) | (accounts.c.id == filters.account))
    if filters.model:
        conditions.append(responses.c.model == filters.model)
    if filters.status:
        conditions.append(responses.c.status == filters.status)
    if filters.created_from:
        conditions.append(responses.c.created_at >= filters.created_from)
    if filters.created_to:
        conditions.append(responses.c.created_at < filters.created_to)
    if filters.metadata:
        key, value = filters.metadata
        conditions.append(responses.c.metadata.contains({key: value}))
    if filters.id_prefix:
        escaped = filters.id_prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        conditions.append(responses.c.id.like(escaped + "%", escape="\\"))
    if filters.before:
        conditions.append(tuple_(responses.c.created_at, responses.c.id) < tuple_(*filters.before))
    return conditions


async def response_detail(conn: AsyncConnection, response_id: str) -> ResponseDetail | None:
    row = (await conn.execute(select(responses).where(responses.c.id == response_id))).one_or_none()
    if row is None:
        return None
    account = await conn.scalar(select(accounts.c.name).where(accounts.c.id == row.account_id))
    own = (
        await conn.execute(
            select(items.c.id, items.c.side, items.c.payload)
            .where(items.c.response_id == response_id)
            .order_by(items.c.side, items.c.position)
        )
    ).all()
    continued_by = (
        await conn.scalars(
            select(responses.c.id)
            .where(responses.c.previous_response_id == response_id)
            .order_by(responses.c.created_at)
            .limit(PAGE_SIZE)
        )
    ).all()
    return ResponseDetail(
        row=row,
        account=str(account),
        input_items=[{"id": r.id, **r.payload} for r in own if r.side == "input"],
        output_items=[{"id": r.id, **r.payload} for r in own if r.side == "output"],
        continued_by=list(continued_by),
        events=await timed_events(conn, row.log_key),
    )


# The log's whole events with their commit times (deltas carry none): small ones but an output
# item's opening and closing, read whole for the item they name.
_TIMED_EVENTS = text("""
    SELECT sequence_number, type, committed_at,
           CASE WHEN type IN ('response.output_item.added', 'response.output_item.done') THEN payload END AS payload
    FROM event_log WHERE log_key = :log_key AND committed_at IS NOT NULL
    ORDER BY sequence_number
""")


async def timed_events(conn: AsyncConnection, log_key: int) -> list[TimedEvent]:
    rows: Sequence[DbRow] = (await conn.execute(_TIMED_EVENTS, {"log_key": log_key})).all()
    timed = []
    for row in rows:
        item = None
        if row.payload is not None:
            try:
                item = json.loads(row.payload).get("item")
            except ValueError:  # a closing event whose output was left out (its text is in the items)
                item = None
        timed.append(TimedEvent(row.sequence_number, row.type, row.committed_at, item))
    return timed


async def steered_at(conn: AsyncConnection, response_id: str) -> list[datetime]:
    """When a WebSocket client steered the response (its steers, as stored)."""
    query = select(response_steers.c.created_at).where(response_steers.c.response_id == response_id)
    return list((await conn.scalars(query.order_by(response_steers.c.created_at))).all())
