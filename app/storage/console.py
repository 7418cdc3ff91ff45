"""What the operator's console reads (app/console/): every account's responses, filtered and paged
newest first by keyset (`(created_at, id)`, as fast on the millionth row as on the first), and one
response whole: its row, its items, the responses continuing it, and its log's whole events with
when each was committed (its timeline)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import Select, func, select, text, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from app.storage import DbRow
from app.storage import conversations as conversations_db
from app.storage.tables import accounts, api_keys, conversations, items, response_steers, responses

PAGE_SIZE = 50
ITEMS_SHOWN = 200  # of a conversation's items, on its page


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
        _listed()
        .where(*_conditions(filters))
        .order_by(responses.c.created_at.desc(), responses.c.id.desc())
        .limit(limit + 1)
    )
    rows = (await conn.execute(query)).all()
    listed = [ListedResponse(**row._mapping) for row in rows[:limit]]
    more = len(rows) > limit
    return listed, (listed[-1].created_at, listed[-1].id) if more else None


def _listed() -> Select[Any]:
    """Responses as a list shows them (ListedResponse), with their account's name."""
    return select(
        responses.c.id,
        accounts.c.name.label("account"),
        responses.c.model,
        responses.c.status,
        responses.c.created_at,
        responses.c.completed_at,
        responses.c.usage,
        responses.c.metadata,
        responses.c.background,
    ).join(accounts, accounts.c.id == responses.c.account_id)


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
        # (the second condition lets the partial GIN index of non-empty metadata serve the first)
        conditions += [responses.c.metadata.contains({key: value}), responses.c.metadata != text("'{}'::jsonb")]
    if filters.id_prefix:
        # A range of the primary key (read through it, as LIKE is not under every collation),
        # then the prefix itself.
        prefix = filters.id_prefix
        conditions += [responses.c.id >= prefix, func.starts_with(responses.c.id, prefix)]
        if ord(prefix[-1]) < 0x10FFFF:
            conditions.append(responses.c.id < prefix[:-1] + chr(ord(prefix[-1]) + 1))
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
            .where(responses.c.context_parent_id == response_id)  # (its previous_response_id, indexed)
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


# Responses queued or running now per account (the index of active responses by account).
_ACTIVE_BY_ACCOUNT = text("""
    SELECT account_id, count(*) AS n FROM responses WHERE status IN ('queued', 'in_progress') GROUP BY account_id
""")


async def active_by_account(conn: AsyncConnection) -> dict[str, int]:
    return {row.account_id: int(row.n) for row in await conn.execute(_ACTIVE_BY_ACCOUNT)}


async def account_row(conn: AsyncConnection, account_id: str) -> DbRow | None:
    return (await conn.execute(select(accounts).where(accounts.c.id == account_id))).one_or_none()


async def account_keys(conn: AsyncConnection, account_id: str) -> list[DbRow]:
    query = select(api_keys).where(api_keys.c.account_id == account_id).order_by(api_keys.c.created_at.desc())
    return list((await conn.execute(query)).all())


@dataclass(frozen=True, slots=True)
class DayUsage:
    day: date
    responses: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int


# An account's responses and tokens per day (UTC) of creation, over its (account_id, created_at)
# index: the days asked for only.
_USAGE_BY_DAY = text("""
    SELECT (created_at AT TIME ZONE 'UTC')::date AS day, count(*) AS responses,
           coalesce(sum((usage ->> 'input_tokens')::bigint), 0) AS input_tokens,
           coalesce(sum((usage -> 'input_tokens_details' ->> 'cached_tokens')::bigint), 0) AS cached_tokens,
           coalesce(sum((usage ->> 'output_tokens')::bigint), 0) AS output_tokens
    FROM responses
    WHERE account_id = :account_id
      AND created_at >= ((now() AT TIME ZONE 'UTC')::date - CAST(:days AS int) + 1)::timestamp AT TIME ZONE 'UTC'
    GROUP BY 1 ORDER BY 1
""")


async def usage_by_day(conn: AsyncConnection, account_id: str, days: int) -> list[DayUsage]:
    """Every one of the last `days` days, oldest first, those without a response at zero."""
    rows = {row.day: row for row in await conn.execute(_USAGE_BY_DAY, {"account_id": account_id, "days": days})}
    today = (await conn.scalar(text("SELECT (now() AT TIME ZONE 'UTC')::date"))) or date.today()
    shown = []
    for back in range(days - 1, -1, -1):
        day = today - timedelta(days=back)
        row = rows.get(day)
        counts = (row.responses, row.input_tokens, row.cached_tokens, row.output_tokens) if row else (0, 0, 0, 0)
        shown.append(DayUsage(day, *(int(n) for n in counts)))
    return shown


@dataclass(frozen=True, slots=True)
class MinuteFigures:
    minute: datetime
    by_status: dict[str, int]  # responses created that minute, by their status now
    output_tokens: int  # of the responses created that minute (read by the index on creation)
    first_output_ms: list[float]  # creation to first output, of that minute's responses (sampled)

    @property
    def label(self) -> str:
        return self.minute.strftime("%H:%M UTC")


