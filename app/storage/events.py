"""The durable event log: `event_log`, numbered per response from 0 without gaps, read
as it was streamed (`response_events`, and the readers below).

The statement that stores events numbers them after the last one its response's log holds, and
takes them only for active responses (and, from a worker, only for those it still runs). It
writes nothing to the response's row but when the response ends: the log's key
(log_key, sequence_number) is what keeps two writers apart. A writer that raced another (a
cancel, the reaper, a worker continuing the response after a hand-over) numbers an event the
other numbered too and has its statement refused; it cannot write after a terminal event, since
to number past it, it must see it, and with it the terminal status it committed with (design
invariants 2 and 3). When a response ends, the same statement folds its deltas: each run of
consecutive deltas of one part becomes one row holding their texts (RUN_BYTES of them at most),
and the whole log moves from its key in `event_log_live`, the partition of the logs being written,
to a new key of the day it ends (migration 0021): a day's partition holds folded logs only, written
once, with no holes where streamed rows were; the live partition's space, freed as fast as it is
filled, is used again (app/housekeeping/live_log.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.protocol import accumulate, encoding
from app.protocol.encoding import WireEvent
from app.protocol.shapes import Event
from app.protocol.vocabulary import TERMINAL_STATUSES
from app.storage import event_templates, output_refs
from app.storage import items as items_db
from app.storage.driver import DriverStatement, as_columns
from app.storage.responses import Outcome
from app.storage.tables import output_snapshots

# A run of folded deltas holds about this many bytes of their texts (each counted 32 bytes more):
# a few hundred short deltas, and a resume in its middle reads and parses no more than this.
RUN_BYTES = 16 * 1024

# The two statements that store events, each written whole (a reader reads it top to bottom, as
# Postgres plans it) beside the function that binds its parameters, so that the arrays `unnest`
# reads and the lists `append_many` builds are seen together. They begin alike: the batch's
# events, and the responses that take them (`live`): active, and (from a worker) still its own,
# not handed over or reaped while it stalled; their events numbered after the last of their log.
# A delta `fits` the template its log holds (`t`) or the one the statement inserts (`m`, which
# its own reads do not see in the table) when its type, prefix and suffix are the template's.
# An active response's log is in `event_log_live` (migrations 0021, 0023): they read it there.
# Read through `event_log`, each run of their one plan would open every day's partition, as many
# as retention keeps (bench/log_partitions.py: with 90 more, each commit cost 1.5 to 2.3 times as much).

# One statement numbers and inserts the events of many responses and ends those that end in
# the batch (terminal status, usage, output items, their deltas folded): atomic without a
# transaction around it (no BEGIN/COMMIT round trips), and a terminal status never commits
# without its terminal event. Only active responses take events or end: the UPDATE of those that
# end is the compare-and-set of design invariant 3, and late events are dropped.
_APPEND = DriverStatement(
    text(
        """    WITH batch AS (
        SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:positions AS int[]), CAST(:types AS text[]),
                             CAST(:heads AS text[]), CAST(:bodies AS text[]), CAST(:tails AS text[]),
                             CAST(:templates AS int[]), CAST(:output_ats AS int[]), CAST(:output_paths AS text[]))
            AS e(response_id, position, type, head, body, tail, template, output_at, output_path)
    ), live AS (
        SELECT r.id, r.log_key, r.account_id, r.background, r.chain_depth,
               r.context_branches[cardinality(r.context_branches)] AS branch_id,
               coalesce((SELECT max(l.sequence_number) FROM event_log_live l WHERE l.log_key = r.log_key), -1)
                   + 1 AS first
        -- Each by its key (OFFSET 0 keeps the status test out of the lookup): the partial index of
        -- active responses, which the planner prefers, would be read whole for every commit.
        FROM (SELECT * FROM responses WHERE id = ANY(CAST(:response_ids AS text[])) OFFSET 0) r
        WHERE r.status IN ('queued', 'in_progress') AND (CAST(:worker_id AS text) IS NULL OR r.worker_id = :worker_id)
    ), endings AS (
        SELECT * FROM unnest(CAST(:end_ids AS text[]), CAST(:end_statuses AS text[]), CAST(:end_usages AS jsonb[]),
                             CAST(:end_errors AS jsonb[]), CAST(:end_incomplete AS jsonb[]),
                             CAST(:end_times AS float8[]))
            AS f(response_id, status, usage, error, incomplete_details, completed_epoch)
    ), ended AS (
        -- A response that ends moves its log from the live partition to a key of today's: its
        -- folded log is written afresh there, and the live rows' space is used again.
        UPDATE responses r SET
            status = f.status, usage = f.usage, error = f.error, incomplete_details = f.incomplete_details,
            completed_at = to_timestamp(f.completed_epoch), lease_expires_at = NULL, log_key = ended_log_key()
        FROM endings f
        WHERE r.id = f.response_id AND r.id IN (SELECT id FROM live) AND r.status IN ('queued', 'in_progress')
          AND (CAST(:worker_id AS text) IS NULL OR r.worker_id = :worker_id)
        RETURNING r.id, r.log_key
    ), allocated AS (
        -- (a response whose end lost its compare-and-set takes none of its closing events)
        SELECT l.*, d.id IS NOT NULL AS ended, coalesce(d.log_key, l.log_key) AS key_after
        FROM live l LEFT JOIN ended d ON d.id = l.id
        WHERE d.id IS NOT NULL OR l.id NOT IN (SELECT response_id FROM endings)
    ), announced AS (
        -- A background response that ends tells its account's webhook endpoints (invariant 8):
        -- here, so that an ended response always has its deliveries and no other has any. One
        -- delivery per endpoint subscribed to its end, its body OpenAI's event; the id is made
        -- as app/protocol/ids.py makes one, per row (in this select list the volatile function
        -- is evaluated for each).
        INSERT INTO webhook_deliveries (id, endpoint_id, response_id, type, payload)
        SELECT e.id, e.endpoint_id, e.response_id, e.type,
               json_build_object('id', e.id, 'object', 'event', 'type', e.type,
                                 'created_at', floor(extract(epoch FROM now()))::bigint,
                                 'data', json_build_object('id', e.response_id))::text
        FROM (
            SELECT 'evt_' || replace(gen_random_uuid()::text, '-', '')
                       || left(replace(gen_random_uuid()::text, '-', ''), 16) AS id,
                   w.id AS endpoint_id, a.id AS response_id, 'response.' || f.status AS type
            FROM allocated a
            JOIN endings f ON f.response_id = a.id
            JOIN webhook_endpoints w ON w.account_id = a.account_id
            WHERE a.ended AND a.background AND 'response.' || f.status = ANY(w.events)
        ) e
    ), numbered AS (
        SELECT a.log_key, a.key_after, a.ended, a.first + b.position AS sequence_number, b.*
        FROM batch b JOIN allocated a ON a.id = b.response_id
    ), moved_templates AS (
        DELETE FROM event_templates t USING allocated a WHERE a.ended AND t.log_key = a.log_key
        RETURNING a.key_after AS log_key, t.id, t.type, t.prefix, t.suffix
    ), new_templates AS (
        INSERT INTO event_templates (log_key, id, type, prefix, suffix)
        SELECT DISTINCT ON (log_key, id) log_key, id, type, prefix, suffix FROM (
            SELECT *, 0 AS rank FROM moved_templates
            UNION ALL
            SELECT key_after, template, type, head, tail, 1 FROM numbered WHERE template IS NOT NULL
        ) c
        ORDER BY log_key, id, rank
        ON CONFLICT DO NOTHING
        RETURNING log_key, id, type, prefix, suffix
    ), stored AS (
        -- A delta whose template is exactly its own is stored as its text alone
        -- (app/storage/event_templates.py); any other event as its JSON text with its number
        -- spliced in, as encoding.numbered does for the followers: a replay sends the very text
        -- they got live.
        SELECT n.key_after AS log_key, n.sequence_number, n.ended, k.fits, n.output_at,
               string_to_array(n.output_path, ',') AS output_path,
               CASE WHEN NOT k.fits THEN now() END AS committed_at,
               CASE WHEN k.fits THEN n.template END AS template,
               CASE WHEN NOT k.fits THEN n.type END AS type,
               CASE WHEN k.fits THEN n.body
                    ELSE n.head || n.body || n.tail || ',"sequence_number":' || n.sequence_number || '}' END AS payload
        FROM numbered n
        LEFT JOIN event_templates t ON n.template IS NOT NULL AND t.log_key = n.log_key AND t.id = n.template
        LEFT JOIN new_templates m ON m.log_key = n.key_after AND m.id = n.template
        CROSS JOIN LATERAL (
            SELECT coalesce((t.type, t.prefix, t.suffix) = (n.type, n.head, n.tail),
                            (m.type, m.prefix, m.suffix) = (n.type, n.head, n.tail), false) AS fits
        ) k
    ), moved AS (
        -- The log a response that ends stored earlier: its deltas become runs with its last ones.
        DELETE FROM event_log_live e USING allocated a WHERE a.ended AND e.log_key = a.log_key
        RETURNING a.key_after AS log_key, e.sequence_number, e.template, e.run_length, e.output_at, e.type,
                  e.payload, e.output_path, e.committed_at
    ), deltas AS (
        SELECT log_key, sequence_number, template, payload,
               sequence_number - row_number() OVER (PARTITION BY log_key, template ORDER BY sequence_number) AS run
        FROM (SELECT log_key, sequence_number, template, payload FROM moved
              WHERE template IS NOT NULL AND run_length IS NULL
              UNION ALL
              SELECT log_key, sequence_number, template, payload FROM stored WHERE ended AND fits) d
    ), runs AS (
        SELECT log_key, template, max(sequence_number) AS sequence_number, count(*)::int AS run_length,
               '[' || string_agg(payload, ',' ORDER BY sequence_number) || ']' AS payload
        FROM (SELECT *, sum(length(payload) + 32) OVER (PARTITION BY log_key, template, run ORDER BY sequence_number)
                        / :run_bytes AS part
              FROM deltas) p
        GROUP BY log_key, template, run, part
    ), inserted AS (
        INSERT INTO event_log (log_key, sequence_number, template, run_length, output_at, type, payload, output_path,
                               committed_at)
        SELECT log_key, sequence_number, template, NULL, output_at, type, payload, output_path, committed_at
        FROM stored WHERE NOT (ended AND fits)
        UNION ALL
        SELECT log_key, sequence_number, template, run_length, output_at, type, payload, output_path, committed_at
        FROM moved WHERE template IS NULL OR run_length IS NOT NULL
        UNION ALL
        SELECT log_key, sequence_number, template, run_length, NULL, NULL, payload, NULL, NULL FROM runs
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
"""
    )
)


# The same for a batch in which no response ends, the commit of streaming output: only the
# numbering, the templates and the rows. Postgres initializes a statement's whole plan at every
# execution: a streaming commit through the one above would pay for its folding, output items,
# conversations and webhooks.
_APPEND_STREAMING = DriverStatement(
    text(
        """    WITH batch AS (
        SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:positions AS int[]), CAST(:types AS text[]),
                             CAST(:heads AS text[]), CAST(:bodies AS text[]), CAST(:tails AS text[]),
                             CAST(:templates AS int[]), CAST(:output_ats AS int[]), CAST(:output_paths AS text[]))
            AS e(response_id, position, type, head, body, tail, template, output_at, output_path)
    ), live AS (
        SELECT r.id, r.log_key, r.account_id, r.background, r.chain_depth,
               r.context_branches[cardinality(r.context_branches)] AS branch_id,
               coalesce((SELECT max(l.sequence_number) FROM event_log_live l WHERE l.log_key = r.log_key), -1)
                   + 1 AS first
        -- Each by its key (OFFSET 0 keeps the status test out of the lookup): the partial index of
        -- active responses, which the planner prefers, would be read whole for every commit.
        FROM (SELECT * FROM responses WHERE id = ANY(CAST(:response_ids AS text[])) OFFSET 0) r
        WHERE r.status IN ('queued', 'in_progress') AND (CAST(:worker_id AS text) IS NULL OR r.worker_id = :worker_id)
    ), numbered AS (
        SELECT l.log_key, l.first + b.position AS sequence_number, b.*
        FROM batch b JOIN live l ON l.id = b.response_id
    ), new_templates AS (
        INSERT INTO event_templates (log_key, id, type, prefix, suffix)
        SELECT DISTINCT ON (log_key, template) log_key, template, type, head, tail
        FROM numbered WHERE template IS NOT NULL
        ORDER BY log_key, template
        ON CONFLICT DO NOTHING
        RETURNING log_key, id, type, prefix, suffix
    ), inserted AS (
        INSERT INTO event_log (log_key, sequence_number, template, type, payload, output_at, output_path, committed_at)
        SELECT n.log_key, n.sequence_number,
               CASE WHEN k.fits THEN n.template END,
               CASE WHEN NOT k.fits THEN n.type END,
               CASE WHEN k.fits THEN n.body
                    ELSE n.head || n.body || n.tail || ',"sequence_number":' || n.sequence_number || '}' END,
               n.output_at, string_to_array(n.output_path, ','),
               CASE WHEN NOT k.fits THEN now() END
        FROM numbered n
        LEFT JOIN event_templates t ON n.template IS NOT NULL AND t.log_key = n.log_key AND t.id = n.template
        LEFT JOIN new_templates m ON m.log_key = n.log_key AND m.id = n.template
        CROSS JOIN LATERAL (
            SELECT coalesce((t.type, t.prefix, t.suffix) = (n.type, n.head, n.tail),
                            (m.type, m.prefix, m.suffix) = (n.type, n.head, n.tail), false) AS fits
        ) k
    )
    SELECT id, first FROM live
