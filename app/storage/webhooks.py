"""Webhooks: an account's endpoints, and the outbox of deliveries (design invariant 8).

A background response that ends gets one delivery per endpoint of its account subscribed to
its event, written in the statement that ends it (app/storage/events.py, `announced`), whoever
ends it (a worker, a cancel, the reaper). Deliveries are taken when due by any process (SKIP
LOCKED), leased by pushing their due time past the attempt, and marked delivered, due again
later, or given up.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.protocol.ids import new_id
from app.storage.driver import DriverStatement
from app.storage.tables import webhook_endpoints

EVENT_TYPES = ("response.completed", "response.failed", "response.cancelled", "response.incomplete")


def new_secret() -> str:
    """A signing secret as OpenAI's look, and as the SDK's `unwrap` takes them."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: str
    account: str
    url: str
    events: list[str]
    created_at: datetime


async def add_endpoint(conn: AsyncConnection, account_id: str, url: str, events: Sequence[str]) -> tuple[str, str]:
    """A new endpoint of the account: its id and its secret (shown once)."""
    endpoint_id, secret = new_id("we"), new_secret()
    await conn.execute(
        webhook_endpoints.insert().values(
            id=endpoint_id, account_id=account_id, url=url, events=list(events), secret=secret
        )
    )
    return endpoint_id, secret


_ENDPOINTS = """
    SELECT w.id, a.name, w.url, w.events, w.created_at FROM webhook_endpoints w JOIN accounts a ON a.id = w.account_id
"""


async def list_endpoints(conn: AsyncConnection, account_name: str | None = None) -> list[Endpoint]:
    where, parameters = ("WHERE a.name = :name", {"name": account_name}) if account_name else ("", {})
    rows = await conn.execute(text(f"{_ENDPOINTS} {where} ORDER BY a.name, w.created_at"), parameters)
    return [Endpoint(*row) for row in rows]


async def remove_endpoint(conn: AsyncConnection, endpoint_id: str) -> bool:
    """Removes the endpoint and its deliveries, pending ones too."""
    removed = await conn.execute(delete(webhook_endpoints).where(webhook_endpoints.c.id == endpoint_id))
    return removed.rowcount == 1


async def rotate_secret(conn: AsyncConnection, endpoint_id: str) -> str | None:
    """A new secret for the endpoint (None: no such endpoint); the old one still signs beside it
    for a day (ROTATION_OVERLAP), so receivers can switch without losing a delivery."""
    secret = new_secret()
    rotated = await conn.execute(
        update(webhook_endpoints)
        .where(webhook_endpoints.c.id == endpoint_id)
        .values(previous_secret=webhook_endpoints.c.secret, secret=secret, rotated_at=text("now()"))
    )
    return secret if rotated.rowcount == 1 else None


ROTATION_OVERLAP = "1 day"


@dataclass(frozen=True, slots=True)
class Due:
    """A delivery taken for one attempt."""

    id: str
    endpoint_id: str
    url: str
    payload: str
    secrets: list[str]  # the endpoint's, then its previous one while the rotation overlaps
    attempts: int  # this one included
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Attempted:
    """How an attempt went: delivered, or due again `retry_after_seconds` later, or given up (None)."""

    id: str
    delivered: bool
    status: int | None
    error: str | None
    retry_after_seconds: float | None


