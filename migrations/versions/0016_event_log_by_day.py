"""the event log partitioned by day

Revision ID: 0016
Revises: 0015

`event_log` is partitioned by its key's day (`log_key >> 32`, the day its response was created):
one table a day, `event_log_YYYY_MM_DD`, which retention drops whole once every response of that
day has had its log purged, instead of deleting the rows one by one (workers/log_partitions.py).
Days without a table of their own (none is made yet) go to `event_log_default`. The view
`response_events` hides a purged log at once, and `event_log_days` shows each day's size.
Create Date: 2026-12-01 23:59:00
"""

from __future__ import annotations

import datetime

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

OUTPUT_PIECE = """
    (SELECT ((
        '[' || coalesce(string_agg('{"id":' || to_json(i.id)::text || ',' || substr(i.payload::text, 2),
                                   ',' ORDER BY i.position), '') || ']'
     )::json #> e.output_path)::text
     FROM items i WHERE i.response_id = r.id AND i.side = 'output')
"""


def response_events(hide_purged: bool) -> str:
    return f"""
    SELECT r.id AS response_id, e.sequence_number, coalesce(e.type, t.type) AS type,
           CASE WHEN e.template IS NOT NULL
                THEN t.prefix || e.payload || t.suffix || ',"sequence_number":' || e.sequence_number || '}}'
                WHEN e.output_at IS NULL THEN e.payload
                ELSE left(e.payload, e.output_at) || {OUTPUT_PIECE} || substr(e.payload, e.output_at + 1)
           END AS payload,
           e.output_at, e.output_path, e.log_key
    FROM event_log e
    JOIN responses r ON r.log_key = e.log_key
    LEFT JOIN event_templates t ON t.log_key = e.log_key AND t.id = e.template
    {"WHERE r.events_purged_at IS NULL" if hide_purged else ""}
"""


EVENT_LOG_DAYS = """
    SELECT to_date(substring(c.relname FROM 11), 'YYYY_MM_DD') AS day,
           c.relname AS partition,
           pg_total_relation_size(c.oid) AS bytes,
           pg_size_pretty(pg_total_relation_size(c.oid)) AS size,
           c.reltuples::bigint AS events_estimate
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'event_log'::regclass AND c.relname <> 'event_log_default'
"""

COLUMNS = "log_key, sequence_number, template, output_at, type, payload, output_path"


def partition_for(day: int) -> str:
    name = (datetime.date(1970, 1, 1) + datetime.timedelta(days=day)).strftime("event_log_%Y_%m_%d")
    return f"CREATE TABLE {name} PARTITION OF event_log FOR VALUES FROM ({day << 32}) TO ({(day + 1) << 32})"


def upgrade() -> None:
    connection = op.get_bind()
    op.execute("DROP VIEW response_events")
    op.execute("ALTER TABLE event_log RENAME TO event_log_0015")
    op.execute("ALTER TABLE event_log_0015 RENAME CONSTRAINT pk_event_log TO pk_event_log_0015")
    op.execute("""
        CREATE TABLE event_log (
            log_key bigint NOT NULL,
            sequence_number integer NOT NULL,
            template integer,
            output_at integer,
            type text,
            payload text NOT NULL,
            output_path text[],
            CONSTRAINT pk_event_log PRIMARY KEY (log_key, sequence_number)
        ) PARTITION BY RANGE (log_key)
    """)
    op.execute("CREATE TABLE event_log_default PARTITION OF event_log DEFAULT")
    today = connection.scalar(sa.text("SELECT floor(extract(epoch FROM now()) / 86400)::bigint"))
    stored = connection.scalars(sa.text("SELECT DISTINCT log_key >> 32 FROM event_log_0015")).all()
    for day in sorted({*stored, today, today + 1, today + 2}):
        op.execute(partition_for(day))
    op.execute(f"INSERT INTO event_log ({COLUMNS}) SELECT {COLUMNS} FROM event_log_0015")
    op.execute("DROP TABLE event_log_0015")
    for statement in COMMENTS:
        op.execute(statement)
    op.execute(f"CREATE VIEW response_events AS {response_events(hide_purged=True)}")
    op.execute(
        "COMMENT ON VIEW response_events IS 'Every stored event as it was streamed (event_log with its templates "
        "and left-out output put back); a purged log is gone from it at once.'"
    )
    op.execute(f"CREATE VIEW event_log_days AS {EVENT_LOG_DAYS}")
    op.execute("COMMENT ON VIEW event_log_days IS 'Each day''s event log partition and its size.'")


COMMENTS = (
    "COMMENT ON TABLE event_log IS 'The durable, replayable stream of each response (read it through the "
    "response_events view), a partition a day (event_log_YYYY_MM_DD: the day its response was created).'",
    "COMMENT ON COLUMN event_log.log_key IS 'responses.log_key of its response'",
    "COMMENT ON COLUMN event_log.sequence_number IS '0, 1, 2, … per response, no gaps'",
    "COMMENT ON COLUMN event_log.template IS 'a delta: event_templates.id, payload is only the delta''s JSON; "
    "null: payload is the whole event'",
    "COMMENT ON COLUMN event_log.type IS 'SSE event type, e.g. response.created (null: the template''s)'",
    "COMMENT ON COLUMN event_log.payload IS 'the event as sent, sequence_number included, never parsed here "
    "(a delta: its JSON string only; a closing event of a large answer: without its piece of the output)'",
    "COMMENT ON COLUMN event_log.output_at IS 'where in payload a piece of the response''s output items was left "
    "out (characters); null: none'",
    "COMMENT ON COLUMN event_log.output_path IS 'which piece: its path in the output items ({} all, {2} item 2, "
    "{2,content,0,text} its text)'",
)


def downgrade() -> None:
    op.execute("DROP VIEW event_log_days")
    op.execute("DROP VIEW response_events")
    op.execute("ALTER TABLE event_log RENAME TO event_log_0016")
    op.execute("ALTER TABLE event_log_0016 RENAME CONSTRAINT pk_event_log TO pk_event_log_0016")
    op.execute("""
        CREATE TABLE event_log (
            log_key bigint NOT NULL,
            sequence_number integer NOT NULL,
            template integer,
            output_at integer,
            type text,
            payload text NOT NULL,
            output_path text[],
            CONSTRAINT pk_event_log PRIMARY KEY (log_key, sequence_number)
        )
    """)
    # A purged log whose day had not been dropped yet is dropped now: before 0016 it was deleted.
    op.execute(f"""
        INSERT INTO event_log ({COLUMNS})
        SELECT {", ".join(f"e.{c}" for c in COLUMNS.split(", "))} FROM event_log_0016 e
        JOIN responses r ON r.log_key = e.log_key WHERE r.events_purged_at IS NULL
    """)
    op.execute("DROP TABLE event_log_0016")
    for statement in COMMENTS[1:]:
        op.execute(statement)
    op.execute(
        "COMMENT ON TABLE event_log IS 'The durable, replayable stream of each response (read it through the "
        "response_events view).'"
    )
    op.execute(f"CREATE VIEW response_events AS {response_events(hide_purged=False)}")
    op.execute(
        "COMMENT ON VIEW response_events IS 'Every stored event as it was streamed (event_log with its templates "
        "and left-out output put back).'"
    )