# The last hour, minute by minute, from the responses themselves (what /metrics exports,
# without a time-series store): created by status, their output tokens, and the time from a
# response's creation to its first output item's commit, for the latest FIRST_OUTPUT_SAMPLE.
FIRST_OUTPUT_SAMPLE = 2000
_LAST_HOUR = text("""
    SELECT date_trunc('minute', created_at) AS minute, status, count(*) AS n
    FROM responses WHERE created_at >= now() - interval '1 hour'
    GROUP BY 1, 2
""")
_OUTPUT_LAST_HOUR = text("""
    SELECT date_trunc('minute', created_at) AS minute, coalesce(sum((usage ->> 'output_tokens')::bigint), 0) AS n
    FROM responses WHERE created_at >= now() - interval '1 hour'
    GROUP BY 1
""")
_FIRST_OUTPUTS = text("""
    SELECT date_trunc('minute', r.created_at) AS minute,
           extract(epoch FROM f.committed_at - r.created_at) * 1000 AS ms
    FROM (SELECT id, created_at, log_key FROM responses WHERE created_at >= now() - interval '1 hour'
          ORDER BY created_at DESC LIMIT :sample) r
    CROSS JOIN LATERAL (
        SELECT committed_at FROM event_log e
        WHERE e.log_key = r.log_key AND e.type = 'response.output_item.added' AND e.committed_at IS NOT NULL
        ORDER BY e.sequence_number LIMIT 1
    ) f
""")


async def last_hour(conn: AsyncConnection) -> list[MinuteFigures]:
    now = await conn.scalar(text("SELECT date_trunc('minute', now())"))
    assert isinstance(now, datetime)
    minutes = [now - timedelta(minutes=back) for back in range(59, -1, -1)]
    by_status: dict[datetime, dict[str, int]] = {minute: {} for minute in minutes}
    for row in await conn.execute(_LAST_HOUR):
        by_status.setdefault(row.minute, {})[row.status] = int(row.n)
    ended = {row.minute: int(row.n) for row in await conn.execute(_OUTPUT_LAST_HOUR)}
    firsts: dict[datetime, list[float]] = {}
    for row in await conn.execute(_FIRST_OUTPUTS, {"sample": FIRST_OUTPUT_SAMPLE}):
        firsts.setdefault(row.minute, []).append(float(row.ms))
    return [MinuteFigures(m, by_status.get(m, {}), ended.get(m, 0), firsts.get(m, [])) for m in minutes]


_QUEUES = text("SELECT * FROM queue_health ORDER BY model")
_WEBHOOKS_FAILING = text("""
    SELECT e.id, a.name AS account, e.url, count(*) AS pending, max(d.attempts) AS attempts,
           min(d.created_at) AS oldest, (array_agg(d.last_error ORDER BY d.created_at DESC))[1] AS last_error
    FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id JOIN accounts a ON a.id = e.account_id
    WHERE d.delivered_at IS NULL AND d.attempts > 0
    GROUP BY e.id, a.name, e.url ORDER BY min(d.created_at)
    LIMIT 50
""")


# What each worker runs now (the index of active responses), its earliest-claimed first.
_RUNNING_BY_WORKER = text("""
    SELECT worker_id, array_agg(id ORDER BY started_at) AS ids
    FROM responses WHERE status = 'in_progress' AND worker_id IS NOT NULL
    GROUP BY worker_id
""")


async def running_by_worker(conn: AsyncConnection) -> dict[str, list[str]]:
    return {row.worker_id: list(row.ids) for row in await conn.execute(_RUNNING_BY_WORKER)}


async def queues(conn: AsyncConnection) -> list[DbRow]:
    return list((await conn.execute(_QUEUES)).all())


async def webhooks_failing(conn: AsyncConnection) -> list[DbRow]:
    return list((await conn.execute(_WEBHOOKS_FAILING)).all())


@dataclass(frozen=True, slots=True)
class ConversationDetail:
    id: str
    account: str
    account_id: str
    created_at: datetime
    metadata: dict[str, str]
    items: list[dict[str, Any]]
    more_items: bool
    responses: list[ListedResponse]


async def conversation_detail(conn: AsyncConnection, conversation_id: str) -> ConversationDetail | None:
    """The conversation, its first ITEMS_SHOWN items in order, and the responses made in it, newest first."""
    row = (
        await conn.execute(
            select(conversations, accounts.c.name.label("account"))
            .join(accounts, accounts.c.id == conversations.c.account_id)
            .where(conversations.c.id == conversation_id)
        )
    ).one_or_none()
    if row is None:
        return None
    page = await conversations_db.items_page(conn, conversation_id, order="asc", limit=ITEMS_SHOWN, after=None)
    made_in = await conn.execute(
        _listed()
        .where(responses.c.conversation_id == conversation_id)
        .order_by(responses.c.created_at.desc())
        .limit(PAGE_SIZE)
    )
    return ConversationDetail(
        row.id,
        row.account,
        row.account_id,
        row.created_at,
        row.metadata or {},
        page.data,
        page.has_more,
        [ListedResponse(**r._mapping) for r in made_in],
    )
