"""The durable event log: `event_log`, numbered per response from 0 without gaps, read
through the `response_events` view as it was streamed.

Sequence numbers are allocated from `responses.next_sequence_number` by an UPDATE that only
matches active responses, in the same statement that inserts the events. It serialises writers
of the same response (it takes the row lock) and drops late events of a response that already
ended: nothing can follow a terminal event (design invariants 2 and 3).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.protocol import accumulate, encoding
from app.protocol.encoding import WireEvent
from app.protocol.vocabulary import TERMINAL_STATUSES
from app.storage import event_templates, output_refs
from app.storage import items as items_db
from app.storage import webhooks as webhooks_db
from app.storage.driver import DriverStatement
from app.storage.responses import Outcome
from app.storage.tables import output_snapshots

Event = dict[str, Any]


# The deliveries of the background responses ended in the statement below.
ANNOUNCING = webhooks_db.announced(
    "(SELECT a.id, a.account_id, a.background, f.status FROM allocated a JOIN endings f ON f.response_id = a.id"
    " WHERE a.ended) ended"
)

# One statement numbers and inserts the events of many responses and ends those that end in
# the batch (terminal status, usage, output items): atomic without a transaction around it (no
# BEGIN/COMMIT round trips), a number is never allocated without its event, and a terminal
# status never commits without its terminal event. Only active responses take events or end:
# the UPDATE is the compare-and-set of design invariant 3, and late events are dropped.
_APPEND = DriverStatement(
    text(
        ANNOUNCING.join(
            """
    WITH batch AS (
        SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:positions AS int[]), CAST(:types AS text[]),
                             CAST(:heads AS text[]), CAST(:bodies AS text[]), CAST(:tails AS text[]),
                             CAST(:templates AS int[]), CAST(:output_ats AS int[]), CAST(:output_paths AS text[]))
            AS e(response_id, position, type, head, body, tail, template, output_at, output_path)
    ), counts AS (
        SELECT response_id, count(*)::int AS n FROM batch GROUP BY response_id
    ), endings AS (
        SELECT * FROM unnest(CAST(:end_ids AS text[]), CAST(:end_statuses AS text[]), CAST(:end_usages AS jsonb[]),
                             CAST(:end_errors AS jsonb[]), CAST(:end_incomplete AS jsonb[]),
                             CAST(:end_times AS float8[]))
            AS f(response_id, status, usage, error, incomplete_details, completed_epoch)
    ), allocated AS (
        UPDATE responses r SET
            next_sequence_number = r.next_sequence_number + c.n,
            status = coalesce(f.status, r.status),
            usage = CASE WHEN f.response_id IS NULL THEN r.usage ELSE f.usage END,
            error = CASE WHEN f.response_id IS NULL THEN r.error ELSE f.error END,
            incomplete_details = CASE WHEN f.response_id IS NULL THEN r.incomplete_details
                                      ELSE f.incomplete_details END,
            completed_at = CASE WHEN f.response_id IS NULL THEN r.completed_at
                                ELSE to_timestamp(f.completed_epoch) END,
            lease_expires_at = CASE WHEN f.response_id IS NULL THEN r.lease_expires_at END
        FROM counts c LEFT JOIN endings f ON f.response_id = c.response_id
        WHERE r.id = c.response_id AND r.status IN ('queued', 'in_progress')
          -- A worker writes only what it still owns: not a response handed over or reaped while
          -- it was stalled, which another worker may be continuing.
          AND (CAST(:worker_id AS text) IS NULL OR r.worker_id = :worker_id)
        RETURNING r.id, r.next_sequence_number - c.n AS first, f.response_id IS NOT NULL AS ended,
                  r.context_branches[cardinality(r.context_branches)] AS branch_id, r.chain_depth,
                  r.account_id, r.background, r.log_key
    ), announced AS (
        -- A background response that ends tells its account's webhook endpoints (invariant 8):
        -- here, so that an ended response always has its deliveries and no other has any.
        {announce}
    ), numbered AS (
        SELECT a.log_key, a.first + b.position AS sequence_number, b.*
        FROM batch b JOIN allocated a ON a.id = b.response_id
    ), new_templates AS (
        INSERT INTO event_templates (log_key, id, type, prefix, suffix)
        SELECT DISTINCT ON (log_key, template) log_key, template, type, head, tail
        FROM numbered WHERE template IS NOT NULL
        ON CONFLICT DO NOTHING
        RETURNING log_key, id, type, prefix, suffix
    ), inserted AS (
        -- A delta whose template is exactly its own is stored as its text alone
        -- (app/storage/event_templates.py); any other event as its JSON text with its number
        -- spliced in, as encoding.numbered does for the followers: a replay sends the very text
        -- they got live.
        INSERT INTO event_log (log_key, sequence_number, template, output_at, type, payload, output_path)
        SELECT n.log_key, n.sequence_number, CASE WHEN k.fits THEN n.template END, n.output_at,
               CASE WHEN NOT k.fits THEN n.type END,
               CASE WHEN k.fits THEN n.body
                    ELSE n.head || n.body || n.tail || ',"sequence_number":' || n.sequence_number || '}' END,
               string_to_array(n.output_path, ',')
        FROM numbered n
        LEFT JOIN event_templates t ON n.template IS NOT NULL AND t.log_key = n.log_key AND t.id = n.template
        LEFT JOIN new_templates m ON m.log_key = n.log_key AND m.id = n.template
        CROSS JOIN LATERAL (
            SELECT coalesce((t.type, t.prefix, t.suffix) = (n.type, n.head, n.tail),
                            (m.type, m.prefix, m.suffix) = (n.type, n.head, n.tail), false) AS fits
        ) k
    ), outputs AS (
        INSERT INTO items (id, response_id, side, position, type, payload, branch_id, depth)
        SELECT o.id, o.response_id, 'output', o.position, o.type, o.payload, a.branch_id, a.chain_depth
        FROM unnest(CAST(:out_ids AS text[]), CAST(:out_responses AS text[]), CAST(:out_positions AS int[]),
                    CAST(:out_types AS text[]), CAST(:out_payloads AS json[]))
            AS o(id, response_id, position, type, payload)
        JOIN allocated a ON a.id = o.response_id AND a.ended
    ), released AS (
        -- A response that ends frees its conversation for the next; its input and output join it
        -- when it ends completed or incomplete (a failed or cancelled turn adds nothing).
        UPDATE conversations cv SET active_response_id = NULL
        FROM allocated a JOIN endings f ON f.response_id = a.id
        WHERE a.ended AND cv.active_response_id = a.id
        RETURNING cv.id AS conversation_id, a.id AS response_id, f.status
    ), joining AS (
        SELECT conversation_id, response_id, nextval('conversation_item_batches') AS batch
        FROM released WHERE status IN ('completed', 'incomplete')
    ), joined AS (
        INSERT INTO conversation_items (conversation_id, batch, place, item_id, item_ref)
        SELECT j.conversation_id, j.batch,
               (row_number() OVER (PARTITION BY j.response_id ORDER BY m.side_rank, m.position) - 1)::int,
               m.id, m.id
        FROM joining j JOIN (
            SELECT i.response_id, 0 AS side_rank, i.position, i.id FROM items i
            WHERE i.side = 'input' AND i.response_id IN (SELECT response_id FROM joining)
            UNION ALL
            SELECT o.response_id, 1, o.position, o.id
            FROM unnest(CAST(:out_ids AS text[]), CAST(:out_responses AS text[]), CAST(:out_positions AS int[]))
                AS o(id, response_id, position)
        ) m ON m.response_id = j.response_id
    )
    SELECT id, first FROM allocated