"""
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
    batch = {
        "worker_id": worker_id,
        "response_ids": [response_id for response_id, events in events_by_response.items() if events],
        "ids": ids,
        "positions": positions,
        "types": types,
        "heads": [one.head for one in splits],
        "bodies": [one.body for one in splits],
        "tails": [one.tail for one in splits],
        "templates": [one.template for one in splits],
        "output_ats": output_ats,
        "output_paths": output_paths,
    }
    if not endings:
        rows = await _APPEND_STREAMING.rows(conn, batch)
        return {rid: encoding.numbered(events_by_response[rid], encoded[rid], first) for rid, first in rows}
    outputs = [(rid, position, item) for rid, o in endings.items() for position, item in enumerate(o.output)]
    ended = as_columns(
        endings.items(),
        end_ids=itemgetter(0),
        end_statuses=lambda ending: ending[1].status,
        end_usages=lambda ending: _json_or_null(ending[1].usage),
        end_errors=lambda ending: _json_or_null(ending[1].error),
        end_incomplete=lambda ending: _json_or_null(ending[1].incomplete_details),
        end_times=lambda ending: ending[1].completed_at,
    )
    output_items = as_columns(
        outputs,
        out_ids=lambda output: output[2]["id"],
        out_responses=itemgetter(0),
        out_positions=itemgetter(1),
        out_types=lambda output: output[2]["type"],
        # As the events encode them: an event that refers to the output reads back the same text.
        out_payloads=lambda output: encoding.encode(items_db.stored_payload(output[2])),
    )
    rows = await _APPEND.rows(conn, {**batch, "run_bytes": RUN_BYTES, **ended, **output_items})
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
    return (await output_and_log_end(conn, response_id))[0]


async def output_and_log_end(conn: AsyncConnection, response_id: str) -> tuple[list[dict[str, Any]], int]:
    """`output_so_far`, and the number of the last event its log holds (-1: none), read with it."""
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
    return output, events[-1].sequence_number if events else after


# A response's closing event stored without its piece of the output (app/storage/output_refs.py)
# gets it back from the response's output items.
_OUTPUT_PIECE = """
    (SELECT ((
        '[' || coalesce(string_agg('{"id":' || to_json(i.id)::text || ',' || substr(i.payload::text, 2),
                                   ',' ORDER BY i.position), '') || ']'
     )::json #> e.output_path)::text
     FROM items i WHERE i.response_id = r.id AND i.side = 'output')
"""


def _log_after(after: str, most: str) -> str:
    """The events of response `r`'s log after sequence number `after`, in order, each put back as
    it was streamed: a row's event, or each delta of a run (its texts a JSON array, which `json`
    hands back as written); a delta with its template, a closing event with its piece of the
    output, an opening event with the response object of the one before it. A row is keyed by
    its last event's number, so the key's range finds exactly the rows that hold events after
    `after`; each holds one event or more, so `most` rows hold at least `most` events. The rows
    come from `event_log_after` (migration 0024), which reads the log's own partition alone: read
    here by the key in `r`, the log would have every day's partition opened for it, at each run,
    about 7 µs each (bench/log_partitions.py). (The `response_events` view is this for psql.)"""
    return f"""
        SELECT x.sequence_number, coalesce(e.type, t.type) AS type,
               CASE WHEN e.template IS NOT NULL
                    THEN t.prefix || x.body || t.suffix || ',"sequence_number":' || x.sequence_number || '}}'
                    WHEN e.output_at IS NULL THEN e.payload
                    WHEN e.output_path = '{{response}}'
                    THEN left(e.payload, e.output_at) || e.response_object || substr(e.payload, e.output_at + 1)
                    ELSE left(e.payload, e.output_at) || {_OUTPUT_PIECE} || substr(e.payload, e.output_at + 1)
               END AS payload
        FROM event_log_after(r.log_key, {after}, {most}) e
        LEFT JOIN event_templates t ON t.log_key = r.log_key AND t.id = e.template
        CROSS JOIN LATERAL (
            SELECT e.sequence_number, e.payload AS body WHERE e.run_length IS NULL
            UNION ALL
            SELECT e.sequence_number - e.run_length + d.n::int, d.value::text
            FROM json_array_elements(e.payload::json) WITH ORDINALITY AS d(value, n) WHERE e.run_length IS NOT NULL
        ) x
        WHERE r.events_purged_at IS NULL AND x.sequence_number > {after}
        ORDER BY e.sequence_number, x.sequence_number
    """


_EVENTS_AFTER = text(f"""
    SELECT e.sequence_number, e.type, e.payload
    FROM responses r CROSS JOIN LATERAL ({_log_after(":after", ":limit")} LIMIT :limit) e
    WHERE r.id = :response_id
