"""event_log_after(key, after, most), event_log_last(key): a log read in its own partition alone

Revision ID: 0024
Revises: 0023

A read of a log by the key in its response's row opened every partition of `event_log` at each
run: the key is known only as the statement runs, after Postgres has set up a scan of each day's
partition (about 7 µs each: 3 ms with the partitions of 400 days). A PL/pgSQL function's query
takes the key as a parameter of its own, from which Postgres leaves out every partition but the
key's before setting up any. The service's reads (app/storage/events.py `_log_after`) and the
operators' view `response_events` read a log through it: its rows after a sequence number, in
order, at most `most` of them (NULL: all), each opening event that refers to the event before with
that event's response object (`response_object`); `event_log_last` tells the number of its last
event (app/storage/events.py `log_ends`). The view looked that object up in a subquery of
each row, whose estimate, through `event_log`, passed Postgres's `jit_above_cost` with the
partitions of 90 days: a psql session compiled (JIT) each read of the view. Its columns and rows
are unchanged.
Create Date: 2026-12-07 09:10:00
"""

from __future__ import annotations

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

# An opening event stored without its response object (`output_path` `{response}`) takes it from
# the event before: `{"type":"…","response":` OBJECT `,"sequence_number":N}`. Estimated at 10 rows (a
# follower's read after what it was sent; Postgres's default for a function is 1,000): the plans
# around it look up each row's template by its key.
EVENT_LOG_AFTER = """
CREATE FUNCTION event_log_after(key bigint, after int, most int)
RETURNS TABLE (sequence_number int, template int, run_length int, output_at int, type text, payload text,
               output_path text[], response_object text)
LANGUAGE plpgsql STABLE ROWS 10 AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT e.sequence_number, e.template, e.run_length, e.output_at, e.type, e.payload, e.output_path,
           substr(p.payload, length(p.type) + 23,
                  length(p.payload) - length(p.type) - 22
                  - length(',"sequence_number":' || p.sequence_number || '}'))
    FROM event_log e
    LEFT JOIN event_log p ON e.output_path = '{response}'
                         AND p.log_key = key AND p.sequence_number = e.sequence_number - 1
    WHERE e.log_key = key AND e.sequence_number > after
    ORDER BY e.sequence_number
    LIMIT most;
END
$$
"""

# The number of the last event a log holds (NULL: none), read in the key's partition alone too.
EVENT_LOG_LAST = """
CREATE FUNCTION event_log_last(key bigint) RETURNS int
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT max(e.sequence_number) FROM event_log e WHERE e.log_key = key);
END
$$
"""

OUTPUT_PIECE = """
    (SELECT ((
        '[' || coalesce(string_agg('{"id":' || to_json(i.id)::text || ',' || substr(i.payload::text, 2),
                                   ',' ORDER BY i.position), '') || ']'
     )::json #> e.output_path)::text
     FROM items i WHERE i.response_id = r.id AND i.side = 'output')
"""
# (as migration 0021 wrote it)
OPENING_PIECE_LOOKED_UP = """
    (SELECT substr(p.payload, length(p.type) + 23,
                   length(p.payload) - length(p.type) - 22 - length(',"sequence_number":' || p.sequence_number || '}'))
     FROM event_log p WHERE p.log_key = e.log_key AND p.sequence_number = e.sequence_number - 1)
"""
EACH_EVENT_OF_A_ROW = """
    CROSS JOIN LATERAL (
        SELECT e.sequence_number, e.payload AS body WHERE e.run_length IS NULL
        UNION ALL
        SELECT e.sequence_number - e.run_length + d.n::int, d.value::text
        FROM json_array_elements(e.payload::json) WITH ORDINALITY AS d(value, n) WHERE e.run_length IS NOT NULL
    ) x
"""


def response_events(through_function: bool) -> str:
    opening_piece = "e.response_object" if through_function else OPENING_PIECE_LOOKED_UP
    log = (
        "responses r CROSS JOIN LATERAL event_log_after(r.log_key, -1, NULL) e"
        if through_function
        else "event_log e JOIN responses r ON r.log_key = e.log_key"
    )
    return f"""
    SELECT r.id AS response_id, x.sequence_number, coalesce(e.type, t.type) AS type,
           CASE WHEN e.template IS NOT NULL
                THEN t.prefix || x.body || t.suffix || ',"sequence_number":' || x.sequence_number || '}}'
                WHEN e.output_at IS NULL THEN e.payload
                WHEN e.output_path = '{{response}}'
                THEN left(e.payload, e.output_at) || {opening_piece} || substr(e.payload, e.output_at + 1)
                ELSE left(e.payload, e.output_at) || {OUTPUT_PIECE} || substr(e.payload, e.output_at + 1)
           END AS payload,
           e.output_at, e.output_path, r.log_key
    FROM {log}
    LEFT JOIN event_templates t ON t.log_key = r.log_key AND t.id = e.template
    {EACH_EVENT_OF_A_ROW}
    WHERE r.events_purged_at IS NULL
"""


def upgrade() -> None:
    op.execute(EVENT_LOG_AFTER)
    op.execute(
        "COMMENT ON FUNCTION event_log_after(bigint, int, int) IS 'The rows of the event log of key after a "
        "sequence number, in order, at most most of them (NULL: all), read in the key''s partition alone.'"
    )
    op.execute(EVENT_LOG_LAST)
    op.execute(
        "COMMENT ON FUNCTION event_log_last(bigint) IS 'The number of the last event of the event log of key "
        "(NULL: none), read in the key''s partition alone.'"
    )
    op.execute(f"CREATE OR REPLACE VIEW response_events AS {response_events(through_function=True)}")


def downgrade() -> None:
    op.execute(f"CREATE OR REPLACE VIEW response_events AS {response_events(through_function=False)}")
    op.execute("DROP FUNCTION event_log_after(bigint, int, int), event_log_last(bigint)")