""".split("{announce}")
        )
    )
)


def _json_or_null(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


async def append_many(
    conn: AsyncConnection,
    events_by_response: Mapping[str, Sequence[Event]],
    endings: Mapping[str, Outcome] | None = None,
    worker_id: str | None = None,
) -> dict[str, list[WireEvent]]:
    """Numbers and stores the events of many responses, and ends the responses in `endings`
    (whose events must close with their terminal event); returns each active response's events,
    numbered and encoded. Responses no longer active get nothing: not their events, not their
    ending; with `worker_id`, nor do those that worker no longer runs."""
    endings = endings or {}
    ids: list[str] = []
    positions: list[int] = []
    types: list[str] = []
    encoded: dict[str, list[str]] = {}
    splits: list[event_templates.Split] = []
    output_ats: list[int | None] = []
    output_paths: list[str | None] = []
    for response_id, events in events_by_response.items():
        encoded[response_id] = [encoding.encode(event) for event in events]
        ids += [response_id] * len(events)
        positions += range(len(events))
        types += [event["type"] for event in events]
        ending = endings.get(response_id)
        stored = output_refs.as_stored(events, encoded[response_id], ending.output if ending else None)
        for event, as_json, one in zip(events, encoded[response_id], stored, strict=True):
            whole = one.output_at is None
            splits.append(event_templates.split(event, as_json) if whole else event_templates.Split(one.payload[:-1]))
            output_ats.append(one.output_at)
            output_paths.append(one.output_path)
    if not ids:
        return {}
    outputs = [(rid, position, item) for rid, o in endings.items() for position, item in enumerate(o.output)]
    rows = await _APPEND.rows(
        conn,
        {
            "worker_id": worker_id,
            "ids": ids,
            "positions": positions,
            "types": types,
            "heads": [one.head for one in splits],
            "bodies": [one.body for one in splits],
            "tails": [one.tail for one in splits],
            "templates": [one.template for one in splits],
            "output_ats": output_ats,
            "output_paths": output_paths,
            "end_ids": list(endings),
            "end_statuses": [o.status for o in endings.values()],
            "end_usages": [_json_or_null(o.usage) for o in endings.values()],
            "end_errors": [_json_or_null(o.error) for o in endings.values()],
            "end_incomplete": [_json_or_null(o.incomplete_details) for o in endings.values()],
            "end_times": [o.completed_at for o in endings.values()],
            "out_ids": [item["id"] for _, _, item in outputs],
            "out_responses": [rid for rid, _, _ in outputs],
            "out_positions": [position for _, position, _ in outputs],
            "out_types": [item["type"] for _, _, item in outputs],
            # As the events encode them: an event that refers to the output reads back the same text.
            "out_payloads": [encoding.encode(items_db.stored_payload(item)) for _, _, item in outputs],
        },
    )
    return {rid: encoding.numbered(events_by_response[rid], encoded[rid], first) for rid, first in rows}


async def append(conn: AsyncConnection, response_id: str, events: Sequence[Event]) -> list[WireEvent]:
    """Numbers and stores one response's events; [] when the response is no longer active."""
    return (await append_many(conn, {response_id: events})).get(response_id, [])


