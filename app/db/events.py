"""The durable event log: `response_events`, numbered per response from 0 without gaps.

Sequence numbers are allocated from `responses.next_sequence_number` by an UPDATE that only
matches active responses. That one statement both serialises writers of the same response (it
takes the row lock) and drops late events of a response that already ended: nothing can follow
a terminal event (design invariants 2 and 3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import response_events

Event = dict[str, Any]
TERMINAL_EVENT_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed", "response.cancelled"})


async def allocate(conn: AsyncConnection, counts: Mapping[str, int]) -> dict[str, int]:
    """Reserves `counts[id]` sequence numbers for each active response; returns each one's first.
    Responses that are no longer active are absent from the result."""
    if not counts:
        return {}
    ids, ns = zip(*sorted(counts.items()), strict=True)  # sorted: a fixed lock order, no deadlocks
    rows = await conn.execute(
        text("""
            UPDATE responses r SET next_sequence_number = r.next_sequence_number + v.n
            FROM unnest(CAST(:ids AS text[]), CAST(:ns AS int[])) AS v(id, n)
            WHERE r.id = v.id AND r.status IN ('queued', 'in_progress')
            RETURNING r.id, r.next_sequence_number - v.n AS first
        """).bindparams(bindparam("ids", list(ids)), bindparam("ns", list(ns))),
    )
    return {r.id: r.first for r in rows}


def stamp(events: Sequence[Event], first: int) -> list[Event]:
    """The events with their sequence numbers (each a new dict: callers' events stay unnumbered)."""
    return [{**event, "sequence_number": first + i} for i, event in enumerate(events)]


async def insert_rows(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Inserts stamped events of any number of responses in one statement."""
    if rows:
        await conn.execute(insert(response_events), list(rows))


def rows_of(response_id: str, events: Sequence[Event]) -> list[dict[str, Any]]:
    return [
        {"response_id": response_id, "sequence_number": e["sequence_number"], "type": e["type"], "payload": e}
        for e in events
    ]


async def append(conn: AsyncConnection, response_id: str, events: Sequence[Event]) -> list[Event]:
    """Allocates and inserts in one go; [] when the response is no longer active."""
    first = (await allocate(conn, {response_id: len(events)})).get(response_id)
    if first is None:
        return []
    stamped = stamp(events, first)
    await insert_rows(conn, rows_of(response_id, stamped))
    return stamped


async def events_after(
    conn: AsyncConnection,
    response_id: str,
    after: int,
    limit: int = 1000,
) -> list[Event]:
    rows = await conn.execute(
        select(response_events.c.payload)
        .where(response_events.c.response_id == response_id, response_events.c.sequence_number > after)
        .order_by(response_events.c.sequence_number)
        .limit(limit)
    )
    return [r.payload for r in rows]