# Records the outcomes of attempts that ended, then takes due deliveries, at most `per_endpoint`
# of an endpoint (fewer for those in `rooms`, none of those with no room), and leases them: their
# due time moves past the attempt, so one whose process dies is taken again. One statement: a
# delivery costs the deliverer a round trip, not a transaction. (The take reads the outbox as it
# was before the outcomes, which leaves out nothing: a delivery just attempted is leased.)
_RECORD_AND_TAKE = DriverStatement(
    text(f"""
    WITH recorded AS (
        UPDATE webhook_deliveries d SET
            delivered_at = CASE WHEN a.delivered THEN now() END,
            failed_at = CASE WHEN NOT a.delivered AND a.retry_after IS NULL THEN now() END,
            next_attempt_at = CASE WHEN NOT a.delivered AND a.retry_after IS NOT NULL
                                   THEN now() + make_interval(secs => a.retry_after) ELSE d.next_attempt_at END,
            last_status = a.status,
            last_error = a.error
        FROM unnest(CAST(:ids AS text[]), CAST(:delivered AS bool[]), CAST(:statuses AS int[]),
                    CAST(:errors AS text[]), CAST(:retry_afters AS float8[]))
            AS a(id, delivered, status, error, retry_after)
        -- (one another process ended meanwhile, its lease having lapsed, stays as that one left it)
        WHERE d.id = a.id AND d.delivered_at IS NULL AND d.failed_at IS NULL
    ), rooms AS (
        SELECT * FROM unnest(CAST(:room_endpoints AS text[]), CAST(:rooms AS int[])) AS r(endpoint_id, room)
    ), due AS MATERIALIZED (
        SELECT id FROM (
            SELECT first.id, first.endpoint_id,
                   row_number() OVER (PARTITION BY first.endpoint_id ORDER BY first.next_attempt_at) AS nth
            FROM (
                SELECT id, endpoint_id, next_attempt_at FROM webhook_deliveries
                WHERE delivered_at IS NULL AND failed_at IS NULL AND next_attempt_at <= now()
                  AND endpoint_id NOT IN (SELECT endpoint_id FROM rooms WHERE room <= 0)
                ORDER BY next_attempt_at
                LIMIT :scan
            ) first
        ) ranked
        WHERE nth <= coalesce((SELECT room FROM rooms WHERE rooms.endpoint_id = ranked.endpoint_id), :per_endpoint)
        LIMIT :limit
    ), taken AS (
        UPDATE webhook_deliveries d
        SET attempts = d.attempts + 1, next_attempt_at = now() + CAST(:lease AS interval)
        -- (the lock re-reads a row another process took meanwhile, and its due time leaves it out)
        FROM (
            SELECT id FROM webhook_deliveries
            -- (by primary key: the planner, misjudging a fresh outbox's size, may otherwise join the
            -- whole outbox against `due` row by row)
            WHERE id = ANY(ARRAY(SELECT id FROM due))
              AND next_attempt_at <= now() AND delivered_at IS NULL AND failed_at IS NULL
            FOR UPDATE SKIP LOCKED
        ) locked
        WHERE d.id = locked.id
        RETURNING d.id, d.endpoint_id, d.payload, d.attempts, d.created_at
    ), later AS (
        -- When the next delivery this process could take is due, of those not taken now (those
        -- recorded now are left out too: this statement sees them as they were, leased).
        SELECT extract(epoch FROM min(next_attempt_at) - now())::float8 AS seconds FROM webhook_deliveries
        WHERE delivered_at IS NULL AND failed_at IS NULL
          AND id <> ALL(ARRAY(SELECT id FROM due)) AND id <> ALL(CAST(:ids AS text[]))
          AND endpoint_id NOT IN (SELECT endpoint_id FROM rooms WHERE room <= 0)
    )
    SELECT later.seconds, t.id, t.endpoint_id, w.url, t.payload,
           array_remove(ARRAY[w.secret, CASE WHEN w.rotated_at > now() - interval '{ROTATION_OVERLAP}'
                                             THEN w.previous_secret END], NULL),
           t.attempts, t.created_at
    FROM later LEFT JOIN (taken t JOIN webhook_endpoints w ON w.id = t.endpoint_id) ON true
    ORDER BY t.created_at
""")
)


@dataclass(frozen=True, slots=True)
class Taken:
    due: list[Due]  # taken for an attempt now
    seconds_until_due: float | None  # until the next one this process could take is due (None: none pending)


async def record_and_take(
    conn: AsyncConnection,
    attempted: Sequence[Attempted],
    limit: int,
    per_endpoint: int,
    rooms: Mapping[str, int],
    lease_seconds: float,
) -> Taken:
    """Records `attempted`, then takes at most `limit` due deliveries; `rooms`: the endpoints
    that may take fewer than `per_endpoint` now (0: none)."""
    parameters = {
        "ids": [a.id for a in attempted],
        "delivered": [a.delivered for a in attempted],
        "statuses": [a.status for a in attempted],
        "errors": [None if a.error is None else a.error[:500] for a in attempted],
        "retry_afters": [a.retry_after_seconds for a in attempted],
        "limit": limit,
        "scan": limit * 4,
        "per_endpoint": per_endpoint,
        "room_endpoints": list(rooms),
        "rooms": list(rooms.values()),
        "lease": timedelta(seconds=lease_seconds),
    }
    rows = await _RECORD_AND_TAKE.rows(conn, parameters)
    seconds = rows[0][0]
    retries = [a.retry_after_seconds for a in attempted if not a.delivered and a.retry_after_seconds is not None]
    if retries:
        seconds = min(retries) if seconds is None else min(seconds, *retries)
    return Taken([Due(*row[1:]) for row in rows if row[1] is not None], seconds)


async def oldest_pending_seconds(conn: AsyncConnection) -> float:
    """How long the oldest delivery still pending has waited (0: none)."""
    seconds = await conn.scalar(
        select(text("extract(epoch FROM now() - min(created_at))")).select_from(
            text("webhook_deliveries WHERE delivered_at IS NULL AND failed_at IS NULL")
        )
    )
    return float(seconds or 0.0)
