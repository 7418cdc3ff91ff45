"""a compact event log, partitioned by day

Revision ID: 0015
Revises: 0014

`response_events` stored each streamed token as a row of about 300 bytes (the response's text
id, the event type, the whole event JSON) plus its index entry and a foreign-key lock: over 100
times the token's text, and over 800 bytes of WAL. The log is now `event_log`, keyed by the
response's `log_key` (an integer that tells its creation day), with no foreign key; a text
delta's row holds only the delta's JSON and the number of its template in `event_templates`,
which holds the rest of the event (type, item id, indexes) once per part. `response_events` is
now a view that puts every event back as it was streamed, byte for byte, and hides a purged log.

Once a response ends, its deltas are folded: each run of consecutive deltas of one part becomes
one row (`run_length` of them, keyed by the last one's number), their texts a JSON array, and the
log moves to a new key of the same day (app/storage/events.py). And
events are numbered after the last one the log holds, in the statement that inserts them:
`responses.next_sequence_number`, which every commit bumped (an update of the response's row a
commit, and its pruning later), is gone, and the key refuses a number taken twice.

`event_log` is partitioned by its key's day (`log_key >> 32`): one table a UTC day,
`event_log_YYYY_MM_DD`, which retention drops whole once every response of that day has had
its log purged (app/housekeeping/log_partitions.py); days without one go to `event_log_default`. The view
`event_log_days` shows each day's size.
Create Date: 2026-12-01 23:30:00
"""

from __future__ import annotations

import datetime

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# The day a response was created in the key's upper 32 bits, a counter in the lower ones: keys
# grow with time, and one day's keys are one range (a day's partition, an operator's query).
LOG_KEY = "(floor(extract(epoch FROM now()) / 86400)::bigint << 32) | (nextval('response_log_keys') & 4294967295)"

# A response's closing event stored without its piece of the output (app/storage/output_refs.py)
# gets it back from the response's output items.
OUTPUT_PIECE = """
    (SELECT ((
        '[' || coalesce(string_agg('{"id":' || to_json(i.id)::text || ',' || substr(i.payload::text, 2),
                                   ',' ORDER BY i.position), '') || ']'
     )::json #> e.output_path)::text
     FROM items i WHERE i.response_id = r.id AND i.side = 'output')
"""

# A row's events one by one: the row itself, or each delta of a run (its texts a JSON array,
# which `json` hands back as written).
EACH_EVENT = """
    CROSS JOIN LATERAL (
        SELECT e.sequence_number, e.payload AS body WHERE e.run_length IS NULL
        UNION ALL
        SELECT e.sequence_number - e.run_length + d.n::int, d.value::text
        FROM json_array_elements(e.payload::json) WITH ORDINALITY AS d(value, n) WHERE e.run_length IS NOT NULL
    ) x
"""

RESPONSE_EVENTS = f"""
    SELECT r.id AS response_id, x.sequence_number, coalesce(e.type, t.type) AS type,
           CASE WHEN e.template IS NOT NULL
                THEN t.prefix || x.body || t.suffix || ',"sequence_number":' || x.sequence_number || '}}'
                WHEN e.output_at IS NULL THEN e.payload
                ELSE left(e.payload, e.output_at) || {OUTPUT_PIECE} || substr(e.payload, e.output_at + 1)
           END AS payload,
           e.output_at, e.output_path, e.log_key
    FROM event_log e
    JOIN responses r ON r.log_key = e.log_key
    LEFT JOIN event_templates t ON t.log_key = e.log_key AND t.id = e.template
    {EACH_EVENT}
    WHERE r.events_purged_at IS NULL
"""

# response_overview (migration 0001), its `events` the number of events the log holds now that
# the response's row no longer counts them (before this revision: `next_sequence_number`).
_OVERVIEW = """
    SELECT r.id, a.name AS account, r.model, r.status, r.background, r.stream,
           r.previous_response_id, r.created_at, r.completed_at,
           r.completed_at - r.created_at AS duration,
           (r.usage ->> 'input_tokens')::int AS input_tokens,
           (r.usage ->> 'output_tokens')::int AS output_tokens,
           {events} AS events, r.error ->> 'message' AS error
    FROM responses r JOIN accounts a ON a.id = r.account_id
"""
RESPONSE_OVERVIEW = _OVERVIEW.format(
    events="(SELECT max(e.sequence_number) + 1 FROM event_log e WHERE e.log_key = r.log_key)"
)
RESPONSE_OVERVIEW_V14 = _OVERVIEW.format(events="r.next_sequence_number")
OVERVIEW_COMMENT = "COMMENT ON VIEW response_overview IS 'One line per response, for operators.'"

EVENT_LOG_DAYS = """
    SELECT to_date(substring(c.relname FROM 11), 'YYYY_MM_DD') AS day,
           c.relname AS partition,
           pg_total_relation_size(c.oid) AS bytes,
           pg_size_pretty(pg_total_relation_size(c.oid)) AS size,
           c.reltuples::bigint AS events_estimate
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'event_log'::regclass AND c.relname <> 'event_log_default'
"""


