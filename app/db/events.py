"""The durable event log: `response_events`, numbered per response from 0 without gaps.

Sequence numbers are allocated from `responses.next_sequence_number` by an UPDATE that only
matches active responses, in the same statement that inserts the events. It serialises writers
of the same response (it takes the row lock) and drops late events of a response that already
ended: nothing can follow a terminal event (design invariants 2 and 3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Text, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import response_events
from app.streaming import wire
from app.streaming.wire import WireEvent

Event = dict[str, Any]
TERMINAL_EVENT_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed", "response.cancelled"})


# One statement numbers and inserts the events of many responses: atomic without a transaction
# around it (no BEGIN/COMMIT round trips), and a number is never allocated without its event.
_APPEND = text("""
    WITH batch AS (
        SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:positions AS int[]), CAST(:types AS text[]),
                             CAST(:payloads AS jsonb[])) AS e(response_id, position, type, payload)
    ), counts AS (
        SELECT response_id, count(*)::int AS n FROM batch GROUP BY response_id
    ), allocated AS (
        UPDATE responses r SET next_sequence_number = r.next_sequence_number + c.n
        FROM counts c
        WHERE r.id = c.response_id AND r.status IN ('queued', 'in_progress')
        RETURNING r.id, r.next_sequence_number - c.n AS first
    ), inserted AS (
        INSERT INTO response_events (response_id, sequence_number, type, payload)
        SELECT b.response_id, a.first + b.position, b.type,
               jsonb_set(b.payload, '{sequence_number}', to_jsonb(a.first + b.position))
        FROM batch b JOIN allocated a ON a.id = b.response_id
    )
    SELECT id, first FROM allocated
""")


async def append_many(
    conn: AsyncConnection, events_by_response: Mapping[str, Sequence[Event]]
) -> dict[str, list[WireEvent]]:
    """Numbers and stores the events of many responses; returns each active response's events,
    numbered and encoded. Events of responses no longer active are dropped."""
    ids: list[str] = []
    positions: list[int] = []
    types: list[str] = []
    encoded: dict[str, list[str]] = {}
    for response_id, events in events_by_response.items():
        encoded[response_id] = [wire.encode(event) for event in events]
        ids += [response_id] * len(events)
        positions += range(len(events))
        types += [event["type"] for event in events]
    if not ids:
        return {}
    payloads = [text for texts in encoded.values() for text in texts]
    rows = await conn.execute(_APPEND, {"ids": ids, "positions": positions, "types": types, "payloads": payloads})
    return {r.id: wire.numbered(events_by_response[r.id], encoded[r.id], r.first) for r in rows}


async def append(conn: AsyncConnection, response_id: str, events: Sequence[Event]) -> list[WireEvent]:
    """Numbers and stores one response's events; [] when the response is no longer active."""
    return (await append_many(conn, {response_id: events})).get(response_id, [])


async def events_after(conn: AsyncConnection, response_id: str, after: int, limit: int | None) -> list[WireEvent]:
    """Events after sequence number `after`, in order, at most `limit` (None: all), as stored
    text: followers pass it on without decoding it."""
    rows = await conn.execute(
        select(response_events.c.sequence_number, response_events.c.type, response_events.c.payload.cast(Text))
        .where(response_events.c.response_id == response_id, response_events.c.sequence_number > after)
        .order_by(response_events.c.sequence_number)
        .limit(limit)
    )
    return [WireEvent(number, event_type, payload) for number, event_type, payload in rows]
