"""closing events refer to the output items

Revision ID: 0009
Revises: 0008

The closing events of a response repeat its output (the text, the part, the item, and the
whole output in the terminal event), which the same statement stores as items: a long answer
was stored five times in its events. A closing event of a large answer is now stored with that
piece left out, and where and what it was (app/storage/output_refs.py); reads put it back. Rows
written before keep their payloads whole (both columns null).
Create Date: 2026-12-01 11:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "response_events",
        sa.Column(
            "output_at",
            sa.Integer(),
            nullable=True,
            comment="where in payload a piece of the response's output items was left out (characters); null: none",
        ),
    )
    op.add_column(
        "response_events",
        sa.Column(
            "output_path",
            postgresql.ARRAY(sa.Text()),
            nullable=True,
            comment="which piece: its path in the output items ({} all, {2} item 2, {2,content,0,text} its text)",
        ),
    )
    op.alter_column(
        "response_events",
        "payload",
        existing_type=sa.Text(),
        existing_nullable=False,
        comment="the event as sent, sequence_number included: the worker's JSON text, never parsed here "
        "(a closing event of a large answer without its piece of the output: see output_at)",
        existing_comment="the event as sent, sequence_number included: the worker's JSON text, never parsed here",
    )


def downgrade() -> None:
    # Put every left-out piece back first, so the payloads are whole again.
    op.execute("""
        UPDATE response_events e SET payload = left(e.payload, e.output_at) || (
            SELECT ((
                '[' || coalesce(string_agg('{"id":' || to_json(i.id)::text || ',' || substr(i.payload::text, 2),
                                           ',' ORDER BY i.position), '') || ']'
            )::json #> e.output_path)::text
            FROM items i WHERE i.response_id = e.response_id AND i.side = 'output'
        ) || substr(e.payload, e.output_at + 1)
        WHERE e.output_at IS NOT NULL
    """)
    op.alter_column(
        "response_events",
        "payload",
        existing_type=sa.Text(),
        existing_nullable=False,
        comment="the event as sent, sequence_number included: the worker's JSON text, never parsed here",
        existing_comment="the event as sent, sequence_number included: the worker's JSON text, never parsed here "
        "(a closing event of a large answer without its piece of the output: see output_at)",
    )
    op.drop_column("response_events", "output_path")
    op.drop_column("response_events", "output_at")