async def end(conn: AsyncConnection, response_id: str, events: Sequence[Event], outcome: Outcome) -> list[WireEvent]:
    """Appends a response's closing events (the terminal one last) and ends it, atomically; []
    when it had already ended (nothing is written then)."""
    return (await append_many(conn, {response_id: events}, {response_id: outcome})).get(response_id, [])


# A poll that folded this many events past the last snapshot saves a new one: a poll then costs
# the output so far and at most about this many events, however long the log.
SNAPSHOT_AFTER_EVENTS = 100


async def output_so_far(conn: AsyncConnection, response_id: str) -> list[dict[str, Any]]:
    """The output items of a response that has not ended: its last snapshot with the events after
    it folded on. Saves a newer snapshot when that was many events (the caller commits it)."""
    snapshot = (
        await conn.execute(
            select(output_snapshots.c.sequence_number, output_snapshots.c.output).where(
                output_snapshots.c.response_id == response_id
            )
        )
    ).first()
    after, start = (snapshot.sequence_number, snapshot.output) if snapshot else (-1, [])
    events = await events_after(conn, response_id, after, None)
    output = accumulate.output_so_far((event.data() for event in events), start)
    if len(events) >= SNAPSHOT_AFTER_EVENTS:
        saved = insert(output_snapshots).values(
            response_id=response_id, sequence_number=events[-1].sequence_number, output=output
        )
        await conn.execute(
            saved.on_conflict_do_update(
                index_elements=[output_snapshots.c.response_id],
                set_={"sequence_number": saved.excluded.sequence_number, "output": saved.excluded.output},
                where=output_snapshots.c.sequence_number < saved.excluded.sequence_number,
            )
        )
    return output


