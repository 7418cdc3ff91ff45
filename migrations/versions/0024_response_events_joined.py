"""response_events joins the event before an opening event

Revision ID: 0024
Revises: 0023

The operators' view `response_events` puts an opening event's response object back from the
event before it, which it looked up in a subquery of each row. Through `event_log`, estimated as
a lookup under each day partition's scan, that subquery's cost passed Postgres's
`jit_above_cost` with the partitions of 90 days, and a psql session compiled (JIT) each read of
the view: 0.6 s. It joins the event before instead, as the service's own reads do
(app/storage/events.py `_log_after`). Its columns and rows are unchanged.
Create Date: 2026-12-07 09:10:00
"""

from __future__ import annotations

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

# (as migration 0021 wrote them)
OUTPUT_PIECE = """
    (SELECT ((
        '[' || coalesce(string_agg('{"id":' || to_json(i.id)::text || ',' || substr(i.payload::text, 2),
                                   ',' ORDER BY i.position), '') || ']'
     )::json #> e.output_path)::text
     FROM items i WHERE i.response_id = r.id AND i.side = 'output')
"""
OPENING_PIECE_LOOKED_UP = """
    (SELECT substr(p.payload, length(p.type) + 23,
                   length(p.payload) - length(p.type) - 22 - length(',"sequence_number":' || p.sequence_number || '}'))
     FROM event_log p WHERE p.log_key = e.log_key AND p.sequence_number = e.sequence_number - 1)
"""
OPENING_PIECE_JOINED = """
    substr(p.payload, length(p.type) + 23,
           length(p.payload) - length(p.type) - 22 - length(',"sequence_number":' || p.sequence_number || '}'))
"""
EVENT_BEFORE = """
    LEFT JOIN event_log p ON e.output_path = '{response}'
                         AND p.log_key = e.log_key AND p.sequence_number = e.sequence_number - 1
"""


def response_events(joined: bool) -> str:
    opening_piece = OPENING_PIECE_JOINED if joined else OPENING_PIECE_LOOKED_UP
    return f"""
    SELECT r.id AS response_id, x.sequence_number, coalesce(e.type, t.type) AS type,
           CASE WHEN e.template IS NOT NULL
                THEN t.prefix || x.body || t.suffix || ',"sequence_number":' || x.sequence_number || '}}'
                WHEN e.output_at IS NULL THEN e.payload
                WHEN e.output_path = '{{response}}'
                THEN left(e.payload, e.output_at) || {opening_piece} || substr(e.payload, e.output_at + 1)
                ELSE left(e.payload, e.output_at) || {OUTPUT_PIECE} || substr(e.payload, e.output_at + 1)
           END AS payload,
           e.output_at, e.output_path, e.log_key
    FROM event_log e
    JOIN responses r ON r.log_key = e.log_key
    LEFT JOIN event_templates t ON t.log_key = e.log_key AND t.id = e.template
    {EVENT_BEFORE if joined else ""}
    CROSS JOIN LATERAL (
        SELECT e.sequence_number, e.payload AS body WHERE e.run_length IS NULL
        UNION ALL
        SELECT e.sequence_number - e.run_length + d.n::int, d.value::text
        FROM json_array_elements(e.payload::json) WITH ORDINALITY AS d(value, n) WHERE e.run_length IS NOT NULL
    ) x
    WHERE r.events_purged_at IS NULL
"""


def upgrade() -> None:
    op.execute(f"CREATE OR REPLACE VIEW response_events AS {response_events(joined=True)}")


def downgrade() -> None:
    op.execute(f"CREATE OR REPLACE VIEW response_events AS {response_events(joined=False)}")