""")

# The logs of many followers' responses, each after its own point, with each response's row as
# the same statement saw it: its status commits with its terminal event, so a response that has
# ended has its whole log in the page (when the page is not full). A follower's reads of one
# moment cost one statement, however many followers ask.
_LOGS_AFTER = DriverStatement(
    text(f"""
    SELECT f.ord, r.status, r.account_id, r.background, r.stream, extract(epoch FROM r.completed_at)::float8,
           r.events_purged_at IS NOT NULL, (r.settings -> 'requested' -> 'include')::text,
           e.sequence_number, e.type, e.payload
    FROM unnest(CAST(:ids AS text[]), CAST(:afters AS int[])) WITH ORDINALITY AS f(response_id, after, ord)
    LEFT JOIN responses r ON r.id = f.response_id
    LEFT JOIN LATERAL ({_log_after("f.after", ":page")} LIMIT :page) e ON true
    ORDER BY f.ord, e.sequence_number
""")
)

# (`event_log_last`, migration 0024, reads the log's own partition alone, as `event_log_after` does)
_LOG_ENDS = text("""
    SELECT r.id, r.status, event_log_last(r.log_key) FROM responses r WHERE r.id = ANY(CAST(:ids AS text[]))
""")


async def log_ends(conn: AsyncConnection, response_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
    """Each response's status and the number of the last event its log holds (-1: none), in one
    statement; a response that does not exist is left out."""
    rows = await conn.execute(_LOG_ENDS, {"ids": list(response_ids)})
    return {response_id: (status, -1 if last is None else last) for response_id, status, last in rows}


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
    include: list[str] = field(default_factory=list)  # what its create's `include` asked for

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
            status, account_id, background, stream, completed_at, purged, include = row[1:8]
            found = pages[key] = LogPage(
                [], status is not None, status, account_id, background, stream, completed_at, purged,
                json.loads(include) if include else [],
            )  # fmt: skip
        if row[8] is not None:
            found.events.append(WireEvent(row[8], row[9], row[10]))
    return pages


async def events_after(conn: AsyncConnection, response_id: str, after: int, limit: int | None) -> list[WireEvent]:
    """Events after sequence number `after`, in order, at most `limit` (None: all), as stored
    text: followers pass it on without decoding it."""
    rows = await conn.execute(_EVENTS_AFTER, {"response_id": response_id, "after": after, "limit": limit})
    return [WireEvent(number, event_type, payload) for number, event_type, payload in rows]