def partition_for(day: int) -> str:
    name = (datetime.date(1970, 1, 1) + datetime.timedelta(days=day)).strftime("event_log_%Y_%m_%d")
    return f"CREATE TABLE {name} PARTITION OF event_log FOR VALUES FROM ({day << 32}) TO ({(day + 1) << 32})"


# A response's log goes with it: there is no foreign key (its lock cost every token WAL).
DROP_LOGS = (
    """
    CREATE FUNCTION drop_event_logs() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM event_log e USING gone WHERE e.log_key = gone.log_key;
        DELETE FROM event_templates t USING gone WHERE t.log_key = gone.log_key;
        RETURN NULL;
    END $$
    """,
    """
    CREATE TRIGGER responses_drop_event_logs AFTER DELETE ON responses
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION drop_event_logs()
    """,
)


def upgrade() -> None:
    op.execute("CREATE SEQUENCE response_log_keys")
    op.execute("ALTER TABLE responses ADD COLUMN log_key bigint")
    op.execute("""
        UPDATE responses r SET log_key = (floor(extract(epoch FROM o.created_at) / 86400)::bigint << 32)
                                         | (nextval('response_log_keys') & 4294967295)
        FROM (SELECT id, created_at FROM responses ORDER BY created_at, id) o WHERE o.id = r.id
    """)
    op.execute(f"CREATE FUNCTION new_log_key() RETURNS bigint LANGUAGE sql VOLATILE AS $$ SELECT {LOG_KEY} $$")
    op.execute(
        "ALTER TABLE responses ALTER COLUMN log_key SET DEFAULT new_log_key(), ALTER COLUMN log_key SET NOT NULL"
    )
    op.execute("ALTER TABLE responses ADD CONSTRAINT uq_responses_log_key UNIQUE (log_key)")
    op.execute(
        "COMMENT ON COLUMN responses.log_key IS 'the key of its event log (event_log): "
        "its creation day in the upper 32 bits'"
    )
    op.execute("""
        CREATE TABLE event_log (
            log_key bigint NOT NULL,
            sequence_number integer NOT NULL,
            template integer,
            run_length integer,
            output_at integer,
            type text,
            payload text NOT NULL,
            output_path text[],
            CONSTRAINT pk_event_log PRIMARY KEY (log_key, sequence_number)
        ) PARTITION BY RANGE (log_key)
    """)
    op.execute("CREATE TABLE event_log_default PARTITION OF event_log DEFAULT")
    connection = op.get_bind()
    today = connection.scalar(sa.text("SELECT floor(extract(epoch FROM now()) / 86400)::bigint"))
    stored = connection.scalars(sa.text("SELECT DISTINCT log_key >> 32 FROM responses")).all()
    for day in sorted({*stored, today, today + 1, today + 2}):
        op.execute(partition_for(day))
    op.execute("""
        CREATE TABLE event_templates (
            log_key bigint NOT NULL,
            id integer NOT NULL,
            type text NOT NULL,
            prefix text NOT NULL,
            suffix text NOT NULL,
            CONSTRAINT pk_event_templates PRIMARY KEY (log_key, id)
        )
    """)
    for statement in COMMENTS:
        op.execute(statement)
    op.execute("""
        INSERT INTO event_log (log_key, sequence_number, output_at, type, payload, output_path)
        SELECT r.log_key, e.sequence_number, e.output_at, e.type, e.payload, e.output_path
        FROM response_events e JOIN responses r ON r.id = e.response_id
    """)
    op.execute("DROP TABLE response_events")
    op.execute(f"CREATE VIEW response_events AS {RESPONSE_EVENTS}")
    op.execute("DROP VIEW response_overview")
    op.execute("ALTER TABLE responses DROP COLUMN next_sequence_number")
    op.execute(f"CREATE VIEW response_overview AS {RESPONSE_OVERVIEW}")
    op.execute(OVERVIEW_COMMENT)
    op.execute(
        "COMMENT ON VIEW response_events IS 'Every stored event as it was streamed (event_log with its templates "
        "and left-out output put back); a purged log is gone from it at once.'"
    )
    op.execute(f"CREATE VIEW event_log_days AS {EVENT_LOG_DAYS}")
    op.execute("COMMENT ON VIEW event_log_days IS 'Each day''s event log partition and its size.'")
    for statement in DROP_LOGS:
        op.execute(statement)


