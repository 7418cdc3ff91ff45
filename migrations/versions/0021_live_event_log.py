"""the logs being written apart from the logs at rest

Revision ID: 0021
Revises: 0020

A running response writes its deltas to the log as they stream, a row a commit; when it ends, its
log is folded into a few rows and the streamed ones are deleted. In a day's partition those
deleted rows were holes among the folded logs of the day, and the partition kept their size until
it was dropped: a fresh database held about 27 times the streamed text, three quarters of it the
streamed rows' dead space. A response's log is now written under a key of `event_log_live`
while it runs (`new_log_key()`), and its end moves it, folded, to a key of the day it ended
(`ended_log_key()`, app/storage/events.py): the day partitions hold folded logs only, written
once and never deleted from, and the live partition holds only the logs being written, its space
used again and again (vacuumed often: app/housekeeping/live_log.py). A response's day partition
is now that of its end, the order in which retention purges logs.

A response's second event repeats its first's response object (its settings and tools echoed
whole): it is stored without it (`output_path` `{response}`), and `response_events` takes it from
the event before (app/storage/output_refs.py).
Create Date: 2026-12-05 14:40:00
"""

from __future__ import annotations

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# The live logs' keys: the last 2^32 keys of bigint, a "day" no date reaches.
LIVE_FROM = (2**31 - 1) << 32
COUNTER = "(nextval('response_log_keys') & 4294967295)"
DAY_KEY = f"(floor(extract(epoch FROM now()) / 86400)::bigint << 32) | {COUNTER}"

EVENT_LOG_DAYS = """
    SELECT to_date(substring(c.relname FROM 11), 'YYYY_MM_DD') AS day,
           c.relname AS partition,
           pg_total_relation_size(c.oid) AS bytes,
           pg_size_pretty(pg_total_relation_size(c.oid)) AS size,
           c.reltuples::bigint AS events_estimate
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'event_log'::regclass AND c.relname NOT IN ('event_log_default', 'event_log_live')
"""
EVENT_LOG_DAYS_V20 = EVENT_LOG_DAYS.replace("NOT IN ('event_log_default', 'event_log_live')", "<> 'event_log_default'")

LOG_COMMENT = (
    "The durable, replayable stream of each response (read it through the response_events view): a running "
    "response''s in event_log_live, an ended one''s in the partition of the day it ended (event_log_YYYY_MM_DD)."
)
LOG_COMMENT_V20 = (
    "The durable, replayable stream of each response (read it through the response_events view), "
    "a partition a day (event_log_YYYY_MM_DD: the day its response was created)."
)

# response_events (migration 0015) puts back, besides a closing event's piece of the output, an
# opening event's response object, stored once in the event before it (app/storage/output_refs.py).
OUTPUT_PIECE = """
    (SELECT ((
        '[' || coalesce(string_agg('{"id":' || to_json(i.id)::text || ',' || substr(i.payload::text, 2),
                                   ',' ORDER BY i.position), '') || ']'
     )::json #> e.output_path)::text
     FROM items i WHERE i.response_id = r.id AND i.side = 'output')
"""
OPENING_PIECE = """
    (SELECT substr(p.payload, length(p.type) + 23,
                   length(p.payload) - length(p.type) - 22 - length(',"sequence_number":' || p.sequence_number || '}'))
     FROM event_log p WHERE p.log_key = e.log_key AND p.sequence_number = e.sequence_number - 1)
"""


def response_events(opening_pieces: bool) -> str:
    opening = (
        f"""WHEN e.output_path = '{{response}}'
                THEN left(e.payload, e.output_at) || {OPENING_PIECE} || substr(e.payload, e.output_at + 1)"""
        if opening_pieces
        else ""
    )
    return f"""
    SELECT r.id AS response_id, x.sequence_number, coalesce(e.type, t.type) AS type,
           CASE WHEN e.template IS NOT NULL
                THEN t.prefix || x.body || t.suffix || ',"sequence_number":' || x.sequence_number || '}}'
                WHEN e.output_at IS NULL THEN e.payload
                {opening}
                ELSE left(e.payload, e.output_at) || {OUTPUT_PIECE} || substr(e.payload, e.output_at + 1)
           END AS payload,
           e.output_at, e.output_path, e.log_key
    FROM event_log e
    JOIN responses r ON r.log_key = e.log_key
    LEFT JOIN event_templates t ON t.log_key = e.log_key AND t.id = e.template
    CROSS JOIN LATERAL (
        SELECT e.sequence_number, e.payload AS body WHERE e.run_length IS NULL
        UNION ALL
        SELECT e.sequence_number - e.run_length + d.n::int, d.value::text
        FROM json_array_elements(e.payload::json) WITH ORDINALITY AS d(value, n) WHERE e.run_length IS NOT NULL
    ) x
    WHERE r.events_purged_at IS NULL
"""