# Reads go through the `response_events` view (migration 0015), which puts each event back as
# it was streamed: a delta with its template, a closing event with its piece of the output.
_EVENTS_AFTER = text("""
    SELECT e.sequence_number, e.type, e.payload
    FROM response_events e
    WHERE e.response_id = :response_id AND e.sequence_number > :after
    ORDER BY e.sequence_number
    LIMIT :limit
""")

# The logs of many followers' responses, each after its own point, with each response's row as
# the same statement saw it: its status commits with its terminal event, so a response that has
# ended has its whole log in the page (when the page is not full). A follower's reads of one
# moment cost one statement, however many followers ask.
_LOGS_AFTER = DriverStatement(
    text("""
    SELECT f.ord, r.status, r.account_id, r.background, r.stream, extract(epoch FROM r.completed_at)::float8,
           r.events_purged_at IS NOT NULL,
           e.sequence_number, e.type, e.payload
    FROM unnest(CAST(:ids AS text[]), CAST(:afters AS int[])) WITH ORDINALITY AS f(response_id, after, ord)
    LEFT JOIN responses r ON r.id = f.response_id
    LEFT JOIN LATERAL (
        SELECT e.sequence_number, e.type, e.payload
        FROM response_events e
        WHERE e.log_key = r.log_key AND e.sequence_number > f.after
        ORDER BY e.sequence_number
        LIMIT :page
    ) e ON true
    ORDER BY f.ord, e.sequence_number
""")
)


@dataclass(frozen=True, slots=True)
class LogPage:
    """A response's events after a point (at most a page), and its row as the same read saw it;
    `found` is False when there is no such response (deleted)."""

    events: list[WireEvent]
    found: bool
    status: str | None = None
    account_id: str | None = None
    background: bool = False
    stream: bool = False
    completed_at: float | None = None
    events_purged: bool = False

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL_STATUSES


async def logs_after(
    conn: AsyncConnection, wanted: Sequence[tuple[str, int]], page: int
) -> dict[tuple[str, int], LogPage]:
    """For each (response id, sequence number), the events after it (at most `page` of them)."""
    ids, afters = [response_id for response_id, _ in wanted], [after for _, after in wanted]
    rows = await _LOGS_AFTER.rows(conn, {"ids": ids, "afters": afters, "page": page})
    pages: dict[tuple[str, int], LogPage] = {}
    for row in rows:
        key = wanted[row[0] - 1]
        found = pages.get(key)
        if found is None:
            status, account_id, background, stream, completed_at, purged = row[1:7]
            found = pages[key] = LogPage(
                [], status is not None, status, account_id, background, stream, completed_at, purged
            )
        if row[7] is not None:
            found.events.append(WireEvent(row[7], row[8], row[9]))
    return pages


async def events_after(conn: AsyncConnection, response_id: str, after: int, limit: int | None) -> list[WireEvent]:
    """Events after sequence number `after`, in order, at most `limit` (None: all), as stored
    text: followers pass it on without decoding it."""
    rows = await conn.execute(_EVENTS_AFTER, {"response_id": response_id, "after": after, "limit": limit})
    return [WireEvent(number, event_type, payload) for number, event_type, payload in rows]