COMMENTS = (
    "COMMENT ON TABLE event_log IS 'The durable, replayable stream of each response (read it through the "
    "response_events view), a partition a day (event_log_YYYY_MM_DD: the day its response was created).'",
    "COMMENT ON COLUMN event_log.log_key IS 'responses.log_key of its response'",
    "COMMENT ON COLUMN event_log.sequence_number IS '0, 1, 2, … per response, no gaps (a run: its last delta''s)'",
    "COMMENT ON COLUMN event_log.template IS 'a delta: event_templates.id, payload is only the delta''s JSON; "
    "null: payload is the whole event'",
    "COMMENT ON COLUMN event_log.run_length IS 'a run of that many consecutive deltas of its template, folded "
    "when its response ended: payload is the JSON array of their texts; null: one event'",
    "COMMENT ON COLUMN event_log.type IS 'SSE event type, e.g. response.created (null: the template''s)'",
    "COMMENT ON COLUMN event_log.payload IS 'the event as sent, sequence_number included, never parsed here "
    "(a delta: its JSON string only; a closing event of a large answer: without its piece of the output)'",
    "COMMENT ON COLUMN event_log.output_at IS 'where in payload a piece of the response''s output items was left "
    "out (characters); null: none'",
    "COMMENT ON COLUMN event_log.output_path IS 'which piece: its path in the output items ({} all, {2} item 2, "
    "{2,content,0,text} its text)'",
    "COMMENT ON TABLE event_templates IS 'What the deltas of one part of a response share: the event without its "
    "delta, once.'",
    "COMMENT ON COLUMN event_templates.id IS 'from the delta type and its output and content indexes "
    "(app/storage/event_templates.py)'",
    "COMMENT ON COLUMN event_templates.type IS 'SSE event type of its deltas'",
    "COMMENT ON COLUMN event_templates.prefix IS 'the event''s JSON before the delta''s value'",
    "COMMENT ON COLUMN event_templates.suffix IS 'the event''s JSON after the delta''s value, without its closing brace'",
)


def downgrade() -> None:
    op.execute("DROP TRIGGER responses_drop_event_logs ON responses")
    op.execute("DROP FUNCTION drop_event_logs()")
    op.execute("DROP VIEW event_log_days")
    # A purged log whose day had not been dropped yet is left behind: before this, it was deleted.
    op.execute(f"""
        CREATE TABLE response_events_v14 AS
        SELECT r.id AS response_id, x.sequence_number, coalesce(e.type, t.type) AS type,
               CASE WHEN e.template IS NOT NULL
                    THEN t.prefix || x.body || t.suffix || ',"sequence_number":' || x.sequence_number || '}}'
                    ELSE e.payload END AS payload,
               e.output_at, e.output_path
        FROM event_log e JOIN responses r ON r.log_key = e.log_key
        LEFT JOIN event_templates t ON t.log_key = e.log_key AND t.id = e.template
        {EACH_EVENT}
        WHERE r.events_purged_at IS NULL
    """)
    op.execute("DROP VIEW response_overview")
    op.execute("ALTER TABLE responses ADD COLUMN next_sequence_number integer NOT NULL DEFAULT 0")
    op.execute("""
        UPDATE responses r SET next_sequence_number = n.next
        FROM (SELECT log_key, max(sequence_number) + 1 AS next FROM event_log GROUP BY log_key) n
        WHERE n.log_key = r.log_key
    """)
    op.execute(
        "COMMENT ON COLUMN responses.next_sequence_number IS 'sequence number the next event of this response gets'"
    )
    op.execute(f"CREATE VIEW response_overview AS {RESPONSE_OVERVIEW_V14}")
    op.execute(OVERVIEW_COMMENT)
    op.execute("DROP VIEW response_events")
    op.execute("""
        CREATE TABLE response_events (
            response_id text NOT NULL,
            sequence_number integer NOT NULL,
            type text NOT NULL,
            payload text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            output_at integer,
            output_path text[],
            CONSTRAINT pk_response_events PRIMARY KEY (response_id, sequence_number),
            CONSTRAINT fk_response_events_response_id_responses FOREIGN KEY (response_id)
                REFERENCES responses (id) ON DELETE CASCADE
        )
    """)
    op.execute("""
        INSERT INTO response_events (response_id, sequence_number, type, payload, output_at, output_path)
        SELECT response_id, sequence_number, type, payload, output_at, output_path FROM response_events_v14
    """)
    op.execute("DROP TABLE response_events_v14")
    for column, comment in V14_COMMENTS.items():
        op.execute(f"COMMENT ON COLUMN response_events.{column} IS '{comment}'")
    op.execute(
        "COMMENT ON TABLE response_events IS 'The durable, replayable stream of each response: "
        "what SSE followers read.'"
    )
    op.execute("DROP TABLE event_templates")
    op.execute("DROP TABLE event_log")
    op.execute("ALTER TABLE responses DROP COLUMN log_key")
    op.execute("DROP FUNCTION new_log_key()")
    op.execute("DROP SEQUENCE response_log_keys")


V14_COMMENTS = {
    "sequence_number": "0, 1, 2, … per response, no gaps",
    "type": "SSE event type, e.g. response.output_text.delta",
    "payload": "the event as sent, sequence_number included: the worker''s JSON text, never parsed here "
    "(a closing event of a large answer without its piece of the output: see output_at)",
    "created_at": "when the row was created",
    "output_at": "where in payload a piece of the response''s output items was left out (characters); null: none",
    "output_path": "which piece: its path in the output items ({} all, {2} item 2, {2,content,0,text} its text)",
}