def upgrade() -> None:
    # Its rows are deleted as fast as they are inserted: vacuumed at a fixed count of dead rows, not
    # a share of the table, and never truncated (truncation locks out the writers).
    op.execute(f"""
        CREATE TABLE event_log_live PARTITION OF event_log FOR VALUES FROM ({LIVE_FROM}) TO (MAXVALUE)
        WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
              autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 1000,
              vacuum_truncate = false)
    """)
    op.execute(
        "COMMENT ON TABLE event_log_live IS 'The logs of the responses still running (their log_key from "
        "new_log_key()); a response that ends moves its log, folded, to the partition of the day it ended.'"
    )
    op.execute(
        f"CREATE OR REPLACE FUNCTION new_log_key() RETURNS bigint LANGUAGE sql VOLATILE AS $$ "
        f"SELECT {LIVE_FROM}::bigint | {COUNTER} $$"
    )
    op.execute(f"CREATE FUNCTION ended_log_key() RETURNS bigint LANGUAGE sql VOLATILE AS $$ SELECT {DAY_KEY} $$")
    op.execute(
        "COMMENT ON COLUMN responses.log_key IS 'the key of its event log (event_log): while it runs, one of "
        "event_log_live; once it ended, the day it ended in the upper 32 bits'"
    )
    op.execute(f"COMMENT ON TABLE event_log IS '{LOG_COMMENT}'")
    op.execute(f"CREATE OR REPLACE VIEW response_events AS {response_events(opening_pieces=True)}")
    op.execute("DROP VIEW event_log_days")
    op.execute(f"CREATE VIEW event_log_days AS {EVENT_LOG_DAYS}")
    op.execute("COMMENT ON VIEW event_log_days IS 'Each day''s event log partition and its size.'")


def downgrade() -> None:
    # Opening events stored by reference are stored whole again.
    op.execute(f"""
        UPDATE event_log e SET payload = left(e.payload, e.output_at) || {OPENING_PIECE}
                                         || substr(e.payload, e.output_at + 1),
                               output_at = NULL, output_path = NULL
        WHERE e.output_path = '{{response}}'
    """)
    op.execute(f"CREATE OR REPLACE VIEW response_events AS {response_events(opening_pieces=False)}")
    # The running responses' logs go back under keys of their creation days.
    op.execute(f"""
        CREATE TEMPORARY TABLE live_keys AS
        SELECT log_key AS old, (floor(extract(epoch FROM created_at) / 86400)::bigint << 32) | {COUNTER} AS new
        FROM responses WHERE log_key >= {LIVE_FROM}
    """)
    op.execute("ALTER TABLE event_log DETACH PARTITION event_log_live")
    op.execute("""
        INSERT INTO event_log (log_key, sequence_number, template, run_length, output_at, type, payload,
                               output_path, committed_at)
        SELECT k.new, e.sequence_number, e.template, e.run_length, e.output_at, e.type, e.payload, e.output_path,
               e.committed_at
        FROM event_log_live e JOIN live_keys k ON k.old = e.log_key
    """)
    op.execute("UPDATE event_templates t SET log_key = k.new FROM live_keys k WHERE t.log_key = k.old")
    op.execute("UPDATE responses r SET log_key = k.new FROM live_keys k WHERE r.log_key = k.old")
    op.execute("DROP TABLE event_log_live, live_keys")
    op.execute("DROP FUNCTION ended_log_key()")
    op.execute(
        f"CREATE OR REPLACE FUNCTION new_log_key() RETURNS bigint LANGUAGE sql VOLATILE AS $$ SELECT {DAY_KEY} $$"
    )
    op.execute(
        "COMMENT ON COLUMN responses.log_key IS 'the key of its event log (event_log): "
        "its creation day in the upper 32 bits'"
    )
    op.execute(f"COMMENT ON TABLE event_log IS '{LOG_COMMENT_V20}'")
    op.execute("DROP VIEW event_log_days")
    op.execute(f"CREATE VIEW event_log_days AS {EVENT_LOG_DAYS_V20}")
    op.execute("COMMENT ON VIEW event_log_days IS 'Each day''s event log partition and its size.'")
